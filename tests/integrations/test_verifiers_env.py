"""derl-bench as a verifiers environment: verifiers' real rollout loop and OpenAI client, with
the model replaced by a script served on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

vf = pytest.importorskip("verifiers")

from openai import AsyncOpenAI  # noqa: E402

import derl_bench  # noqa: E402
from derl_bench.families.alfworld.engine import libraries_in_use  # noqa: E402
from derl_bench.integrations.sessions import TaskError  # noqa: E402
from derl_bench.integrations.verifiers_env import (  # noqa: E402
    DerlMultiTurnEnv,
    DerlSingleTurnEnv,
)
from tests.integrations.scripted_model import ScriptedModel, scripted_endpoint  # noqa: E402

COLUMNS = ["primitive_steps", "observations", "env_rewards"]


def rollout(env, row, replies: list[str]) -> tuple[dict, ScriptedModel]:
    """One rollout of ``row`` with verifiers' ``run_rollout`` against the scripted model."""
    model = ScriptedModel(replies)
    with scripted_endpoint(model) as url:
        client = vf.OpenAIChatCompletionsClient(AsyncOpenAI(base_url=url, api_key="none"))
        out = asyncio.run(env.run_rollout(row, client, "scripted", {}, state_columns=COLUMNS))
    return dict(out), model


def test_gsm8k_is_a_single_turn_env_scored_by_the_meta_reward(data_root):
    env = derl_bench.load_environment(env_id="derl/GSM8K-v0",
                                      reward="outcome + 0.5 * format_boxed", num_examples=4)
    assert isinstance(env, DerlSingleTurnEnv) and isinstance(env, vf.SingleTurnEnv)
    rows = env.get_dataset()
    assert len(rows) == 4 and [r["info"]["index"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["prompt"][-1]["content"].startswith("Natalia sold clips")
    right, model = rollout(env, rows[0], ["48 / 2 = 24, 48 + 24 = 72. \\boxed{72}"])
    wrong, _ = rollout(env, rows[0], ["It is 71."])
    assert model.requests[0][-1]["content"].startswith("Natalia sold clips")
    assert right["reward"] == 1.5 and wrong["reward"] == 0.0
    # every primitive is logged, with weight 0: the reward is the Meta-Reward alone
    assert right["metrics"]["outcome"] == 1.0 and right["metrics"]["format_boxed"] == 1.0
    assert wrong["metrics"]["answer_parsed"] == 1.0 and wrong["metrics"]["outcome"] == 0.0
    names = ["meta_reward", "outcome", "format_boxed", "cot_steps", "loose_outcome",
             "response_length", "answer_parsed", "env_reward"]
    # verifiers adds its own turn count, another zero-weight metric
    assert env.rubric._get_reward_func_names() == [*names, "num_turns"]
    assert env.rubric._get_reward_weights() == [1.0] + [0.0] * 8


def test_alfworld_is_a_multi_turn_env_that_plays_the_rows_seed(data_root):
    env = derl_bench.load_environment(env_id="derl/ALFWorld-v0", reward="success",
                                      seeds=[5], max_episode_steps=40)
    assert isinstance(env, DerlMultiTurnEnv) and isinstance(env, vf.MultiTurnEnv)
    import gymnasium as gym

    local = gym.make("derl/ALFWorld-v0")
    first, info = local.reset(seed=5)
    local.close()
    walkthrough = info["walkthrough"]
    replies = [f"<think>go on</think><action>{c}</action>" for c in walkthrough]
    out, model = rollout(env, env.get_dataset()[0], replies)
    assert model.requests[0][-1]["content"] == first  # the prompt ends with the game's start
    assert out["reward"] == 1.0 and out["metrics"]["success"] == 1.0
    assert out["metrics"]["format_valid"] == 1.0
    assert len(out["primitive_steps"]) == len(walkthrough) == len(model.requests)
    assert out["stop_condition"] == "has_final_env_response"
    assert out["observations"][0] == first
    asyncio.run(env._teardown())
    assert libraries_in_use() == 0


def test_a_multi_turn_rollout_stops_at_the_step_cap(data_root):
    env = derl_bench.load_environment(env_id="derl/ALFWorld-v0", seeds=[1], max_episode_steps=3,
                                      reward="success + mean(action_admissible)")
    out, model = rollout(env, env.get_dataset()[0], ["no tags here, just words"])
    assert len(model.requests) == 3 and len(out["primitive_steps"]) == 3
    assert [s["format_valid"] for s in out["primitive_steps"]] == [0.0, 0.0, 0.0]
    assert out["reward"] == 0.0  # nothing admissible, nothing won
    asyncio.run(env._teardown())
    assert libraries_in_use() == 0


def test_vf_load_environment_finds_derl_bench_as_a_module(data_root):
    env = vf.load_environment("derl-bench", env="derl/Arithmetic-v0", num_examples=2)
    assert isinstance(env, DerlSingleTurnEnv) and env.env_id == "derl/Arithmetic-v0"
    assert env.env_args["reward"] == "outcome"  # the family's success primitive by default


def test_bad_arguments_are_refused_before_any_rollout(data_root):
    with pytest.raises(TaskError, match="unknown env id"):
        derl_bench.load_environment(env_id="derl/GSM9K-v0")
    with pytest.raises(TaskError, match="did you mean 'outcome'"):
        derl_bench.load_environment(env_id="derl/GSM8K-v0", reward="outcom")
    with pytest.raises(TaskError, match="no level 'L4'"):
        derl_bench.load_environment(env_id="derl/ALFWorld-v0", level="L4")
    with pytest.raises(TaskError, match="action_format"):
        derl_bench.load_environment(env_id="derl/GSM8K-v0", action_format="command")


def test_a_step_cap_or_seed_the_server_refuses_is_refused_at_load(data_root):
    # The server refuses both (a reset's max_episode_steps=0, seed=-1); so does this door,
    # at load, not with the card's cap or in the middle of a rollout.
    with pytest.raises(TaskError, match="max_episode_steps must be a positive integer, not 0"):
        derl_bench.load_environment(env_id="derl/ALFWorld-v0", max_episode_steps=0)
    with pytest.raises(TaskError, match="seed must be a non-negative integer, not -1"):
        derl_bench.load_environment(env_id="derl/ALFWorld-v0", seeds=[-1, 0])
    with pytest.raises(TaskError, match="seed must be a non-negative integer, not '3'"):
        derl_bench.load_environment(env_id="derl/ALFWorld-v0", seeds=["3"])
    env = derl_bench.load_environment(env_id="derl/ALFWorld-v0", seeds=[4, 0],
                                      max_episode_steps=3)
    assert [row["info"]["seed"] for row in env.dataset] == [4, 0]
    assert env.max_turns == 4
