"""The language's function table: every callable name, its arity and its meaning, in one place.

The evaluator (batched arrays), the structure analysis (intervals), the canonical form (constant
folding, operand order), the random generator and the Meta-Optimizer's prompt all read
:data:`POINTWISE` and :data:`TRAJECTORY`; none of them spells a function's semantics again.

Every pointwise operation is total: no input raises or produces NaN by itself::

    >>> (POINTWISE["sqrt"].scalar(-4.0),
    ...  POINTWISE["log1p"].scalar(-1.0) == -POINTWISE["log1p"].scalar(1.0))
    (0.0, True)
    >>> [f.name for f in POINTWISE.values() if f.commutative]
    ['min', 'max']
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from derl_bench.family import Interval

MAX_POWER = 8
"""Largest accepted exponent of ``**`` (an integer literal 0..MAX_POWER)."""
MAX_ARGS = 16
"""Most arguments of the pointwise ``min``/``max``."""


def safe_div(a: float, b: float) -> float:
    """``a / b``, and 0 where ``b == 0`` (the language's division).

    >>> safe_div(1.0, 0.0)
    0.0
    """
    return 0.0 if b == 0 else a / b


def power(x: float, exponent: int) -> float:
    """``x ** exponent`` for a small non-negative integer; ``inf`` on overflow."""
    try:
        return float(x**exponent)
    except OverflowError:
        return math.copysign(math.inf, x) if exponent % 2 else math.inf


def _signed_log1p(x: float) -> float:
    return math.copysign(math.log1p(abs(x)), x) if x != 0 else 0.0


def _clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def _abs_interval(a: Interval) -> Interval:
    lo, hi = a
    return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))


def _monotone(fn: Callable[[float], float]) -> Callable[[Interval], Interval]:
    return lambda a: (fn(a[0]), fn(a[1]))


def _clip_interval(x: Interval, lo: Interval, hi: Interval) -> Interval:
    return _clip(x[0], lo[0], hi[0]), _clip(x[1], lo[1], hi[1])


def _reduce(combine: str) -> Callable[..., Any]:
    def apply(ops: Any, *args: Any) -> Any:
        return functools.reduce(getattr(ops, combine), args)

    return apply


@dataclass(frozen=True)
class Pointwise:
    """A pointwise function: applied step by step (or to episode values), element-wise.

    ``arity`` is ``(fewest, most)`` arguments, ``params`` how the docs name them. ``scalar`` is
    its meaning on floats (constant folding), ``array`` the same on the evaluator's array
    operations (``ops``, then the arguments), ``interval`` its range given its arguments' ranges.
    ``commutative`` functions are also associative and idempotent: the canonical form flattens
    nested calls, sorts the arguments and drops repeats. ``generated_constants`` are the choices
    the random generator draws for the trailing constant arguments (``clip``'s bounds).
    """

    name: str
    arity: tuple[int, int]
    meaning: str
    scalar: Callable[..., float]
    array: Callable[..., Any]
    interval: Callable[..., Interval]
    params: str = "x"
    commutative: bool = False
    generated_constants: tuple[tuple[float, ...], ...] = ()

    @property
    def signature(self) -> str:
        """How a call is written: ``abs(x)``, ``clip(x, lo, hi)``, ``min(a, b, ...)``."""
        return f"{self.name}({self.params})"


@dataclass(frozen=True)
class Trajectory:
    """A trajectory term: one value per episode from a step-level argument.

    ``linear`` terms are linear in their argument (structure analysis); ``interval`` maps the
    argument's range to the term's. The evaluator implements each term's episode and prefix
    forms (:mod:`derl_bench.reward.evaluate`).
    """

    name: str
    meaning: str
    linear: bool
    interval: Callable[[Interval], Interval]


def _with_empty_episode(a: Interval) -> Interval:
    # An empty episode gives 0, so 0 is always in the range.
    return min(a[0], 0.0), max(a[1], 0.0)


def _sum_interval(a: Interval) -> Interval:
    return (-math.inf if a[0] < 0 else 0.0), (math.inf if a[1] > 0 else 0.0)


POINTWISE: Mapping[str, Pointwise] = {
    f.name: f
    for f in (
        Pointwise("abs", (1, 1), "absolute value", abs,
                  lambda ops, x: ops.abs(x), _abs_interval),
        Pointwise("sqrt", (1, 1), "`sqrt(max(x, 0))`: negative inputs give 0",
                  lambda x: math.sqrt(max(x, 0.0)),
                  lambda ops, x: ops.sqrt(ops.maximum(x, 0.0)),
                  _monotone(lambda x: math.sqrt(max(x, 0.0)))),
        Pointwise("log1p", (1, 1), "`sign(x) * log(1 + abs(x))`: the usual `log1p` for "
                  "`x >= 0`, mirrored below 0, so it is finite everywhere", _signed_log1p,
                  lambda ops, x: ops.sign(x) * ops.log1p(ops.abs(x)), _monotone(_signed_log1p)),
        Pointwise("clip", (3, 3), "`min(max(x, lo), hi)` (so `hi` wins if `lo > hi`)", _clip,
                  lambda ops, x, lo, hi: ops.minimum(ops.maximum(x, lo), hi), _clip_interval,
                  params="x, lo, hi", generated_constants=((-1.0, 0.0), (1.0, 2.0))),
        Pointwise("min", (2, MAX_ARGS), f"smallest of 2 to {MAX_ARGS} arguments",
                  lambda *xs: min(xs), _reduce("minimum"),
                  lambda *args: (min(a[0] for a in args), min(a[1] for a in args)),
                  params="a, b, ...", commutative=True),
        Pointwise("max", (2, MAX_ARGS), f"largest of 2 to {MAX_ARGS} arguments",
                  lambda *xs: max(xs), _reduce("maximum"),
                  lambda *args: (max(a[0] for a in args), max(a[1] for a in args)),
                  params="a, b, ...", commutative=True),
    )
}
"""Pointwise functions by name, in the order the docs and the generator list them."""

TRAJECTORY: Mapping[str, Trajectory] = {
    t.name: t
    for t in (
        Trajectory("mean", "average", True, _with_empty_episode),
        Trajectory("sum", "sum", True, _sum_interval),
        Trajectory("last", "`x_{L-1}`", True, _with_empty_episode),
        Trajectory("max", "largest step value", False, _with_empty_episode),
        Trajectory("min", "smallest step value", False, _with_empty_episode),
        Trajectory("first_third", "mean over the first third of the steps", True,
                   _with_empty_episode),
        Trajectory("mid_third", "mean over the middle third", True, _with_empty_episode),
        Trajectory("last_third", "mean over the last third", True, _with_empty_episode),
    )
}
"""Trajectory terms by name. ``min``/``max`` with one argument are trajectory terms; with two or
more they are pointwise."""


def language_summary() -> str:
    """The language in a few lines, for prompts: operators, functions and trajectory terms.

    >>> "min" in language_summary().split("trajectory terms")[1]
    True
    """
    functions = ", ".join(f.signature for f in POINTWISE.values())
    terms = ", ".join(f"{t}(x)" for t in TRAJECTORY)
    return (
        f"Use + - * /, ** with an integer exponent from 0 to {MAX_POWER}, parentheses and "
        "numbers;\n"
        f"the functions {functions};\n"
        f"and the trajectory terms {terms}, which turn a per-step expression into one value\n"
        "per episode and do not nest. A primitive outside any trajectory term is its value at "
        "the last step."
    )
