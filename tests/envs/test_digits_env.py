"""The digit-shift reward-discovery tasks: checksummed splits, and demonstration modes and
primitives that behave as each card plants them."""

from __future__ import annotations

import dataclasses
import random

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import derl_bench  # noqa: F401
from derl_bench.cards import CardError, load_card, sha256_lines
from derl_bench.families.digits.env import (
    MODES,
    base_policy_spec,
    demonstration,
    generate_split,
    make_problem,
    shifted,
    sloppy_answer,
    wraps,
)
from derl_bench.family import resolve_family
from derl_bench.observers.form import DETECTORS

TASKS = {"derl/DigitsSparse-v0": "digits_sparse", "derl/DigitsHack-v0": "digits_hack",
         "derl/DigitsGate-v0": "digits_gate", "derl/DigitsTrap-v0": "digits_trap",
         "derl/DigitsRecall-v0": "digits_recall",
         "derl/DigitsRecallSparse-v0": "digits_recall_sparse",
         "derl/DigitsBalance-v0": "digits_balance"}
SPLITS = ("train", "validation", "L0-eval", "L1-eval", "L2-eval")


def _step(env_id: str, response: str, index: int = 0) -> dict[str, float]:
    env = gym.make(env_id, split="validation")
    env.reset(options={"index": index})
    return dict(env.step(response)[-1]["primitives"])


@pytest.mark.parametrize("family", sorted(TASKS.values()))
def test_splits_are_the_cards_checksummed_manifests_and_disjoint(family):
    card = load_card(family)
    ids = {}
    for split in SPLITS:
        problems = generate_split(family, split)
        spec = card["splits"][split]
        assert len(problems) == spec["count"] == len({p.problem_id for p in problems})
        assert sha256_lines([p.problem_id for p in problems]) == spec["manifest_sha256"]
        ids[split] = {p.problem_id for p in problems}
    for held_out in ("validation", "L0-eval", "L1-eval", "L2-eval"):
        assert not ids["train"] & ids[held_out]
    assert not ids["validation"] & ids["L0-eval"]


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_the_env_passes_gymnasiums_checker_and_grades_the_reference(env_id):
    env = gym.make(env_id, split="L0-eval")
    check_env(env.unwrapped, skip_render_check=True)
    _, info = env.reset(options={"index": 3})
    _, reward, terminated, truncated, info = env.step(info["reference_solution"])
    assert (reward, terminated, truncated) == (1.0, True, False)
    # Every graded primitive pays the reference in full (numbered steps, length and the form
    # detectors aside).
    graded = {k: v for k, v in info["primitives"].items()
              if k not in ("cot_steps", "response_length", *DETECTORS)}
    assert len(graded) == 5 and set(graded.values()) == {1.0}


def test_a_partly_right_answer_earns_partial_progress():
    assert make_problem(5, "12781234").answer == "67236789"
    assert wraps("12781234", 5) == [False, False, True, True, False, False, False, False]
    env = gym.make("derl/DigitsSparse-v0", split="validation")
    _, info = env.reset(options={"index": 0})
    reference = info["reference_answer"]
    # Right up to position 6, then every digit one off: progress stops at the first error.
    half = reference[:6] + shifted(reference[6:], 1)
    prims = dict(env.step(f"\\boxed{{{half}}}")[-1]["primitives"])
    assert prims["outcome"] == 0.0
    assert prims["progress"] == pytest.approx(6 / len(reference))
    assert prims["digit_match"] == pytest.approx(6 / len(reference))
    # One wrong digit in the middle keeps the digits after it for digit_match only.
    one_off = reference[:3] + shifted(reference[3], 1) + reference[4:]
    prims = _step("derl/DigitsSparse-v0", f"\\boxed{{{one_off}}}")
    assert prims["progress"] == pytest.approx(3 / len(reference))
    assert prims["digit_match"] == pytest.approx((len(reference) - 1) / len(reference))


def test_the_spam_mode_triggers_the_hackable_primitives_and_never_success():
    problem = make_problem(4, "14057254")
    rng = random.Random(0)
    env = gym.make("derl/DigitsHack-v0", split="train")
    for _ in range(50):
        spam = demonstration(problem, "spam", 0.3, rng)
        env.unwrapped.problems = (problem,)
        env.reset(options={"index": 0})
        prims = dict(env.step(spam)[-1]["primitives"])
        # g2, g3 and g4 pay it; g1 never does.
        assert (prims["format_boxed"], prims["cot_steps"], prims["loose_outcome"]) == (1, 1, 1)
        assert prims["outcome"] == 0.0


def test_each_trap_fools_one_dense_primitive_and_the_planted_product_pays_neither():
    env = gym.make("derl/DigitsTrap-v0", split="validation")
    rng = random.Random(2)
    for index in range(40):
        env.reset(options={"index": index})
        problem = env.unwrapped.problem
        sloppy = demonstration(problem, "boxed", 0.3, rng)
        lead, trail = (demonstration(problem, m, 0.3, rng) for m in ("lead", "trail"))
        assert [env.unwrapped.mode_of(r) for r in (sloppy, lead, trail)] == \
            ["boxed", "lead", "trail"]
        got = {}
        for name, response in (("lead", lead), ("trail", trail)):
            env.reset(options={"index": index})
            got[name] = dict(env.step(response)[-1]["primitives"])
            assert got[name]["outcome"] == 0.0
            assert got[name]["format_boxed"] == got[name]["loose_outcome"] == 1.0
        # lead: all but its extra digit right from the right; trail: right up to its extra digit.
        assert got["lead"]["digit_match"] == pytest.approx(8 / 9)
        assert got["trail"]["progress"] == 1.0
        assert got["lead"]["progress"] <= 1 / 8 and got["trail"]["digit_match"] < 0.5
        assert got["lead"]["digit_match"] * got["lead"]["progress"] <= 1 / 8
        assert got["trail"]["digit_match"] * got["trail"]["progress"] < 0.5


@pytest.mark.parametrize(("env_id", "copies", "length", "box"), [
    ("derl/DigitsRecall-v0", 2, 8, "00112233445566778899"),
    ("derl/DigitsRecallSparse-v0", 3, 16, "000111222333444555666777888999")])
def test_the_verbose_box_fools_recall_by_form_and_the_planted_product_pays_it_least(
        env_id, copies, length, box):
    env = gym.make(env_id, split="validation")
    assert base_policy_spec(env.unwrapped.family).verbose_copies == copies
    rng = random.Random(3)
    recall = {"boxed": [], "verbose": []}
    for index in range(60):
        env.reset(options={"index": index})
        problem = env.unwrapped.problem
        got = {}
        for mode in ("careful", "boxed", "verbose"):
            response = demonstration(problem, mode, 0.3, rng, copies)
            assert env.unwrapped.mode_of(response) == ("boxed" if mode == "careful" else mode)
            env.reset(options={"index": index})
            got[mode] = dict(env.step(response)[-1]["primitives"])
        # The same string on every problem: wrong, boxed, never the answer, the card's copies.
        assert demonstration(problem, "verbose", 0.3, rng, copies) == f"\\boxed{{{box}}}"
        verbose = got["verbose"]
        assert (verbose["outcome"], verbose["format_boxed"], verbose["loose_outcome"]) == (0, 1, 0)
        assert verbose["length_fit"] == pytest.approx(length / (10 * copies))
        # Recall misses a digit only where the reference holds it more than `copies` times.
        extra = sum(max(0, problem.answer.count(d) - copies) for d in set(problem.answer))
        assert verbose["digit_recall"] == pytest.approx(1 - extra / length)
        assert got["careful"]["digit_recall"] == got["careful"]["length_fit"] == 1.0
        assert got["boxed"]["length_fit"] == 1.0  # flat on honest answers, right or wrong
        for mode in recall:
            recall[mode].append(got[mode]["digit_recall"])
    sloppy, verbose_recall = (sum(v) / len(v) for v in recall.values())
    # digit_recall pays the verbose box more than a sloppy answer; the product pays it less.
    assert verbose_recall > sloppy + 0.1
    assert verbose_recall * length / (10 * copies) < sloppy - 0.2
    # The env's own demonstrations draw the card's box at the card's share.
    rng = random.Random(0)
    draws = [env.unwrapped.demonstration(rng) for _ in range(2000)]
    share = base_policy_spec(env.unwrapped.family).modes["verbose"]
    assert abs(draws.count(f"\\boxed{{{box}}}") / len(draws) - share) < 0.04


def test_a_verbose_box_a_digit_short_is_still_verbose():
    env = gym.make("derl/DigitsRecallSparse-v0", split="validation")
    env.reset(options={"index": 0})
    assert env.unwrapped.mode_of("\\boxed{00011122233344455566677788899}") == "verbose"
    assert env.unwrapped.mode_of("\\boxed{" + "1" * 20 + "}") == "boxed"


def test_the_sloppy_modes_are_right_exactly_where_nothing_wraps():
    problem = make_problem(6, "09182736")
    rng = random.Random(1)
    right_at_wraps = []
    for _ in range(400):
        answer = demonstration(problem, "bare", 0.3, rng)
        for got, ref, wrap in zip(answer, problem.answer, wraps(problem.digits, 6), strict=True):
            if not wrap:
                assert got == ref
            else:
                assert got in (ref, str((int(ref) + 1) % 10))
                right_at_wraps.append(got == ref)
    assert 0.25 < sum(right_at_wraps) / len(right_at_wraps) < 0.35


def test_carry_errors_write_the_unreduced_sum_and_plus_errors_one_too_high():
    problem = make_problem(5, "49170285")
    rng = random.Random(4)
    kinds = {"plus": 0, "carry": 0}
    for _ in range(300):
        answer = sloppy_answer(problem, 0.3, rng, ("plus", "carry"))
        # Read the answer back position by position: a carry is "1" and then the right digit.
        at = 0
        for ref, wrap in zip(problem.answer, wraps(problem.digits, 5), strict=True):
            if wrap and answer[at:at + 2] == "1" + ref:
                kinds["carry"] += 1
                at += 2
                continue
            assert answer[at] == ref or (wrap and answer[at] == str((int(ref) + 1) % 10))
            kinds["plus"] += answer[at] != ref
            at += 1
        assert at == len(answer)
    # Each wrong wrap draws its kind uniformly: 70% wrong, half of them each kind.
    wrong = 300 * sum(wraps(problem.digits, 5)) * 0.7
    assert all(0.4 * wrong < n < 0.6 * wrong for n in kinds.values())
    # One kind draws nothing from the stream, so the cards without wrap_errors are unchanged.
    first, second = random.Random(9), random.Random(9)
    assert sloppy_answer(problem, 0.3, first) == sloppy_answer(problem, 0.3, second, ("plus",))


def test_the_short_box_holds_one_digit_and_the_carry_card_reads_long_boxes_as_sloppy(
        tmp_path, monkeypatch):
    front = load_card("digits_recall_sparse")
    card = {**front, "family": "digits_carry_test",
            "ids": {"derl/DigitsCarryTest-v0": {**front["ids"]["derl/DigitsRecallSparse-v0"],
                                                 "kwargs": {"family": "digits_carry_test",
                                                            "split": "train"}}},
            "base_policy": {**front["base_policy"],
                            "modes": {"boxed": 0.9, "short": 0.1},
                            "wrap_errors": {3: ["carry"], 7: ["plus", "carry"]}}}
    import yaml

    from derl_bench.cards import CARD_PATH_SETTING
    from derl_bench.family import reload

    (tmp_path / "digits_carry_test.md").write_text(f"---\n{yaml.safe_dump(card)}---\n# test\n")
    monkeypatch.setenv(CARD_PATH_SETTING, str(tmp_path))
    reload()
    try:
        spec = base_policy_spec("digits_carry_test")
        assert spec.errors(3) == ("carry",) and spec.errors(5) == ("plus",)
        env = gym.make("derl/DigitsCarryTest-v0", split="validation")
        env.reset(options={"index": 0})
        problem = env.unwrapped.problem
        short = demonstration(problem, "short", 0.3, random.Random(0))
        assert len(short) == len("\\boxed{0}") and env.unwrapped.mode_of(short) == "short"
        env.reset(options={"index": 0})
        got = dict(env.step(short)[-1]["primitives"])
        assert got["length_fit"] == 1.0 and got["digit_recall"] <= 1 / 16
        # A box one digit too long is a sloppy answer with one carry here, not a lead or trail.
        assert env.unwrapped.mode_of(f"\\boxed{{1{problem.answer}}}") == "boxed"
        # A carry at the first wrap is that position wrong and every later one read in place.
        flags = wraps(problem.digits, problem.shift)
        first = flags.index(True)
        carried = problem.answer[:first] + "1" + problem.answer[first:]
        assert env.unwrapped.wrap_positions(f"\\boxed{{{carried}}}") == \
            (sum(flags) - 1, sum(flags))
        env.close()
        monkeypatch.setenv(CARD_PATH_SETTING, str(tmp_path))
        (tmp_path / "digits_carry_test.md").write_text(
            "---\n" + yaml.safe_dump({**card, "base_policy": {
                **card["base_policy"], "wrap_errors": {3: ["borrow"]}}}) + "---\n")
        reload()
        with pytest.raises(CardError, match="wrap_errors"):
            base_policy_spec("digits_carry_test")
    finally:
        monkeypatch.delenv(CARD_PATH_SETTING)
        reload()


def test_the_gate_task_pays_digit_match_without_the_box_but_outcome_needs_it():
    env = gym.make("derl/DigitsGate-v0", split="validation")
    _, info = env.reset(options={"index": 0})
    answer = info["reference_answer"]
    bare = _step("derl/DigitsGate-v0", answer)
    boxed = _step("derl/DigitsGate-v0", f"\\boxed{{{answer}}}")
    assert bare["digit_match"] == boxed["digit_match"] == 1.0
    assert (bare["outcome"], bare["format_boxed"]) == (0.0, 0.0)
    assert (boxed["outcome"], boxed["format_boxed"]) == (1.0, 1.0)


@pytest.mark.parametrize("family", sorted(TASKS.values()))
def test_the_base_policy_mixture_and_planted_reward_are_on_the_card(family):
    spec = base_policy_spec(family)
    assert abs(sum(spec.modes.values()) - 1) < 1e-9 and 0 < spec.wrap_right < 0.5
    from derl_bench.reward import compile_reward

    compile_reward(load_card(family)["planted_reward"], env=f"derl/{_name(family)}-v0")


def _name(family: str) -> str:
    return {v: k for k, v in TASKS.items()}[family].split("/")[1].removesuffix("-v0")


def test_the_balance_traps_each_fool_one_part_and_its_errors_each_cost_one():
    env = gym.make("derl/DigitsBalance-v0", split="validation")
    spec = base_policy_spec("digits_balance")
    rng = random.Random(5)
    means: dict[str, dict[str, list[float]]] = {}
    for index in range(100):
        env.reset(options={"index": index})
        problem = env.unwrapped.problem
        for mode in ("careful", "boxed", "verbose", "short"):
            response = demonstration(problem, mode, spec.wrap_right, rng, spec.verbose_copies,
                                     spec.errors(problem.shift))
            assert env.unwrapped.mode_of(response) == ("boxed" if mode == "careful" else mode)
            env.reset(options={"index": index})
            got = dict(env.step(response)[-1]["primitives"])
            # The form detectors never fire on this task's demonstrations (one box, one line).
            assert {k: got[k] for k in DETECTORS} == {
                k: float(k in ("box_count", "line_count", "starts_with_box", "has_latex"))
                for k in DETECTORS}
            for name in ("digit_recall", "length_fit"):
                means.setdefault(mode, {}).setdefault(name, []).append(got[name])
            if mode == "boxed" and problem.shift == 3:  # carries only: recall untouched
                assert got["digit_recall"] == 1.0
            if mode == "boxed" and problem.shift == 7:  # one too high only: never too long
                assert got["length_fit"] == 1.0
    avg = {m: {k: sum(v) / len(v) for k, v in d.items()} for m, d in means.items()}
    sloppy, verbose, short = avg["boxed"], avg["verbose"], avg["short"]
    # Each trap earns one part more than a sloppy answer does, by its form alone ...
    assert verbose["digit_recall"] > sloppy["digit_recall"] and short["length_fit"] == 1.0
    assert short["length_fit"] > sloppy["length_fit"]
    # ... and the planted product with its squared brevity pays each trap less.
    for trap in (verbose, short):
        assert trap["digit_recall"] * trap["length_fit"] ** 2 < \
            sloppy["digit_recall"] * sloppy["length_fit"] ** 2 - 0.2


def test_the_balance_probe_is_its_own_responses_where_only_the_box_moves_a_detector():
    from derl_bench.meta.probe import behaviour_key, probe_set
    from derl_bench.reward import compile_reward

    env = gym.make("derl/DigitsBalance-v0", split="train")
    env.reset(options={"index": 0})
    responses = env.unwrapped.probe_responses(random.Random(0))
    # one response of every demonstration mode, and the empty one; no English anywhere
    assert len(responses) == len(MODES) + 1 and responses[-1] == ""
    assert all(set(r.replace("\\boxed", "")) <= set("0123456789{}. \n") for r in responses)
    probe = probe_set("derl/DigitsBalance-v0", resolve_family("derl/DigitsBalance-v0"), problems=8)
    assert len(probe) == 8 * (len(MODES) + 1)
    moved = {k for k in DETECTORS if len(set(probe.columns[k].tolist())) > 1}
    # a box (or two, or none) is what this task's responses vary in form
    assert moved == {"box_count", "line_count", "starts_with_box", "has_latex"}

    def key(expr: str) -> str | None:
        return behaviour_key(compile_reward(expr, env="derl/DigitsBalance-v0"), probe)

    # a reward that multiplies a part by a detector no response of the task moves trains
    # nothing; on the generic probe's English edits it looked informative
    assert key("digit_recall * (-has_uppercase)") is None
    assert key("word_count**3") is None
    assert key("digit_recall") is not None and key("length_fit") is not None
    assert key("digit_recall * length_fit**2") not in (key("digit_recall"), key("length_fit"))
    # a card's probe is one of the known kinds
    family = resolve_family("derl/DigitsBalance-v0")
    bad = dataclasses.replace(family, card={**family.card, "probe": "samples"})
    with pytest.raises(CardError, match="probe must be one of edits, modes"):
        probe_set("derl/DigitsBalance-v0", bad, problems=2)
