"""``derl/ScienceWorld-v0`` against the real simulator (one shared JVM for most tests)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import derl_bench  # noqa: F401 - registers the env ids
from derl_bench.families.scienceworld import (
    NO_MATCH,
    clean_action,
    location_in,
    parse_goal_progress,
)
from derl_bench.families.scienceworld.observers import ActionValid, default_observers
from derl_bench.families.scienceworld.splits import (
    L2_HELD_OUT_TASKS,
    compute_splits,
    split_pairs,
    to_index_pairs,
)
from derl_bench.observers.base import ObserveWrapper
from derl_bench.observers.think_action import ThinkActionWrapper

PRIMITIVES = {
    "success", "published_success", "failed", "score", "score_delta", "goal_progress",
    "goal_progress_delta",
    "action_valid", "new_location", "repeated_action", "step_fraction", "env_reward",
}


@pytest.fixture(scope="module")
def env():
    env = gym.make("derl/ScienceWorld-v0")
    yield env
    env.close()


# -- pure helpers ----------------------------------------------------------------------------

GOAL_TEXT = (
    "Completed keys: \n----\nSequential Subgoals:\n----\n"
    "0\ttrue\t     GoalFind\tfocus on substance\n"
    "1\tfalse\t    GoalChangeStateOfMatter\tsubstance is in a liquid state\n"
    "2\tfalse\t    GoalChangeStateOfMatter\tsubstance is in a gaseous state\n"
    "----\nUnordered and Optional Subgoals:\n----\n"
    "0\ttrue\t    GoalInRoomWithObject\tbe in same location as water\n"
)


def test_parse_goal_progress_counts_only_sequential_subgoals():
    assert parse_goal_progress(GOAL_TEXT) == (1, 3)
    assert parse_goal_progress("") == (0, 0)


def test_location_in_reads_look_move_and_teleport():
    assert location_in("This room is called the hallway. In it, you see:") == "hallway"
    assert location_in("This outside location is called the outside. Here") == "outside"
    assert location_in("You move to the kitchen.") == "kitchen"
    assert location_in("You teleport to the art studio.") == "art studio"
    assert location_in("The door is already open.") is None


def test_clean_action_makes_any_input_sendable():
    assert clean_action("open door to kitchen") == "open door to kitchen"
    assert clean_action(b"go \xff\xfe to") == "go \ufffd\ufffd to"
    assert clean_action("a\ud800b") == "a?b"
    assert clean_action("look\x00\naround\x1b") == "look  around "
    assert clean_action(12) == "12"
    clean_action("\U0001f600 émoji").encode("utf-8")


# -- splits ----------------------------------------------------------------------------------


def test_splits_match_simulator_and_rlvmr_index(env, data_root):
    computed = compute_splits(env.unwrapped.simulator)
    names = env.unwrapped.task_names()
    assert len(names) == 30
    for level, eval_name in (("L0", "L0-eval"), ("L1", "L1-eval"), ("L2", "L2-eval")):
        assert split_pairs(level, "train") == computed[f"{level}-train"]
        assert split_pairs(level, "validation") == computed[f"{level}-validation"]
        assert split_pairs(level, "eval") == computed[eval_name]
        index = json.loads((data_root / "scienceworld" / f"{level}_idx.json").read_text())
        # train + validation is the protocol's training set; validation is held out of train.
        ours_train = to_index_pairs(computed[f"{level}-train"]
                                    + computed[f"{level}-validation"], names)
        ours_eval = to_index_pairs(computed[eval_name], names)
        assert sorted(map(tuple, index["train"])) == sorted(map(tuple, ours_train))
        assert sorted(map(tuple, index["test"])) == sorted(map(tuple, ours_eval))
        train, validation = set(computed[f"{level}-train"]), set(computed[f"{level}-validation"])
        assert not train & set(computed[eval_name]) and not validation & (
            train | set(computed[eval_name]))
    counts = {name: len(pairs) for name, pairs in computed.items()}
    assert counts == {"L0-train": 2997, "L0-validation": 325, "L0-eval": 1661,
                      "L1-train": 2997, "L1-validation": 325, "L1-eval": 1684,
                      "L2-train": 2023, "L2-validation": 219, "L2-eval": 549}
    assert {t for t, _ in computed["L2-eval"]} == set(L2_HELD_OUT_TASKS)
    assert not {t for t, _ in computed["L2-train"]} & set(L2_HELD_OUT_TASKS)
    assert "use-thermometer" not in {t for t, _ in computed["L0-train"] + computed["L1-eval"]}


# -- episodes --------------------------------------------------------------------------------


def test_reset_gives_task_description_and_info(env):
    obs, info = env.reset(options={"task": "boil", "variation": 2})
    assert obs.startswith("Your task is to boil")
    assert "This room is called" in obs or "location is called" in obs
    assert info["task_name"] == "boil" and info["variation"] == 2
    assert (info["level"], info["split"], info["score"]) == ("L0", "train", 0)
    assert set(info["primitives"]) == PRIMITIVES
    assert all(v == 0.0 for v in info["primitives"].values())
    assert "valid_actions" not in info


def test_seeded_reset_is_deterministic_and_drawn_from_split(env):
    first = [env.reset(seed=7) for _ in range(2)]
    assert first[0][0] == first[1][0]
    assert first[0][1]["task_name"] == first[1][1]["task_name"]
    pairs = set(env.unwrapped.pairs)
    drawn = {(i["task_name"], i["variation"]) for _, i in (env.reset(seed=s) for s in range(5))}
    assert drawn <= pairs and len(drawn) > 1


def test_episodes_iterate_the_split_in_manifest_order(env):
    options = list(env.unwrapped.episodes())
    assert len(options) == 2997
    assert [(o["task"], o["variation"]) for o in options] == env.unwrapped.pairs
    _, info = env.reset(options=options[5])
    assert (info["task_name"], info["variation"]) == env.unwrapped.pairs[5]
    _, info = env.reset(options={"index": 5})
    assert (info["task_name"], info["variation"]) == env.unwrapped.pairs[5]


def test_reset_rejects_unknown_task_and_variation(env):
    with pytest.raises(ValueError, match="unknown ScienceWorld task"):
        env.reset(options={"task": "boil-lava"})
    with pytest.raises(ValueError, match="variations 0"):
        env.reset(options={"task": "boil", "variation": 10_000})


@pytest.mark.parametrize(("options", "reason"), [
    ({"level": "L2"}, r"unknown reset options \['level'\]"),
    ({"variation": 3}, "'variation' needs a 'task'"),
    ({"task": "boil", "index": 0}, "not both"),
    ({"index": -1}, "'index' must be in 0.."),
    ({"index": 10**9}, "'index' must be in 0.."),
])
def test_reset_refuses_options_it_would_otherwise_drop(env, options, reason):
    with pytest.raises(ValueError, match=reason):
        env.reset(options=options)
    assert env.reset(options={"index": 0})[0]  # the env plays on after a refusal


def test_gold_path_reaches_success_with_primitives(env):
    obs, info = env.reset(options={"task": "find-animal", "variation": 1})
    start_score = info["score"]
    gold = env.unwrapped.gold_path()
    total, seen = 0.0, []
    for action in gold:
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        seen.append(info["primitives"])
        assert info["primitives"]["action_valid"] == 1.0
        if terminated:
            break
    assert terminated and not truncated
    assert info["success"] and info["score"] == 100
    assert total == pytest.approx(1.0 - start_score / 100)
    last = info["primitives"]
    assert last["success"] == 1.0 and last["score"] == 1.0 and last["goal_progress"] == 1.0
    assert last["failed"] == 0.0
    assert sum(p["score_delta"] for p in seen) == pytest.approx(1.0 - start_score / 100)
    assert any(p["new_location"] == 1.0 for p in seen)
    assert all(0.0 <= p["step_fraction"] <= 1.0 for p in seen)


SPOT_CHECK_TASKS = ("boil", "chemistry-mix-paint-tertiary-color", "find-plant",
                    "identify-life-stages-1", "inclined-plane-determine-angle",
                    "lifespan-shortest-lived", "measure-melting-point-known-substance",
                    "power-component-renewable-vs-nonrenewable-energy",
                    "test-conductivity-of-unknown-substances", "use-thermometer")


def test_gold_paths_succeed_on_a_spread_of_tasks_and_splits(env):
    """A CI-sized slice of benchmarks/scienceworld_gold_paths.py (which runs all 30 tasks)."""
    # Gold paths run past the 30-step cap: TimeLimit flags truncation, the replay goes on.
    _replay_spot_checks(env, env.unwrapped.simulator)


def _replay_spot_checks(env, sim) -> None:
    for i, task in enumerate(SPOT_CHECK_TASKS):
        part = ("train", "dev", "test")[i % 3]
        sim.load(task, 0, "")
        variation = sim.variations(part)[-1]
        env.reset(options={"task": task, "variation": variation})
        for action in env.unwrapped.gold_path():
            _, _, terminated, _, info = env.step(action)
            if terminated:
                break
        assert info["success"], (task, part, variation, info["score"])
        assert info["primitives"]["success"] == 1.0 and info["primitives"]["goal_progress"] == 1.0


def test_gold_path_mid_episode_keeps_the_state(env):
    env.reset(options={"task": "chemistry-mix", "variation": 3})
    env.step("look around")
    before, _, _, _, _ = env.step("inventory")
    env.unwrapped.gold_path()
    after, _, _, _, _ = env.step("inventory")
    assert before == after
    assert env.unwrapped.history == ["look around", "inventory", "inventory"]


def test_focusing_on_the_wrong_object_fails(env):
    env.reset(options={"task": "find-animal", "variation": 1})
    obs, reward, terminated, truncated, info = env.step("focus on air")
    assert terminated and info["failed"] and not info["success"]
    assert info["score"] < 0
    assert info["primitives"]["failed"] == 1.0 and info["primitives"]["score"] == 0.0


def test_step_cap_truncates(env):
    env.reset(options={"task": "melt", "variation": 0})
    for step in range(1, 31):
        _, _, terminated, truncated, info = env.step("look around")
        assert not terminated
        assert truncated == (step == 30)
    assert info["primitives"]["step_fraction"] == 1.0
    assert info["primitives"]["repeated_action"] == 1.0


@pytest.mark.parametrize(
    "action",
    ["", "x" * 1_000_000, b"\xff\xfe\xfa", "go to \ud800\udfff kitchen", "\x00\x07\x1b[31m\n\r",
     "asdkjh qweoiu zxcmnb", "open door to nowhere", "0", "focus on", "-" * 3000],
    ids=["empty", "1MB", "bad-utf8", "surrogates", "control", "nonsense", "no-door", "digit",
         "no-object", "dashes"],
)
def test_bad_actions_give_a_valid_step(env, action):
    env.reset(options={"task": "boil", "variation": 0})
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and obs
    assert reward == 0.0 and not terminated and not truncated
    assert info["primitives"]["action_valid"] == 0.0
    assert env.unwrapped.simulator.alive()
    obs, *_ = env.step("look around")
    assert "called the" in obs


def test_long_action_never_reaches_the_simulator(env):
    env.reset(options={"task": "boil", "variation": 0})
    obs, *_ = env.step("look around " * 1000)
    assert obs == NO_MATCH


def test_valid_actions_on_demand_and_in_info():
    env = gym.make("derl/ScienceWorld-v0", include_valid_actions=True)
    try:
        obs, info = env.reset(options={"task": "boil", "variation": 0})
        assert "look around" in info["valid_actions"]
        _, _, _, _, info = env.step("open door to kitchen")
        assert info["valid_actions"] == env.unwrapped.valid_actions()
        assert any(a.startswith("go to") for a in info["valid_actions"])
    finally:
        env.close()


def test_listed_action_valid_mode_uses_the_valid_action_list(env):
    wrapped = ObserveWrapper(env.unwrapped, [ActionValid(mode="listed")])
    wrapped.reset(options={"task": "boil", "variation": 0})
    listed = env.unwrapped.valid_actions()
    _, _, _, _, info = wrapped.step(listed[0])
    assert info["primitives"]["action_valid"] == 1.0
    _, _, _, _, info = wrapped.step("dance with the stove")
    assert info["primitives"]["action_valid"] == 0.0


def test_check_env_passes(env):
    check_env(env.unwrapped, skip_render_check=True)


def _random_valid_trajectory(env, seed: int, episodes: int = 2, steps: int = 8) -> list:
    rng = np.random.default_rng(seed)
    trajectory = []
    obs, info = env.reset(seed=seed)
    for _ in range(episodes):
        trajectory.append((obs, info["task_name"], info["variation"]))
        for _ in range(steps):
            valid = env.unwrapped.valid_actions()
            action = valid[int(rng.integers(len(valid)))]
            obs, reward, terminated, truncated, info = env.step(action)
            trajectory.append((action, obs, reward, terminated, truncated, info["primitives"]))
            if terminated or truncated:
                break
        obs, info = env.reset()
    return trajectory


def test_seeded_random_agent_is_reproducible_across_jvms(env):
    first = _random_valid_trajectory(env, seed=3)
    second = _random_valid_trajectory(env, seed=3)
    other = gym.make("derl/ScienceWorld-v0")
    try:
        third = _random_valid_trajectory(other, seed=3)
    finally:
        other.close()
    assert first == second == third
    assert len(first) > 4


def test_think_action_wrapper_applies(env):
    wrapped = ThinkActionWrapper(env)
    wrapped.reset(options={"task": "boil", "variation": 0})
    _, _, _, _, info = wrapped.step("<think>the kitchen has a stove</think>"
                                    "<action>Open door to kitchen</action>")
    assert info["primitives"]["format_valid"] == 1.0
    assert info["primitives"]["action_valid"] == 1.0
    _, _, _, _, info = wrapped.step("I will go to the kitchen")
    assert info["primitives"]["format_valid"] == 0.0
    assert info["primitives"]["action_valid"] == 0.0


def test_default_observers_cover_the_protocol_primitives():
    names = {n for o in default_observers() for n in o.names}
    assert names == PRIMITIVES


def test_bare_env_emits_no_primitives(env):
    bare = env.unwrapped
    _, info = bare.reset(seed=0)
    assert "primitives" not in info
    _, _, _, _, info = bare.step("look around")
    assert "primitives" not in info
