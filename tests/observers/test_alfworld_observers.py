"""ALFWorld primitives on real games, and the think/action wrapper in front of the env."""

from __future__ import annotations

import gymnasium as gym
import pytest

import derl_bench  # noqa: F401  (registers the envs)
from derl_bench.families.alfworld import EngineError, games
from derl_bench.families.alfworld.goal import Goal, Literal, parse_goal
from derl_bench.families.alfworld.observers import default_observers
from derl_bench.observers import Observer, ObserveWrapper
from derl_bench.observers.think_action import ThinkActionWrapper

ALFWORLD_PRIMITIVES = {
    "success", "goal_progress", "goal_progress_delta", "action_admissible", "action_effective",
    "new_location", "env_reward", "step_fraction", "repeated_action",
}


@pytest.fixture(scope="module")
def env(data_root):
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval")
    yield env
    env.close()


def _pick_two_game() -> str:
    return next(g for g in games.level_games("L0", "eval") if games.task_type_index(g) == 6)


def test_default_observers_emit_the_documented_primitives(env):
    _, info = env.reset(seed=0)
    assert set(info["primitives"]) == ALFWORLD_PRIMITIVES
    assert all(v == 0.0 for v in info["primitives"].values())
    names = [n for o in default_observers(env.unwrapped) for n in o.names]
    assert len(names) == len(set(names)) == len(ALFWORLD_PRIMITIVES)


def test_walkthrough_primitives(env):
    _, info = env.reset(options={"game": _pick_two_game()})
    walkthrough = info["walkthrough"]
    progress, deltas, new_locations = [], [], []
    for i, command in enumerate(walkthrough):
        _, _, terminated, _, info = env.step(command)
        p = info["primitives"]
        assert p["action_admissible"] == 1.0 and p["action_effective"] == 1.0
        assert p["step_fraction"] == pytest.approx((i + 1) / 30)
        assert p["success"] == float(terminated) == p["env_reward"]
        progress.append(p["goal_progress"])
        deltas.append(p["goal_progress_delta"])
        new_locations.append(p["new_location"])
    assert progress[-1] == 1.0 and max(progress[:-1]) < 1.0
    # a pick-two goal has two placements to make: progress passes through one half
    assert 0.5 in progress
    assert all(-1.0 <= d <= 1.0 for d in deltas)
    goes = [c.startswith("go to ") for c in walkthrough]
    visited = []
    for command, is_go, new in zip(walkthrough, goes, new_locations, strict=True):
        if not is_go:
            assert new == 0.0
        else:
            assert new == float(command not in visited)
            visited.append(command)


def test_goal_progress_delta_sums_to_the_change(env):
    _, info = env.reset(options={"game": _pick_two_game()})
    start = env.unwrapped.goal_progress()
    total = 0.0
    for command in info["walkthrough"]:
        _, _, _, _, info = env.step(command)
        total += info["primitives"]["goal_progress_delta"]
    assert total == pytest.approx(1.0 - start)


def test_inadmissible_and_repeated_commands(env):
    _, info = env.reset(seed=4)
    _, _, _, _, info = env.step("look")
    assert info["primitives"]["action_admissible"] == 1.0
    assert info["primitives"]["repeated_action"] == 0.0
    _, _, _, _, info = env.step("  LOOK ")
    assert info["primitives"]["repeated_action"] == 1.0
    assert info["primitives"]["action_admissible"] == 0.0  # commands are case-sensitive
    _, _, _, _, info = env.step("dance with the fridge")
    assert info["primitives"]["action_admissible"] == 0.0
    assert info["primitives"]["action_effective"] == 0.0
    assert info["primitives"]["new_location"] == 0.0


def test_a_user_observer_can_be_added(data_root):
    class AdmissibleCount(Observer):
        names = ("n_admissible",)

        def observe(self, env, t):
            return {"n_admissible": float(len(env.admissible_commands))}

    env = gym.make("derl/ALFWorld-v0", level="L2", split="eval",
                   extra_observers=[AdmissibleCount()])
    try:
        _, info = env.reset(seed=0)
        _, _, _, _, info = env.step("look")
        assert info["primitives"]["n_admissible"] == len(info["admissible_commands"]) > 0
        assert ALFWORLD_PRIMITIVES < set(info["primitives"])
    finally:
        env.close()


LAMP_GOAL = """(define (problem p) (:goal (and
    (exists (?ot - object ?a - agent) (and (objectType ?ot LampType) (isToggled ?ot)
        (holds ?a ?ot)))
    (exists (?o - object ?a - agent) (and (not (= ?o lamp1)) (holds ?a ?o))))))"""


def test_goal_parser_prenexes_quantifiers_and_separates_static_atoms():
    goal = parse_goal(LAMP_GOAL, {"istoggled", "holds"})
    assert len(goal.variables) == 4  # the two ?a are different variables
    assert {lit.predicate for lit in goal.fluent_literals} == {"istoggled", "holds"}
    assert len(goal.fluent_literals) == 3
    assert any(lit.predicate == "=" and not lit.positive for lit in goal.static_literals)
    objects = {"object": ["lamp1", "mug1"], "agent": ["agent1"]}
    static = {("objecttype", "lamp1", "lamptype"), ("objecttype", "mug1", "mugtype")}
    assert goal.progress(static, objects) == 0.0
    assert goal.progress(static | {("istoggled", "lamp1")}, objects) == pytest.approx(1 / 3)
    facts = static | {("istoggled", "lamp1"), ("holds", "agent1", "mug1")}
    assert goal.progress(facts, objects) == pytest.approx(2 / 3)
    assert goal.progress(facts | {("holds", "agent1", "lamp1")}, objects) == 1.0


def test_a_ground_goal_scores_every_state_as_the_search_does():
    goal = parse_goal(LAMP_GOAL, {"istoggled", "holds"})
    objects = {"object": ["lamp1", "lamp2", "mug1"], "agent": ["agent1"]}
    static = {("objecttype", "lamp1", "lamptype"), ("objecttype", "lamp2", "lamptype"),
              ("objecttype", "mug1", "mugtype")}
    ground = goal.ground(static, objects)
    # ?ot is one of the two lamps and ?o any object but lamp1: 2 x 2 bindings.
    assert len(ground) == 4
    fluents = [("istoggled", "lamp1"), ("istoggled", "lamp2"), ("holds", "agent1", "lamp1"),
               ("holds", "agent1", "lamp2"), ("holds", "agent1", "mug1")]
    for mask in range(2 ** len(fluents)):
        facts = static | {f for i, f in enumerate(fluents) if mask >> i & 1}
        assert goal.progress_of(ground, facts) == goal.progress(facts, objects)
    assert goal.progress_of(ground, static | {("istoggled", "lamp2"),
                                              ("holds", "agent1", "lamp2")}) == 1.0
    assert goal.progress_of(goal.ground(set(), objects), static) == 0.0  # no lamp: no binding


def test_goal_parser_rejects_free_variables_and_disjunctions():
    with pytest.raises(EngineError, match="free variable"):
        parse_goal("(:goal (and (holds ?a ?o)))", {"holds"})
    with pytest.raises(EngineError, match="or"):
        parse_goal("(:goal (or (holds a o) (holds a p)))", {"holds"})


def test_a_goal_without_fluents_is_all_or_nothing():
    goal = Goal({}, [Literal("objecttype", ("a", "t"))], frozenset())
    assert goal.progress({("objecttype", "a", "t")}, {}) == 1.0
    assert goal.progress(set(), {}) == 0.0


# --------------------------------------------------------------------------- think/action


def test_think_action_wrapper_feeds_the_plain_command(data_root):
    env = ThinkActionWrapper(gym.make("derl/ALFWorld-v0", level="L0", split="eval"))
    try:
        _, info = env.reset(options={"game": _pick_two_game()})
        assert info["primitives"]["format_valid"] == 0.0
        first = info["walkthrough"][0]
        response = f"<think>I should look around first.</think><action>{first.upper()}</action>"
        obs, _, _, _, info = env.step(response)
        assert info["primitives"]["format_valid"] == 1.0
        assert info["primitives"]["action_admissible"] == 1.0
        assert info["raw_response"] == response and info["action"] == first
        obs, _, _, _, info = env.step("i will go to the sofa")
        assert obs == "Nothing happens."
        assert info["primitives"]["format_valid"] == 0.0
        assert info["primitives"]["action_admissible"] == 0.0
        assert info["action"] == "i will go to the sofa"[-30:]
    finally:
        env.close()


def test_think_action_wrapper_inside_the_observers(data_root):
    from derl_bench.families.alfworld import ALFWorldEnv

    bare = ALFWorldEnv(level="L0", split="eval")
    env = ObserveWrapper(ThinkActionWrapper(bare), default_observers(bare))
    try:
        _, info = env.reset(seed=0)
        assert info["primitives"]["format_valid"] == 0.0
        _, _, _, _, info = env.step("<think>x</think><action>look</action>")
        assert info["primitives"]["format_valid"] == 1.0
        assert info["primitives"]["action_admissible"] == 1.0
    finally:
        env.close()
