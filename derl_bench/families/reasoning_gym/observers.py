"""Primitive observers of ``derl/ReasoningGym-v0``.

=================  =========================================================================
``outcome``        1.0 when the generator's score of the extracted answer is 1
``rg_score``       the generator's own score of the extracted answer, in [0, 1] (partial
                   credit where the generator gives it; 0.0 without an answer)
``answer_parsed``  1.0 when an answer could be extracted (a ``\\boxed{}``, or "answer is ...")
``format_boxed``   1.0 when the response has a balanced, non-empty ``\\boxed{...}``
``response_length``  length of the response in characters
``env_reward``     the env's reward (equal to ``outcome``)
=================  =========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym

from derl_bench.families.math.observers import AnswerParsed, FormatBoxed, Outcome, ResponseLength
from derl_bench.observers.base import Observer, Transition
from derl_bench.observers.common import EnvReward


class Score(Observer):
    """``rg_score``: reasoning-gym's score of the extracted answer."""

    names = ("rg_score",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"rg_score": float(t.info.get("rg_score", 0.0))}


def default_observers(env: gym.Env) -> list[Observer]:
    """The family's primitives, in the order the env card lists them."""
    return [Outcome(), Score(), AnswerParsed(), FormatBoxed(), ResponseLength(), EnvReward()]
