"""derl-bench as a verifiers 0.4 taskset (``environments/derl_bench_v1``) and as an OpenEnv server
played by verifiers' own OpenEnv taskset: the real verifiers loader, env, interception server,
trace and scoring, and the real ``openenv`` client, with the model replaced by a script served
on 127.0.0.1. The same numbers through every door are tested in ``test_same_numbers.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

vf = pytest.importorskip("verifiers.v1")
pytest.importorskip("derl_bench_v1")
pytest.importorskip("openenv.core")

from verifiers.v1.cli.eval.runner import run_eval  # noqa: E402
from verifiers.v1.configs.cli.eval import EvalConfig  # noqa: E402

import derl_bench  # noqa: E402, F401  (registers the envs)
from derl_bench.families.alfworld.engine import libraries_in_use  # noqa: E402
from derl_bench.family import family_specs  # noqa: E402
from derl_bench.integrations.sessions import TaskError  # noqa: E402
from tests.integrations.scripted_model import ScriptedModel, scripted_endpoint  # noqa: E402

TASKSET = "derl-bench-v1"
KEY_VAR = "DERL_BENCH_TEST_MODEL_KEY"  # unset: the scripted model takes any key
SOLVED = "48 / 2 = 24, 48 + 24 = 72. \\boxed{72}"


def _context(url: str) -> Any:
    return vf.ModelContext(model="scripted",
                           client=vf.EvalClientConfig(base_url=url, api_key_var=KEY_VAR))


def play(env_config: dict[str, Any], replies: list[str], limit: int | None = None,
         ) -> tuple[Any, list[Any], ScriptedModel]:
    """The episodes of the env ``env_config`` names (its first ``limit`` tasks), one at a time,
    through verifiers' loader and ``Env.run_episode``; the env, its episodes and the model."""
    model = ScriptedModel(replies)

    async def run(url: str) -> tuple[Any, list[Any]]:
        env = vf.load_environment(vf.resolve_env_config(env_config))
        tasks = list(env.taskset if limit is None else env.taskset.take(limit))
        async with env.serving():
            return env, [await env.run_episode(task, _context(url)) for task in tasks]

    with scripted_endpoint(model) as url:
        env, episodes = asyncio.run(run(url))
    return env, episodes, model


def _taskset(**fields: Any) -> dict[str, Any]:
    return {"taskset": {"id": TASKSET, **fields}}


def _only_trace(episode: Any) -> Any:
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert trace.ok, trace.errors
    return trace


def test_the_package_exports_one_taskset_its_env_and_its_harness():
    import derl_bench_v1
    from verifiers.v1.utils.loaders import (
        default_harness_id,
        environment_class,
        taskset_class,
    )

    assert taskset_class(TASKSET) is derl_bench_v1.DerlBenchTaskset
    assert environment_class(TASKSET) is derl_bench_v1.DerlBenchEnv
    assert default_harness_id(TASKSET) == TASKSET
    # the id's module is the taskset package, not the derl_bench library
    assert derl_bench_v1.__name__ == TASKSET.replace("-", "_")


def test_vf_eval_runs_gsm8k_offline_and_writes_the_meta_reward_and_primitives(
        data_root, tmp_path):
    model = ScriptedModel([SOLVED, "It is 71."])
    with scripted_endpoint(model) as url:
        config = EvalConfig.model_validate({
            "env": _taskset(env_id="derl/GSM8K-v0", reward="outcome + 0.5 * format_boxed"),
            "model": "scripted", "client": {"base_url": url, "api_key_var": KEY_VAR},
            "select": {"limit": 2}, "max_concurrent": 1, "push": False, "rich": None,
            "output_dir": str(tmp_path)})
        episodes = asyncio.run(run_eval(config))
    right, wrong = (_only_trace(e) for e in episodes)
    assert model.requests[0][-1]["content"].startswith("Natalia sold clips")
    assert model.requests[0][0]["role"] == "system"
    assert [t.task.data.index for t in (right, wrong)] == [0, 1]
    assert right.task.data.id == "train/0"
    # the Meta-Reward is the one reward; every card primitive is a metric of its own
    assert right.rewards["meta_reward"].score == 1.5 and right.reward == 1.5
    assert wrong.reward == 0.0 and list(wrong.rewards) == ["meta_reward"]
    assert right.metrics["outcome"] == 1.0 and right.metrics["format_boxed"] == 1.0
    assert wrong.metrics["answer_parsed"] == 1.0 and wrong.metrics["outcome"] == 0.0
    assert set(right.metrics) == set(family_specs()["math"].primitives)
    assert right.info["derl"]["primitive_steps"] == [
        {k: right.metrics[k] for k in right.metrics}]
    (traces,) = tmp_path.glob("*/traces.jsonl")
    written = [json.loads(line) for line in traces.read_text().splitlines()]
    assert sorted(t["rewards"]["meta_reward"]["score"]
                  for w in written for t in w["traces"]) == [0.0, 1.5]


def test_the_vf_eval_command_loads_the_taskset_by_its_id(data_root, tmp_path):
    model = ScriptedModel([SOLVED])
    with scripted_endpoint(model) as url:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "vf-eval"), TASKSET,
             "--env.taskset.env-id", "derl/GSM8K-v0", "-n", "1", "-m", "scripted",
             "--client.base-url", url, "--client.api-key-var", KEY_VAR, "--no-push",
             "--no-rich", "-o", str(tmp_path)],
            capture_output=True, text=True, timeout=600, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    (traces,) = tmp_path.glob("*/traces.jsonl")
    (episode,) = [json.loads(line) for line in traces.read_text().splitlines()]
    # the default reward is the family's success primitive
    assert episode["traces"][0]["task"]["data"]["reward"] == "outcome"
    assert episode["traces"][0]["rewards"]["meta_reward"]["score"] == 1.0
    assert len(model.requests) == 1


def test_alfworld_is_played_turn_by_turn_from_the_rows_seed(data_root):
    local = gym.make("derl/ALFWorld-v0")
    first, info = local.reset(seed=5)
    local.close()
    walkthrough = info["walkthrough"]
    replies = [f"<think>go on</think><action>{c}</action>" for c in walkthrough]
    env, (episode,), model = play(
        _taskset(env_id="derl/ALFWorld-v0", reward="success", seeds=[5], max_episode_steps=40),
        replies)
    trace = _only_trace(episode)
    assert model.requests[0][-1]["content"] == first  # the model sees the game's start
    assert trace.task.data.seed == 5 and trace.task.data.prompt is None
    assert trace.reward == 1.0 and trace.metrics["success"] == 1.0
    assert trace.metrics["format_valid"] == 1.0
    record = trace.info["derl"]
    assert len(record["primitive_steps"]) == len(walkthrough) == len(model.requests)
    assert record["observations"][0] == first
    assert trace.stop_condition == "terminated"
    # the env was kept for the next episode while serving, and closed when serving ended
    assert env.pool.idle() == 0 and libraries_in_use() == 0


def test_an_alfworld_episode_stops_at_the_step_cap(data_root):
    _, (episode,), model = play(
        _taskset(env_id="derl/ALFWorld-v0", reward="success + mean(action_admissible)",
                 seeds=[1], max_episode_steps=3),
        ["<think>hm</think><action>look</action>"])
    trace = _only_trace(episode)
    assert len(trace.info["derl"]["primitive_steps"]) == 3 == len(model.requests)
    assert trace.stop_condition == "truncated"
    assert trace.metrics["step_fraction"] == 1.0
    assert trace.reward == pytest.approx(1.0)  # look is always admissible; no success


def test_bad_values_are_refused_when_the_env_is_loaded(data_root):
    cases = [
        (dict(env_id="derl/GSM8k-v0"), "did you mean derl/GSM8K-v0"),
        (dict(env_id="derl/GSM8K-v0", reward="outcome +"), re.escape("reward 'outcome +'")),
        (dict(env_id="derl/GSM8K-v0", level="L9"), "L9"),
        (dict(env_id="derl/ALFWorld-v0", seeds=[-1]), "seed must be a non-negative integer"),
        (dict(env_id="derl/GSM8K-v0", seeds=[0]), "seeds do not apply"),
        (dict(env_id="derl/ALFWorld-v0", max_episode_steps=0), "positive integer"),
    ]
    for fields, message in cases:
        with pytest.raises(TaskError, match=message):
            vf.load_environment(vf.resolve_env_config(_taskset(**fields)))


def test_an_agent_env_under_another_verifiers_env_is_refused_before_it_plays(data_root):
    # only the taskset's own env steps the game between turns; a plain agent run has no
    # first observation to open the conversation with
    config = {**_taskset(env_id="derl/ALFWorld-v0", seeds=[0]), "id": "single-agent",
              "agent": {"runtime": {"type": "subprocess"}}}
    _, (episode,), _ = play(config, ["<think>x</think><action>look</action>"])
    assert not episode.ok
    messages = " ".join(e.message for t in episode.traces for e in t.errors)
    assert "task has no prompt" in messages
