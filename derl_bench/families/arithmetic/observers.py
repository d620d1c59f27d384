"""Primitive observers of ``derl/Arithmetic-v0``: the math family's, plus two graded ones.

The math primitives say whether an answer is right and well formatted; a proxy task where a
small model is mostly wrong also needs to know *how nearly right* a wrong answer is. Both
extra primitives read the response's final answer (its last ``\\boxed{}``, else its last number):

=================  =========================================================================
``digit_match``    fraction of the reference answer's digits the answer has in the same
                   place, aligned from the right (units with units, tens with tens), over
                   the longer of the two lengths; 0.0 when no answer is found
``answer_closeness``  ``max(0, 1 - |answer - reference| / max(1, |reference|))``; 0.0 when no
                   answer is found
=================  =========================================================================

    >>> digit_agreement("56", "56"), digit_agreement("57", "56"), digit_agreement("156", "56")
    (1.0, 0.5, 0.6666666666666666)
    >>> closeness("55", "50"), closeness("200", "50")
    (0.9, 0.0)
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import gymnasium as gym

from derl_bench.families.math.observers import default_observers as math_observers
from derl_bench.grading import last_boxed
from derl_bench.observers.base import Observer, Transition

_NUMBER = re.compile(r"-?\d+")


def final_answer(response: str) -> str | None:
    """The response's last boxed integer, else its last integer, else ``None``."""
    boxed = last_boxed(response)
    if boxed is not None:
        found = _NUMBER.findall(boxed)
        return found[-1] if found else None
    found = _NUMBER.findall(response[-10_000:])
    return found[-1] if found else None


def digit_agreement(answer: str | None, reference: str) -> float:
    """Right-aligned digit agreement between two integers (see the module docstring)."""
    if not answer:
        return 0.0
    a, r = answer.lstrip("-")[::-1], reference.lstrip("-")[::-1]
    same = sum(x == y for x, y in zip(a, r, strict=False))
    return same / max(len(a), len(r), 1)


def closeness(answer: str | None, reference: str) -> float:
    """``max(0, 1 - |answer - reference| / max(1, |reference|))`` (0.0 without an answer)."""
    if not answer:
        return 0.0
    value, ref = int(answer), int(reference)
    return max(0.0, 1.0 - abs(value - ref) / max(1, abs(ref)))


class DigitMatch(Observer):
    """``digit_match``: right-aligned digit agreement of the final answer with the reference."""

    names = ("digit_match",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        answer = final_answer(t.action) if len(t.action) < 100_000 else None
        return {"digit_match": digit_agreement(answer, str(t.info.get("reference_answer", "")))}


class AnswerCloseness(Observer):
    """``answer_closeness``: relative numeric closeness of the final answer to the reference."""

    names = ("answer_closeness",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        answer = final_answer(t.action) if len(t.action) < 100_000 else None
        return {"answer_closeness": closeness(answer, str(t.info.get("reference_answer", "0")))}


def default_observers(env: gym.Env) -> list[Observer]:
    """The arithmetic family's primitives: the math ones, then the two graded ones."""
    return [*math_observers(env), DigitMatch(), AnswerCloseness()]
