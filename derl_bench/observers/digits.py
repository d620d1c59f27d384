"""Primitive observers of the digit-shift tasks (``derl/DigitsSparse-v0`` and its siblings).

The math family's primitives (``outcome``, ``format_boxed``, ``cot_steps``,
``loose_outcome``, ``response_length``), Arithmetic's ``digit_match`` (share of the
reference's digits the final answer has in the same place), and a step-by-step progress
signal. Both graded ones read the response's final answer (its last ``\\boxed{}``, else its
last number), so neither asks for the box: the gate task is about exactly that.

=================  =========================================================================
``progress``       share of the answer's positions right before the first wrong one (left to
                   right), over the reference's length
=================  =========================================================================

    >>> progress("94625730", "94625730"), progress("95625730", "94625730")
    (1.0, 0.125)
    >>> progress(None, "94625730")
    0.0
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym

from derl_bench.observers.arithmetic import DigitMatch, final_answer
from derl_bench.observers.base import Observer, Transition
from derl_bench.observers.math import CotSteps, FormatBoxed, LooseOutcome, Outcome, ResponseLength


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


class Progress(Observer):
    """``progress``: share of positions right before the first wrong one."""

    names = ("progress",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        answer = final_answer(t.action) if len(t.action) < 100_000 else None
        return {"progress": progress(answer, str(t.info.get("reference_answer", "")))}


def default_observers(env: gym.Env) -> list[Observer]:
    """The digit tasks' primitives, in the order their cards list them."""
    return [Outcome(), FormatBoxed(), CotSteps(), LooseOutcome(), Progress(), DigitMatch(),
            ResponseLength()]
