"""TRL's multi-turn GRPOTrainer on derl/ALFWorld-v0 through derl_bench.grpo.trl."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from derl_bench.family import resolve_family
from derl_bench.grpo.config import ConfigError, TrainConfig
from derl_bench.grpo.trl import (
    EPISODE_OVER,
    AgentToolEnv,
    agent_dataset,
    agent_trainer,
    init_tool_model,
    meta_reward_funcs,
    tool_call_demos,
    tool_call_text,
    with_tool_template,
)
from derl_bench.reward import compile_reward

ENV = "derl/ALFWorld-v0"
REWARD = "success + mean(action_admissible) - 0.1 * step_fraction"


def _config(tmp_path: Path, model: str, **changes: object) -> TrainConfig:
    values = dict(name="trl-alfworld", env_id=ENV, level="L0", trainer="trl", model=model,
                  meta_reward=REWARD, group_size=2, prompts_per_step=1, steps=2,
                  max_episode_steps=2, max_new_tokens=40, learning_rate=1e-4,
                  output_dir=str(tmp_path / "run"), tensorboard=False, progress=False,
                  save_every=0)
    values.update(changes)
    return TrainConfig(**values)


@pytest.fixture(scope="module")
def tool_model(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model fine-tuned on ALFWorld walkthrough steps rendered as ``act`` calls."""
    from derl_bench.sft import SFTConfig, run_sft

    root = tmp_path_factory.mktemp("tool-model")
    init = init_tool_model(root / "init")
    # The opening calls of the games the runs below play (their reset seeds): a 2-layer model
    # learns them within seconds.
    games = agent_dataset(_config(root, "tiny"))["reset_seed"]
    config = SFTConfig(env_id=ENV, output=str(root / "sft"), model=str(init), level="L0",
                       steps=150, batch_size=4, learning_rate=5e-3, max_episode_steps=1,
                       num_threads=1)
    run_sft(config, demos=functools.partial(tool_call_demos, seeds=games))
    return root / "sft"


def test_act_steps_the_env_and_records_primitives(data_root):
    env = AgentToolEnv(ENV, resolve_family(ENV), {"level": "L0"}, max_steps=2)
    first = env.reset(game_index=0, prompt=[])  # TRL passes the whole row, prompt included
    assert "Your task is to" in first and env.commands == []
    answers = [env.act("look"), env.act("inventory")]
    assert env.commands == ["look", "inventory"] and len(env.primitive_steps) == 2
    assert all(s["format_valid"] == 1.0 for s in env.primitive_steps)
    assert answers[-1].endswith(EPISODE_OVER) and env.act("look") == EPISODE_OVER
    assert len(env.commands) == 2
    with pytest.raises(ValueError, match="exactly one"):
        env.reset()


def test_scienceworld_plays_through_the_same_tool(data_root):
    with AgentToolEnv("derl/ScienceWorld-v0", resolve_family("derl/ScienceWorld-v0"),
                      {"level": "L0", "max_episode_steps": 1}, max_steps=5) as env:
        assert env.reset(reset_seed=3) and env.primitive_steps == []
        answer = env.act("look around")
    assert answer.endswith(EPISODE_OVER) and env.commands == ["look around"]
    reward = compile_reward("success + mean(action_valid) + mean(format_valid)",
                            env="derl/ScienceWorld-v0")
    assert reward.episodic_from_steps([env.primitive_steps])[0] >= 1.0  # format_valid is 1


def test_a_math_env_is_rejected():
    with pytest.raises(ConfigError, match="not an agent env"):
        AgentToolEnv("derl/GSM8K-v0", resolve_family("derl/GSM8K-v0"))


def test_the_tiny_template_gains_tool_calls(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(init_tool_model(tmp_path / "m")))
    text = tool_call_text(tokenizer, [{"role": "user", "content": "hi"}], "go to desk 1")
    assert text == ('<tool_call>\n{"name": "act", "arguments": {"command": "go to desk 1"}}'
                    '\n</tool_call>')
    assert with_tool_template(tokenizer).chat_template == tokenizer.chat_template


def test_trl_grpo_trains_two_steps_on_alfworld_through_the_adapter(tool_model, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    config = _config(tmp_path, str(tool_model))
    compiled = compile_reward(REWARD, env=ENV)
    reward, success = meta_reward_funcs(config, compiled, resolve_family(ENV))
    seen: list[tuple[list[list[str]], list[float], np.ndarray]] = []

    def meta_reward(environments, **kwargs):  # the adapter's reward, with what it scored kept
        values = reward(environments, **kwargs)
        steps = [list(e.primitive_steps) for e in environments]
        seen.append(([list(e.commands) for e in environments], values,
                     compiled.episodic_from_steps(steps)))
        return values

    meta_reward.__name__ = "meta_reward"
    trainer = agent_trainer(config, [meta_reward, success], resolve_family(ENV))
    trainer.train()
    assert trainer.state.global_step == 2 and len(seen) == 2
    calls = [c for batch, _, _ in seen for episode in batch for c in episode]
    assert calls, "the env received no tool call from the model"
    for _, values, expected in seen:
        np.testing.assert_allclose(values, expected)
    logged = [e for e in trainer.state.log_history if "reward" in e]
    assert len(logged) == 2
    for entry, (_, values, _) in zip(logged, seen, strict=True):
        assert entry["reward"] == pytest.approx(float(np.mean(values)), abs=1e-5)
    # Only the opening calls were taught, so some episodes differ and GRPO has a gradient.
    assert any(e["reward_std"] > 0 and e["grad_norm"] > 0 for e in logged)


def test_train_command_runs_trl_for_agents(tool_model, tmp_path, monkeypatch):
    from derl_bench.cli import main

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    recipe = tmp_path / "trl-agent.yaml"
    recipe.write_text(f"env_id: {ENV}\nlevel: L0\ntrainer: trl\nmodel: {tool_model}\n"
                      f"meta_reward: '{REWARD}'\ngroup_size: 2\nprompts_per_step: 1\nsteps: 1\n"
                      "max_episode_steps: 1\nmax_new_tokens: 40\ntensorboard: false\n"
                      "progress: false\n")
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--output", str(run)]) == 0
    assert (run / "final-model" / "config.json").is_file()
    assert (run / "trl" / "checkpoint-1").is_dir()
    assert main(["train", str(recipe), "--output", str(run), "--resume", "steps=2"]) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1] and (run / "trl" / "checkpoint-2").is_dir()


def test_model_sft_tool_calls_saves_a_tool_calling_tiny_model(data_root, tmp_path):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import supports_tool_calling

    from derl_bench.cli import main

    args = ["model", "sft", "--level", "L0", "--steps", "2", "--batch-size", "2", "--tool-calls"]
    assert main([*args, str(tmp_path / "agent"), "--env", ENV]) == 0
    assert supports_tool_calling(AutoTokenizer.from_pretrained(str(tmp_path / "agent")))
    assert main([*args, str(tmp_path / "math"), "--env", "derl/Arithmetic-v0"]) == 2
    assert not (tmp_path / "math").exists()


def test_reward_discovery_refuses_trl_agents_as_inner_runs(tmp_path):
    # its validation plays the paper's protocol, which a tool-calling agent does not speak
    from derl_bench.meta import MetaConfig

    with pytest.raises(ConfigError, match="inner.trainer: trl"):
        MetaConfig(inner=_config(tmp_path, "tiny").to_dict(), output_dir=str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


def test_trainer_for_chooses_by_name_and_refuses_an_unknown_name():
    from derl_bench.grpo.dispatch import TRLTrainer, trainer_for

    assert isinstance(trainer_for("trl"), TRLTrainer)
    with pytest.raises(ConfigError, match="trainer must be one of compact, trl, commands"):
        trainer_for("verl")
