"""Primitive observers of the math envs (``derl/GSM8K-v0``, ``derl/MATH-v0``).

=================  =========================================================================
``outcome``        1.0 when the final answer is correct (exact after normalisation)
``format_boxed``   1.0 when the response has a balanced, non-empty ``\\boxed{...}``
``cot_steps``      1.0 when the response has at least two numbered or "Step N" steps
``loose_outcome``  1.0 when the reference answer appears anywhere in the response
``response_length``  length of the response in characters
``answer_parsed``  1.0 when a final answer could be extracted at all
``env_reward``     the env's reward (equal to ``outcome``)
=================  =========================================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import gymnasium as gym

from derl_bench.grading import all_boxed, normalize_latex
from derl_bench.observers.base import Observer, Transition
from derl_bench.observers.common import EnvReward

_STEP_MARKERS = re.compile(
    r"(?im)^\s*(?:step\s*(\d+)\b|(\d+)[.)]\s+\S|\*\*step\s*(\d+)|#+\s*step\s*(\d+))"
)


def count_cot_steps(text: str) -> int:
    """Number of distinct step numbers in lines that start with ``Step N``/``N.``/``N)``."""
    numbers = {next(g for g in m.groups() if g) for m in _STEP_MARKERS.finditer(text)}
    return len(numbers)


class Outcome(Observer):
    """``outcome``: the env's grading verdict."""

    names = ("outcome",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"outcome": float(bool(t.info.get("correct", False)))}


class FormatBoxed(Observer):
    """``format_boxed``: the response puts an answer in a balanced ``\\boxed{}``."""

    names = ("format_boxed",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"format_boxed": float(any(b.strip() for b in all_boxed(t.action)))}


class CotSteps(Observer):
    """``cot_steps``: the response reasons in at least ``min_steps`` numbered steps."""

    names = ("cot_steps",)

    def __init__(self, min_steps: int = 2) -> None:
        self.min_steps = min_steps

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"cot_steps": float(count_cot_steps(t.action) >= self.min_steps)}


class LooseOutcome(Observer):
    """``loose_outcome``: the normalised reference answer occurs anywhere in the response."""

    names = ("loose_outcome",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        reference = normalize_latex(str(t.info.get("reference_answer", "")))
        if not reference:
            return {"loose_outcome": 0.0}
        response = normalize_latex(t.action.replace(",", "")) if len(t.action) < 200_000 else ""
        return {"loose_outcome": float(reference.replace(",", "") in response)}


class ResponseLength(Observer):
    """``response_length``: characters in the response."""

    names = ("response_length",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"response_length": float(len(t.action))}


class AnswerParsed(Observer):
    """``answer_parsed``: the grader could extract a final answer."""

    names = ("answer_parsed",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"answer_parsed": float(t.info.get("extracted_answer") is not None)}


def default_observers(env: gym.Env) -> list[Observer]:
    """The math family's primitives, in the order the env card lists them."""
    return [Outcome(), FormatBoxed(), CotSteps(), LooseOutcome(), ResponseLength(),
            AnswerParsed(), EnvReward()]
