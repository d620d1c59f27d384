"""The rules that numeric settings share across configs, each written once.

A config lists its settings with the rule each follows and :func:`refuse` raises one error
naming every setting that breaks its rule, what it may be and what it was::

    >>> refuse([("learning_rate", float("inf"), LEARNING_RATE), ("seed", 0, SEED)])
    Traceback (most recent call last):
    ...
    ValueError: learning_rate must be a finite number > 0, got inf

A value of the wrong type (a string, a bool) breaks every rule, so a config built in Python
gets the check a recipe's types already got.

The env a training recipe and the verifiers taskset fall back to when they name none is written
here too (:data:`DEFAULT_ENV_ID`), once, rather than in the stages that use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple


class Rule(NamedTuple):
    """What a setting may be: a test, the words that say it, and why where that is not plain."""

    test: Callable[[Any], bool]
    allowed: str
    why: str = ""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def at_least(low: int) -> Rule:
    """A whole number ``>= low`` (a count)."""
    return Rule(lambda v: _whole(v) and v >= low, f"a whole number >= {low}")


def number_at_least(low: float) -> Rule:
    """A number ``>= low`` (NaN is none)."""
    return Rule(lambda v: _number(v) and v >= low, f"a number >= {low:g}")


LEARNING_RATE = Rule(lambda v: _number(v) and math.isfinite(v) and v > 0,
                     "a finite number > 0")
"""A learning rate: an infinite one turns every weight it touches into NaN."""
POSITIVE = Rule(lambda v: _number(v) and v > 0, "a number > 0")
MAX_GRAD_NORM = POSITIVE._replace(why=".inf: no clipping")
"""The norm gradients are clipped to: a negative one would flip their sign."""
COUNT = at_least(1)
SEED = Rule(lambda v: _whole(v) and v >= 0, "a whole number >= 0")
"""A seed: numpy's generators refuse negative ones."""
TOP_P = Rule(lambda v: _number(v) and 0 < v <= 1, "in (0, 1]", "1 keeps every token")
"""Nucleus sampling's mass: at 0 no token would be kept, and the samplers keep the likeliest
one instead, which is greedy decoding under another name."""
TEMPERATURE = Rule(lambda v: _number(v) and math.isfinite(v) and v >= 0,
                   "a finite number >= 0", "0 decodes greedily")
"""A decoding temperature: 0 is greedy decoding (the samplers take the likeliest token at
``temperature <= 0``, so a negative one would be greedy decoding in disguise)."""
GROUP_TEMPERATURE = Rule(lambda v: TEMPERATURE.test(v) and v > 0,
                         "a finite number > 0",
                         "GRPO learns from the differences between a group's completions, and "
                         "at temperature 0, greedy decoding, they are all alike; validation and "
                         "evaluation decode greedily on their own")
"""The temperature a GRPO group is sampled at (the inner runs' and the Meta-Optimizer's)."""

DEFAULT_ENV_ID = "derl/GSM8K-v0"
"""The env a training recipe without ``env_id`` trains on (:class:`~derl_bench.grpo.config.
TrainConfig`) and the verifiers taskset serves when it is named none."""


def problems(settings: Iterable[tuple[str, Any, Rule]]) -> list[str]:
    """``"NAME must be ALLOWED, got VALUE"`` for each setting that breaks its rule."""
    return [f"{name} must be {rule.allowed}, got {value!r}" + (f" ({rule.why})" if rule.why
                                                                  else "")
            for name, value, rule in settings if not rule.test(value)]


def refuse(settings: Iterable[tuple[str, Any, Rule]],
           error: Callable[[str], Exception] = ValueError) -> None:
    """Raise ``error`` naming every setting that breaks its rule (see :func:`problems`)."""
    found = problems(settings)
    if found:
        raise error("; ".join(found))


__all__ = ["COUNT", "DEFAULT_ENV_ID", "GROUP_TEMPERATURE", "LEARNING_RATE", "MAX_GRAD_NORM",
           "POSITIVE", "SEED", "TEMPERATURE", "TOP_P", "Rule", "at_least", "number_at_least",
           "problems", "refuse"]
