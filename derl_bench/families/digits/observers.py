"""Primitive observers of the digit-shift tasks (``derl/DigitsSparse-v0`` and its siblings).

The math family's primitives (``outcome``, ``format_boxed``, ``cot_steps``,
``loose_outcome``, ``response_length``), Arithmetic's ``digit_match`` (share of the
reference's digits the final answer has in the same place), and a step-by-step progress
signal; ``derl/DigitsRecall-v0`` has a recall and a brevity signal instead, and
``derl/DigitsBalance-v0`` adds the general form detectors (:mod:`derl_bench.observers.form`)
to those. The graded ones
read the response's final answer (its last ``\\boxed{}``, else its last number), so none asks
for the box: the gate task is about exactly that.

=================  =========================================================================
``progress``       share of the answer's positions right before the first wrong one (left to
                   right), over the reference's length
``digit_recall``   share of the reference's digits the answer contains, counted as a
                   multiset, order ignored (``derl/DigitsRecall-v0``)
``length_fit``     1 when the answer has at most the reference's length, else the reference's
                   length over the answer's (``derl/DigitsRecall-v0``)
=================  =========================================================================

    >>> progress("94625730", "94625730"), progress("95625730", "94625730")
    (1.0, 0.125)
    >>> progress(None, "94625730")
    0.0

``digit_recall`` and ``length_fit`` are the classic recall and brevity pair, and each is
fooled by one form whatever the answer: a box listing every digit twice holds every digit of
any 8-digit reference in which no digit appears three times, and a one-digit box is never too
long::

    >>> spam = "00112233445566778899"
    >>> digit_recall(spam, "94625730"), length_fit(spam, "94625730")
    (1.0, 0.4)
    >>> digit_recall("7", "94625730"), length_fit("7", "94625730")
    (0.125, 1.0)
    >>> digit_recall("95625731", "94625730"), length_fit("95625731", "94625730")
    (0.75, 1.0)

Order is ignored, so a wrong digit that another position needs still counts:

    >>> digit_recall("03756249", "94625730"), digit_recall("95625740", "94625730")
    (1.0, 0.875)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import gymnasium as gym

from derl_bench.families.arithmetic.observers import DigitMatch, final_answer
from derl_bench.families.math.observers import (
    CotSteps,
    FormatBoxed,
    LooseOutcome,
    Outcome,
    ResponseLength,
)
from derl_bench.observers.base import Observer, Transition
from derl_bench.observers.form import FormDetectors


def progress(answer: str | None, reference: str) -> float:
    """Share of ``reference``'s positions that ``answer`` gets right before its first error."""
    if not answer or not reference:
        return 0.0
    right = 0
    for a, r in zip(answer, reference, strict=False):
        if a != r:
            break
        right += 1
    return right / len(reference)


def digit_recall(answer: str | None, reference: str) -> float:
    """Share of ``reference``'s digits that ``answer`` contains, each digit counted as often as
    it appears in both (a multiset), order ignored; 0.0 without an answer.

    >>> digit_recall("33", "333"), digit_recall("-12", "21"), digit_recall(None, "21")
    (0.6666666666666666, 1.0, 0.0)
    """
    if not answer or not reference:
        return 0.0
    have, want = Counter(answer.lstrip("-")), Counter(reference.lstrip("-"))
    return sum(min(n, have[d]) for d, n in want.items()) / sum(want.values())


def length_fit(answer: str | None, reference: str) -> float:
    """1.0 when ``answer`` has at most ``reference``'s length (digits, sign dropped), else the
    reference's length over the answer's; 0.0 without an answer.

    >>> length_fit("1234", "12"), length_fit("12", "1234"), length_fit(None, "12")
    (0.5, 1.0, 0.0)
    """
    if not answer or not reference:
        return 0.0
    a, r = len(answer.lstrip("-")), len(reference.lstrip("-"))
    return 1.0 if a <= r else r / a


class Progress(Observer):
    """``progress``: share of positions right before the first wrong one."""

    names = ("progress",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        answer = final_answer(t.action) if len(t.action) < 100_000 else None
        return {"progress": progress(answer, str(t.info.get("reference_answer", "")))}


class DigitRecall(Observer):
    """``digit_recall``: share of the reference's digits the final answer contains (a
    multiset, order ignored)."""

    names = ("digit_recall",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        answer = final_answer(t.action) if len(t.action) < 100_000 else None
        return {"digit_recall": digit_recall(answer, str(t.info.get("reference_answer", "")))}


class LengthFit(Observer):
    """``length_fit``: 1 when the final answer is no longer than the reference, else the
    reference's length over the answer's."""

    names = ("length_fit",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        answer = final_answer(t.action) if len(t.action) < 100_000 else None
        return {"length_fit": length_fit(answer, str(t.info.get("reference_answer", "")))}


def default_observers(env: gym.Env) -> list[Observer]:
    """The digit tasks' primitives, in the order their cards list them."""
    return [Outcome(), FormatBoxed(), CotSteps(), LooseOutcome(), Progress(), DigitMatch(),
            ResponseLength()]


def recall_observers(env: gym.Env) -> list[Observer]:
    """``derl/DigitsRecall-v0``'s primitives, in its card's order: the math family's, with
    ``digit_recall`` and ``length_fit`` in place of ``progress`` and ``digit_match``."""
    return [Outcome(), FormatBoxed(), CotSteps(), LooseOutcome(), DigitRecall(), LengthFit(),
            ResponseLength()]


def balance_observers(env: gym.Env) -> list[Observer]:
    """``derl/DigitsBalance-v0``'s primitives, in its card's order: DigitsRecall's, then the
    general form detectors (:mod:`derl_bench.observers.form`), none of which fires on this
    task's demonstrations."""
    return [*recall_observers(env), FormDetectors()]
