"""derl/Arithmetic-v0: seeded splits, disjoint levels, the math grader and graded primitives."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import derl_bench  # noqa: F401
from derl_bench.cards import CardError, load_card, sha256_lines
from derl_bench.families.arithmetic.env import PROBLEM_TYPES, bucket, generate_split, make_problem
from derl_bench.families.arithmetic.observers import closeness, digit_agreement, final_answer

SPLITS = ("train", "validation", "L0-eval", "L1-eval", "L2-eval")


def test_splits_are_the_cards_checksummed_manifests():
    card = load_card("arithmetic")
    for split in SPLITS:
        problems = generate_split(split)
        spec = card["splits"][split]
        assert len(problems) == spec["count"] == len({p.problem_id for p in problems})
        assert sha256_lines([p.problem_id for p in problems]) == spec["manifest_sha256"]


def test_a_changed_card_is_refused(monkeypatch):
    card = load_card("arithmetic")
    tampered = {**card, "splits": {**card["splits"], "validation": {
        **card["splits"]["validation"], "manifest_sha256": "0" * 64}}}
    monkeypatch.setattr("derl_bench.families.arithmetic.env.load_card", lambda family: tampered)
    generate_split.cache_clear()
    try:
        with pytest.raises(CardError, match="manifest sha256"):
            generate_split("validation")
    finally:
        generate_split.cache_clear()


def test_training_never_sees_an_eval_or_validation_problem():
    train = {p.problem_id for p in generate_split("train")}
    for split in ("validation", "L0-eval", "L1-eval", "L2-eval"):
        assert not train & {p.problem_id for p in generate_split(split)}, split
    assert not ({p.problem_id for p in generate_split("validation")}
                & {p.problem_id for p in generate_split("L0-eval")})


def test_levels_differ_from_training_as_the_card_says():
    train = generate_split("train")
    assert max(max(p.operands) for p in train) <= 49
    assert all(max(p.operands) > 49 for p in generate_split("L1-eval"))  # unseen ranges
    assert {p.kind for p in generate_split("L2-eval")} == {"sub_add"}  # held-out type
    assert "sub_add" not in {p.kind for p in train}
    assert {p.kind for p in generate_split("L0-eval")} == {p.kind for p in train}


def test_every_reference_solution_reduces_correctly_and_scores_one():
    env = gym.make("derl/Arithmetic-v0", split="L2-eval")
    for index in range(0, 500, 25):
        _, info = env.reset(options={"index": index})
        problem = env.unwrapped.problem
        assert int(problem.answer) == eval(problem.question[len("Compute "):-1])  # noqa: S307
        _, reward, terminated, truncated, info = env.step(info["reference_solution"])
        assert (reward, terminated, truncated) == (1.0, True, False)
        prims = info["primitives"]
        assert prims["outcome"] == prims["format_boxed"] == prims["digit_match"] == 1.0


def test_the_answer_must_be_boxed_and_near_misses_get_partial_credit():
    env = gym.make("derl/Arithmetic-v0", split="validation")
    _, info = env.reset(options={"index": 0})
    answer = int(info["reference_answer"])
    _, reward, _, _, info = env.step(f"The answer is {answer}.")
    assert reward == 0.0 and info["primitives"]["loose_outcome"] == 1.0
    assert info["primitives"]["digit_match"] == 1.0 and info["primitives"]["format_boxed"] == 0
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(f"\\boxed{{{answer + 1}}}")
    assert reward == 0.0 and 0 < info["primitives"]["answer_closeness"] < 1


@pytest.mark.parametrize("action", ["", "x" * 2_000_000, "\ud800", "\x00\x01", b"\xff"])
def test_bad_actions_score_zero(action):
    env = gym.make("derl/Arithmetic-v0")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(action)
    assert reward == 0.0 and terminated
    assert all(v == v for v in info["primitives"].values())  # finite, no NaN


def test_the_env_passes_gymnasiums_checker():
    check_env(gym.make("derl/Arithmetic-v0").unwrapped, skip_render_check=True)


def test_graded_primitives():
    assert digit_agreement("56", "56") == 1.0
    assert digit_agreement("57", "56") == 0.5
    assert digit_agreement(None, "56") == 0.0
    assert closeness("45", "50") == pytest.approx(0.9) and closeness("-50", "50") == 0.0
    assert final_answer("so 3 + 4 = 7 and \\boxed{12}") == "12"
    assert final_answer("3 + 4 = 7") == "7" and final_answer("no digits") is None


def test_problem_helpers_reject_bad_input():
    with pytest.raises(ValueError, match="unknown problem type"):
        make_problem("mul", (2, 3))
    with pytest.raises(ValueError, match="takes 3 operands"):
        make_problem("add3", (1, 2))
    assert set(PROBLEM_TYPES) >= {"add", "sub", "add3", "add_sub", "sub_add"}
    assert bucket("add:1,2", 10) == bucket("add:1,2", 10)
    with pytest.raises(ValueError, match="no split"):
        gym.make("derl/Arithmetic-v0", split="nope")


def test_make_replaces_or_extends_the_cards_observers():
    from derl_bench.observers import Observer

    class ShortAnswer(Observer):
        names = ("short_answer",)

        def observe(self, env, t):
            return {"short_answer": float(len(t.action) < 20)}

    default = gym.make("derl/Arithmetic-v0")
    replaced = gym.make("derl/Arithmetic-v0", observers=[ShortAnswer()])
    extended = gym.make("derl/Arithmetic-v0", extra_observers=[ShortAnswer()])
    names = {}
    for label, env in (("default", default), ("replaced", replaced), ("extended", extended)):
        env.reset(seed=0)
        names[label] = list(env.step("\\boxed{7}")[4]["primitives"])
    assert names["replaced"] == ["short_answer"]
    assert names["extended"] == [*names["default"], "short_answer"]
    assert "outcome" in names["default"] and "short_answer" not in names["default"]


@pytest.mark.parametrize("options", [{"level": "L1"}, {"index": 0, "seed": 3}, {"idx": 0}])
def test_an_unknown_reset_option_is_refused_not_ignored(options):
    env = gym.make("derl/Arithmetic-v0")
    try:
        with pytest.raises(ValueError, match=r"unknown reset options \[.*\]; the only option "
                                             r"is 'index'"):
            env.reset(options=options)
        _, info = env.reset(options={"index": 7})  # the env plays on
        assert info["index"] == 7
    finally:
        env.close()
