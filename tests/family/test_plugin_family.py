"""A family that lives outside the package runs end to end: its card, env, observers and prompt
sit in tests/family/counting/, found through DERL_BENCH_CARD_PATH, and nothing of derl_bench/
names it."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

from derl_bench import family
from derl_bench.cli import main
from derl_bench.evaluation import adapter_for
from derl_bench.family import family_spec
from derl_bench.policies.prompts import AgentPrompt, AgentTurn
from derl_bench.reward import compile_reward
from tests.dist import write_dist_info

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "counting"
ENV_ID = "derl/Counting-v0"

RECIPE = f"""\
name: counting-outcome
env_id: {ENV_ID}
split: train
meta_reward: "success"
model: tiny
trainer: compact
group_size: 2
prompts_per_step: 1
steps: 2
learning_rate: 1.0e-3
max_new_tokens: 8
history_window: 2
max_episode_steps: 2
seed: 0
save_every: 1
"""


@pytest.fixture
def counting(monkeypatch):
    monkeypatch.setenv("DERL_BENCH_CARD_PATH", str(PLUGIN))
    family.reload()
    yield family_spec(ENV_ID)
    monkeypatch.undo()
    family.reload()


def test_the_family_is_found_through_the_card_path_and_forgotten_without_it(counting):
    assert counting.name == "counting" and counting.multi_turn
    assert ENV_ID in gym.registry
    family.reload()  # the setting is still there: the family stays
    assert ENV_ID in gym.registry


def test_the_plugin_family_steps_observes_and_compiles_rewards(counting):
    env = gym.make(ENV_ID, split="eval")
    _, info = env.reset(options={"index": 0})
    assert info["primitives"] == {"success": 0.0, "env_reward": 0.0}
    _, reward, terminated, _, info = env.step("up")
    assert terminated and reward == 1.0 and info["primitives"]["success"] == 1.0
    reward_fn = compile_reward("success + 0.5 * g1", domain=ENV_ID)
    assert reward_fn.episodic_from_steps([[info["primitives"]]]) == [1.5]
    turn = AgentTurn(task="walk to 1", observation="You stand at 0.",
                     admissible=("up", "down"), history=(), step=0)
    text = AgentPrompt(family.resolve_family(ENV_ID).prompt).messages(turn)[0]["content"]
    assert text.startswith("You are an expert agent walking on a number line.")
    assert adapter_for(ENV_ID).eval_set("L0").entries == ("goal:1#0", "goal:2#1", "goal:1#2")


@pytest.mark.slow
def test_the_plugin_family_trains_evaluates_and_makes_a_board(counting, tmp_path):
    recipe = tmp_path / "counting.yaml"
    recipe.write_text(RECIPE)
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--output", str(run), "progress=false",
                 "tensorboard=false"]) == 0
    checkpoint = run / "checkpoints" / "step-2"
    assert (checkpoint / "model.safetensors").is_file()

    boards = tmp_path / "leaderboards"
    record = boards / "counting" / "tiny-grpo-none-L0.json"
    record.parent.mkdir(parents=True)
    assert main(["evaluate", "--env", ENV_ID, "--level", "L0", "--policy", f"llm:{checkpoint}",
                 "--output", str(record), "--max-new-tokens", "8", "--method", "grpo",
                 "--model", "tiny", "--checkpoint", "final", "--no-progress"]) == 0
    saved = json.loads(record.read_text())
    assert saved["benchmark"] == "counting" and saved["env"]["id"] == ENV_ID
    assert saved["results"]["n"] == 3

    assert main(["leaderboard", "validate", "--dir", str(boards), str(record)]) == 0
    assert main(["leaderboard", "render", "--dir", str(boards), "--no-charts"]) == 0
    page = (boards / "README.md").read_text()
    assert "Counting" in page and "| grpo |" in page
    html = (boards / "index.html").read_text()
    assert "the walker reaches its goal within 4 steps" in html


def test_an_installed_distribution_adds_the_family_through_its_entry_point(tmp_path,
                                                                          monkeypatch):
    # the entry point names the module whose folder holds the card, as a package would
    write_dist_info(tmp_path, "derl-bench-counting", "derl_bench.cards",
                    "counting = tests.family.counting.counting_env")
    monkeypatch.delenv("DERL_BENCH_CARD_PATH", raising=False)
    family.reload()
    assert ENV_ID not in gym.registry
    monkeypatch.syspath_prepend(str(tmp_path))
    family.reload()
    try:
        assert family_spec(ENV_ID).name == "counting"
        env = gym.make(ENV_ID, split="eval")
        assert env.reset(seed=0)[1]["primitives"]["success"] == 0.0
        env.close()
    finally:
        monkeypatch.undo()
        family.reload()
    assert ENV_ID not in gym.registry
