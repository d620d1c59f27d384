"""ScienceWorld's two metrics, the ``rlvmr`` protocol and the upstream answers, on the real JVM."""

from __future__ import annotations

import gymnasium as gym
import pytest

import derl_bench  # noqa: F401 - registers the env ids
from derl_bench.families.scienceworld import RLVMR_TICK_LIMIT
from derl_bench.families.scienceworld.simulator import DETERMINISTIC_JVM_OPTIONS, SimulatorProcess

# A task whose gold path scores within its first actions (focus on the substance).
TASK = {"task": "melt", "variation": 0}


@pytest.fixture(scope="module")
def env():
    env = gym.make("derl/ScienceWorld-v0")
    yield env
    env.close()


def _stall(env: gym.Env, max_steps: int = 30) -> tuple[dict, int, bool, bool]:
    """Gold actions until the score turns positive, then ``wait``."""
    env.reset(options=TASK)
    gold = env.unwrapped.gold_path()
    info: dict = {}
    terminated = truncated = False
    steps = 0
    while not (terminated or truncated) and steps < max_steps:
        action = gold.pop(0) if gold and not info.get("score", 0) > 0 else "wait"
        _, _, terminated, truncated, info = env.step(action)
        steps += 1
    return info, steps, terminated, truncated


@pytest.mark.parametrize("command", ["help", "objects", "task", " HELP "])
def test_meta_commands_answer_like_upstream(env, command):
    env.reset(options=TASK)
    obs, reward, terminated, _, info = env.step(command)
    upstream = env.unwrapped.simulator.simulator_step(command)[0]
    assert obs == upstream
    assert obs.split(":", 1)[0] in ("Possible actions", "Possible object references",
                                    "Task description")
    assert info["action_parsed"] and reward == 0.0 and not terminated
    assert info["moves"] == 0  # upstream answers them without a simulator tick


def test_help_lists_the_action_templates(env):
    env.reset(options=TASK)
    obs, *_ = env.step("help")
    assert "\n\tfocus on OBJ" in obs and "\n\twait" in obs


def test_stalling_wins_the_published_metric_only(env):
    info, steps, terminated, truncated = _stall(env)
    assert 0 < info["score"] < 100
    assert info["moves"] > RLVMR_TICK_LIMIT
    assert info["published_success"] and not info["success"]
    assert info["primitives"]["published_success"] == 1.0
    assert info["primitives"]["success"] == 0.0
    # the strict protocol does not end the episode at the tick limit
    assert truncated and not terminated and steps == 30


def test_gold_path_wins_both_metrics(env):
    env.reset(options=TASK)
    info: dict = {}
    for action in env.unwrapped.gold_path():
        *_, terminated, _, info = env.step(action)
        if terminated:
            break
    assert info["success"] and info["published_success"]


def test_wrong_focus_fails_both_metrics(env):
    env.reset(options=TASK)
    *_, terminated, _, info = env.step("focus on agent")
    assert terminated and info["failed"]
    assert not info["published_success"] and not info["success"]


def test_rlvmr_protocol_ends_at_the_tick_limit_with_upstreams_reset():
    env = gym.make("derl/ScienceWorld-v0", protocol="rlvmr")
    try:
        obs, info = env.reset(options=TASK)
        assert not obs.startswith("Your task is to")  # upstream's reset: the room only
        assert "This room is called" in obs and info["task_description"].startswith("Your task")
        info, steps, terminated, truncated = _stall(env)
        assert terminated and not truncated and steps < 30
        assert info["moves"] > RLVMR_TICK_LIMIT
        assert info["published_success"] and not info["success"]
    finally:
        env.close()


def test_reset_observation_option():
    env = gym.make("derl/ScienceWorld-v0", reset_observation="look")
    try:
        obs, info = env.reset(options=TASK)
        assert obs.startswith("This room is called")
    finally:
        env.close()


def test_options_are_checked():
    for kwargs in ({"protocol": "loose"}, {"reset_observation": "room"},
                   {"object_order": "random"}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            gym.make("derl/ScienceWorld-v0", **kwargs)


def test_shuffled_object_order_runs_the_jvm_like_upstream():
    fixed = SimulatorProcess()
    shuffled = SimulatorProcess(fixed_object_order=False)
    try:
        assert set(DETERMINISTIC_JVM_OPTIONS) <= set(fixed.command)
        assert not set(DETERMINISTIC_JVM_OPTIONS) & set(shuffled.command)
        shuffled.load("melt", 0, "easy")
        observation, _, _ = shuffled.step("look around")
        assert "This room is called" in observation
    finally:
        fixed.close()
        shuffled.close()
