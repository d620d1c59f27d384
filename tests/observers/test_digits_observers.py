"""The digit tasks' recall and brevity primitives: what each pays, and what fools each."""

from __future__ import annotations

import random

import pytest

from derl_bench.families.digits.env import VERBOSE, make_problem, sloppy_answer
from derl_bench.families.digits.observers import digit_recall, length_fit


def test_recall_counts_each_digit_as_often_as_both_hold_it_in_any_order():
    assert digit_recall("1122", "1212") == 1.0
    assert digit_recall("1111", "1212") == 0.5
    assert digit_recall("12", "1212") == 0.5
    assert digit_recall("", "12") == digit_recall(None, "12") == 0.0
    assert digit_recall("9", "") == 0.0


def test_length_fit_is_flat_up_to_the_reference_length_and_falls_beyond_it():
    assert length_fit("1", "12345678") == length_fit("87654321", "12345678") == 1.0
    assert length_fit("123456789", "12345678") == pytest.approx(8 / 9)
    assert length_fit(VERBOSE, "12345678") == pytest.approx(0.4)
    assert length_fit("-12", "12") == 1.0 and length_fit(None, "12") == 0.0


def test_each_primitive_is_fooled_by_one_form_whatever_the_problem():
    rng = random.Random(0)
    for _ in range(200):
        problem = make_problem(rng.randint(3, 7), "".join(rng.choice("0123456789")
                                                          for _ in range(8)))
        reference = problem.answer
        most = max(reference.count(d) for d in set(reference))
        # The verbose box holds two of every digit: all of a reference with no digit thrice.
        assert digit_recall(VERBOSE, reference) == (1.0 if most <= 2 else
                                                    pytest.approx(1 - sum(
                                                        max(0, reference.count(d) - 2)
                                                        for d in set(reference)) / 8))
        # A one-digit box is never too long, right or wrong.
        assert length_fit("0", reference) == 1.0
        # Recall is dense on honest answers: a wrong digit costs at most 1/8 of it.
        sloppy = sloppy_answer(problem, 0.3, rng)
        wrong = sum(a != b for a, b in zip(sloppy, reference, strict=True))
        assert 1 - wrong / 8 <= digit_recall(sloppy, reference) <= 1.0
        assert (digit_recall(sloppy, reference) == 1.0) == (sorted(sloppy) == sorted(reference))
