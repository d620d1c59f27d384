"""derl/GSM8K-v0 and derl/MATH-v0 on the real datasets."""

from __future__ import annotations

import subprocess
import sys
import threading

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import derl_bench  # noqa: F401  (registers the envs)
from derl_bench.cards import load_card, sha256_lines
from derl_bench.families.math.env import load_problems
from derl_bench.observers import Observer

MATH_PRIMITIVES = {"outcome", "format_boxed", "cot_steps", "loose_outcome", "response_length",
                   "answer_parsed", "env_reward"}


@pytest.fixture(scope="module")
def gsm8k_test(data_root):
    env = gym.make("derl/GSM8K-v0", split="test")
    yield env
    env.close()


@pytest.fixture(scope="module")
def math500(data_root):
    env = gym.make("derl/MATH-v0", split="math500")
    yield env
    env.close()


def _grade_references(env):
    misses = []
    for i, problem in enumerate(env.unwrapped.problems):
        env.reset(options={"index": i})
        _, reward, terminated, truncated, info = env.step(problem.solution)
        assert terminated and not truncated
        if reward != 1.0:
            misses.append((problem.problem_id, info["extracted_answer"], problem.answer))
    return misses


def test_every_gsm8k_test_reference_solution_is_graded_correct(gsm8k_test):
    assert len(gsm8k_test.unwrapped.problems) == 1319
    assert _grade_references(gsm8k_test) == []


def test_every_math500_reference_solution_is_graded_correct(math500):
    assert len(math500.unwrapped.problems) == 500
    assert _grade_references(math500) == []


def test_math_test_reference_solutions_at_least_99_percent(data_root):
    env = gym.make("derl/MATH-v0", split="test")
    misses = _grade_references(env)
    env.close()
    assert len(misses) <= 50, misses[:20]


@pytest.mark.parametrize("index", [0, 7, 123, 1000])
def test_perturbed_gsm8k_answer_scores_zero(gsm8k_test, index):
    _, info = gsm8k_test.reset(options={"index": index})
    wrong = str(int(float(info["reference_answer"])) + 1)
    _, reward, *_ = gsm8k_test.step(f"The answer is {wrong}.")
    assert reward == 0.0
    gsm8k_test.reset(options={"index": index})
    _, reward, *_ = gsm8k_test.step(f"#### {info['reference_answer']}")
    assert reward == 1.0


@pytest.mark.parametrize("index", [0, 50, 250, 499])
def test_perturbed_math_answer_scores_zero(math500, index):
    _, info = math500.reset(options={"index": index})
    _, reward, *_ = math500.step(f"\\boxed{{{info['reference_answer']}+1}}")
    assert reward == 0.0
    math500.reset(options={"index": index})
    _, reward, *_ = math500.step(f"so \\boxed{{{info['reference_answer']}}}")
    assert reward == 1.0


def test_math_verify_equivalence_is_used_beyond_string_match(math500):
    math500.reset(options={"index": 0})  # reference \left( 3, \frac{\pi}{2} \right)
    _, reward, *_ = math500.step("\\boxed{(3, \\pi/2)}")
    assert reward == 1.0


def test_check_env_passes_on_every_math_id(data_root):
    for env_id in ("derl/GSM8K-v0", "derl/MATH-v0"):
        env = gym.make(env_id, split="validation")
        check_env(env.unwrapped, skip_render_check=True)
        env.close()


def test_reset_seed_is_deterministic_and_index_option_picks(gsm8k_test):
    first = [gsm8k_test.reset(seed=s)[1]["problem_id"] for s in range(5)]
    again = [gsm8k_test.reset(seed=s)[1]["problem_id"] for s in range(5)]
    assert first == again and len(set(first)) > 1
    _, info = gsm8k_test.reset(options={"index": 42})
    assert info["problem_id"] == "test/42"
    with pytest.raises(IndexError):
        gsm8k_test.reset(options={"index": 1319})


def test_an_unknown_reset_option_is_refused(gsm8k_test, math500):
    for env in (gsm8k_test, math500):
        with pytest.raises(ValueError, match=r"unknown reset options \['split'\]"):
            env.reset(options={"split": "train"})


def test_info_carries_the_documented_fields(math500):
    obs, info = math500.reset(options={"index": 3})
    assert obs == math500.unwrapped.problems[3].question
    assert set(info["primitives"]) == MATH_PRIMITIVES
    assert all(v == 0.0 for v in info["primitives"].values())
    _, _, _, _, info = math500.step("Step 1: think.\nStep 2: more.\n\\boxed{0}")
    for key in ("reference_answer", "reference_solution", "extracted_answer", "problem_id",
                "split"):
        assert key in info
    assert info["split"] == "math500" and info["problem_id"].startswith("test/")
    assert info["extracted_answer"] == "0"
    prims = info["primitives"]
    assert prims["format_boxed"] == 1.0 and prims["cot_steps"] == 1.0
    assert prims["answer_parsed"] == 1.0 and prims["response_length"] == len(
        "Step 1: think.\nStep 2: more.\n\\boxed{0}")


def test_primitives_of_a_correct_unboxed_gsm8k_answer(gsm8k_test):
    _, info = gsm8k_test.reset(options={"index": 0})
    answer = info["reference_answer"]
    _, reward, _, _, info = gsm8k_test.step(f"1. Add.\n2. Done: {answer}")
    assert reward == 1.0
    p = info["primitives"]
    assert (p["outcome"], p["env_reward"], p["loose_outcome"], p["format_boxed"]) == (1, 1, 1, 0)


@pytest.mark.parametrize(
    "action",
    ["", "x" * (1 << 20), "\ud800\udfff broken surrogates \udc80", "\x00\x01\x1b[2J\x7f",
     "The answer is " + "9" * 5000, b"\xff\xfe not utf-8"],
    ids=["empty", "1MB", "surrogates", "control", "huge-number", "bytes"],
)
def test_bad_actions_give_zero_and_a_valid_tuple(gsm8k_test, math500, action):
    for env in (gsm8k_test, math500):
        env.reset(seed=1)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and reward == 0.0 and terminated and not truncated
        assert all(isinstance(v, float) for v in info["primitives"].values())


def test_step_after_the_episode_ends_requires_reset(gsm8k_test):
    gsm8k_test.reset(seed=0)
    gsm8k_test.step("42")
    with pytest.raises(gym.error.ResetNeeded):
        gsm8k_test.step("42")


def test_splits_are_disjoint_and_match_the_card(data_root):
    card = load_card("math")["datasets"]
    for dataset, spec in card.items():
        ids = {}
        for split, split_spec in spec["splits"].items():
            problems = load_problems(dataset, split)
            ids[split] = {p.problem_id for p in problems}
            assert len(problems) == split_spec["count"]
            assert sha256_lines([p.problem_id for p in problems]) == split_spec["manifest_sha256"]
        assert not ids["train"] & ids["validation"]
        assert not ids["train"] & ids["test"]
    math500_ids = {p.problem_id for p in load_problems("math", "math500")}
    assert math500_ids <= {p.problem_id for p in load_problems("math", "test")}


def test_a_user_observer_appears_in_primitives(data_root):
    class ShortAnswer(Observer):
        names = ("short_answer",)

        def observe(self, env, t):
            return {"short_answer": float(len(t.action) < 10)}

    env = gym.make("derl/GSM8K-v0", split="test", extra_observers=[ShortAnswer()])
    _, info = env.reset(seed=0)
    assert info["primitives"]["short_answer"] == 0.0
    _, _, _, _, info = env.step("42")
    assert info["primitives"]["short_answer"] == 1.0 and "outcome" in info["primitives"]
    env.close()


def test_grading_works_from_threads(math500):
    env = math500.unwrapped
    results: list[bool] = []

    def grade() -> None:
        results.append(env.grade("\\boxed{(3, \\frac{\\pi}{2})}").correct)

    env.reset(options={"index": 0})
    threads = [threading.Thread(target=grade) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [True] * 4


def test_make_with_module_prefix_needs_no_prior_import(data_root):
    code = ("import gymnasium as gym\n"
            "env = gym.make('derl_bench:derl/GSM8K-v0', split='test')\n"
            "obs, info = env.reset(seed=0)\n"
            "print(info['problem_id'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith("test/")
