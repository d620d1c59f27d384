"""Answer extraction and grading rules."""

from __future__ import annotations

import threading
import time

import pytest

from derl_bench.grading import (
    MathVerifier,
    all_boxed,
    extract_gsm8k_answer,
    grade_gsm8k,
    grade_math,
    gsm8k_reference,
    last_boxed,
    normalize_latex,
)

PATHOLOGICAL = "10^{10^{10}}"  # sympy tries to evaluate this integer and never returns


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so 3 + 4 = 7\n#### 7", "7"),
        ("The answer is $1,234.", "1234"),
        ("the answer is: 45%", "45"),
        ("\\boxed{12}", "12"),
        ("\\boxed{\\$12}", "12"),
        ("I think 5 apples, then 6, finally 8.", "8"),
        ("The answer is 3. Wait, re-checking: the answer is 4.", "4"),
        ("#### 10 ... but \\boxed{11}", "11"),
        ("The answer is -2.5.", "-2.5"),
        ("no digits here", None),
        ("", None),
    ],
)
def test_extract_gsm8k_answer(text, expected):
    assert extract_gsm8k_answer(text) == expected


def test_last_marker_wins_over_the_first():
    # lm-eval-harness#3438: the first "answer is" must not shadow the final one.
    text = "The answer is 10 if we ignore tax. With tax the answer is 12."
    assert grade_gsm8k(text, "12").correct
    assert not grade_gsm8k(text, "10").correct


def test_gsm8k_reference_and_numeric_equality():
    assert gsm8k_reference("work <<2*3=6>>6\n#### 1,000") == "1000"
    assert grade_gsm8k("#### 1000.00", "1000").correct
    assert not grade_gsm8k("#### 1001", "1000").correct


def test_boxed_extraction_handles_nesting_fbox_and_escaped_braces():
    assert last_boxed("\\boxed{\\frac{1}{\\sqrt{2}}}") == "\\frac{1}{\\sqrt{2}}"
    assert last_boxed("first \\boxed{1} then \\fbox{2}") == "2"
    assert last_boxed("\\boxed{\\{1,2\\}}") == "\\{1,2\\}"
    assert last_boxed("\\boxed 5$") == "5"
    assert last_boxed("\\boxed{unclosed") is None
    assert all_boxed("\\boxed{a} \\boxed{b}") == ["a", "b"]


@pytest.mark.timeout(120)  # the one-pass scan takes well under a second; the old one, hours
def test_a_megabyte_of_unclosed_boxes_is_scanned_in_one_pass():
    opened = "\\boxed{" * 150_000  # about 1 MB, no box ever closed
    assert all_boxed(opened) == []
    assert last_boxed(opened + "\\boxed{42}") == "42"
    assert all_boxed("x\\fbox{" * 100_000 + "}") == [""]  # only the innermost box closes
    grade = grade_math(opened + "\\boxed{42}", "42")
    assert grade == grade_math("\\boxed{42}", "42") and grade.correct
    assert extract_gsm8k_answer(opened + "#### 7") == "7"


def test_normalize_latex_is_conservative():
    assert normalize_latex("\\left( 3, \\dfrac{\\pi}{2} \\right)") == "(3,\\frac{\\pi}{2})"
    assert normalize_latex("90^\\circ") == normalize_latex("90")
    assert normalize_latex("x+1") != normalize_latex("x-1")


def test_grade_math_uses_math_verify_for_equivalence():
    verifier = MathVerifier(timeout=10)
    try:
        assert grade_math("\\boxed{0.5}", "\\frac{1}{2}", verifier).correct
        assert not grade_math("\\boxed{0.6}", "\\frac{1}{2}", verifier).correct
        assert not grade_math("no box", "\\frac{1}{2}", verifier).correct
    finally:
        verifier.close()


def test_pathological_answer_times_out_and_the_verifier_recovers():
    verifier = MathVerifier(timeout=1.0)
    try:
        assert verifier.equal("1", "1")  # warm the worker up
        start = time.monotonic()
        grade = grade_math(f"\\boxed{{{PATHOLOGICAL}}}", "1", verifier)
        elapsed = time.monotonic() - start
        assert not grade.correct and grade.timed_out
        assert elapsed < 10
        assert verifier.equal("\\frac{1}{2}", "0.5")  # a fresh worker answers again
    finally:
        verifier.close()


def test_timeouts_work_outside_the_main_thread():
    verifier = MathVerifier(timeout=1.0)
    results: list[bool] = []
    try:
        verifier.equal("1", "1")
        thread = threading.Thread(target=lambda: results.append(verifier.equal("1", PATHOLOGICAL)))
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert results == [False] and verifier.timeouts == 1
    finally:
        verifier.close()
