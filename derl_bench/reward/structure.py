"""Structure analysis: what kind of reward an expression is.

Classes, checked in this order:

- ``unbounded``: the expression's range, computed by interval arithmetic from the domain's
  declared primitive ranges, is infinite (a division by something that can be 0, ``sum`` over
  a trajectory, a primitive with no declared range);
- ``veto``: the whole expression is a product with two or more primitive-dependent factors, and
  one of them can be 0, so that factor alone can zero the reward;
- ``linear``: a constant-weighted sum of primitives and linear trajectory terms
  (``mean``, ``sum``, ``last``, thirds);
- ``bounded``: anything else with a finite range (``min``, ``max``, ``clip``, powers, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from derl_bench.reward.canonical import to_text
from derl_bench.reward.functions import POINTWISE, TRAJECTORY, Interval, power
from derl_bench.reward.nodes import (
    Agg,
    Call,
    Neg,
    Node,
    Num,
    Pow,
    Prim,
    Prod,
    Sum,
    depth_of,
    primitives_of,
    walk,
)


@dataclass(frozen=True)
class Structure:
    """The analysis of one expression (see the module docstring for ``kind``)."""

    kind: str
    range: Interval
    bounded: bool
    linear: bool
    veto: bool
    veto_factors: tuple[str, ...]
    primitives: tuple[str, ...]
    aggregations: tuple[str, ...]
    depth: int
    size: int


def _mul(a: Interval, b: Interval) -> Interval:
    def product(x: float, y: float) -> float:
        return 0.0 if x == 0 or y == 0 else x * y

    values = [product(x, y) for x in a for y in b]
    return min(values), max(values)


def _div(a: Interval, b: Interval) -> Interval:
    if b == (0.0, 0.0):
        return 0.0, 0.0
    if b[0] <= 0 <= b[1]:
        return -math.inf, math.inf
    return _mul(a, (1.0 / b[1], 1.0 / b[0]))


def _pow(a: Interval, exponent: int) -> Interval:
    lo, hi = power(a[0], exponent), power(a[1], exponent)
    if exponent % 2 == 1:
        return lo, hi
    low = 0.0 if a[0] <= 0 <= a[1] else min(lo, hi)
    return low, max(lo, hi)


def interval(node: Node, ranges: Callable[[str], Interval]) -> Interval:
    """The range of values ``node`` can take, given each primitive's range."""
    if isinstance(node, Num):
        return node.value, node.value
    if isinstance(node, Prim):
        return ranges(node.name)
    if isinstance(node, Neg):
        lo, hi = interval(node.arg, ranges)
        return -hi, -lo
    if isinstance(node, Sum):
        lo = hi = 0.0
        for sign, term in node.terms:
            a, b = interval(term, ranges)
            lo, hi = (lo + a, hi + b) if sign > 0 else (lo - b, hi - a)
        return lo, hi
    if isinstance(node, Prod):
        out: Interval = (1.0, 1.0)
        for divide, factor in node.factors:
            out = (_div if divide else _mul)(out, interval(factor, ranges))
        return out
    if isinstance(node, Pow):
        return _pow(interval(node.base, ranges), node.exponent)
    if isinstance(node, Call):
        return POINTWISE[node.fn].interval(*(interval(a, ranges) for a in node.args))
    if isinstance(node, Agg):
        return TRAJECTORY[node.fn].interval(interval(node.arg, ranges))
    raise TypeError(f"not an expression node: {node!r}")


def _is_constant(node: Node) -> bool:
    return not any(isinstance(n, (Prim, Agg)) for n in walk(node))


def _is_linear(node: Node) -> bool:
    if isinstance(node, (Num, Prim)):
        return True
    if isinstance(node, Neg):
        return _is_linear(node.arg)
    if isinstance(node, Sum):
        return all(_is_linear(t) for _, t in node.terms)
    if isinstance(node, Prod):
        variable = [(d, f) for d, f in node.factors if not _is_constant(f)]
        return (
            len(variable) <= 1
            and not any(d for d, _ in variable)
            and all(_is_linear(f) for _, f in variable)
        )
    if isinstance(node, Agg):
        return TRAJECTORY[node.fn].linear and _is_linear(node.arg)
    return _is_constant(node)


def analyze(node: Node, ranges: Callable[[str], Interval]) -> Structure:
    """Classify a canonical tree; ``ranges`` gives each primitive's declared range."""
    lo, hi = interval(node, ranges)
    bounded = math.isfinite(lo) and math.isfinite(hi)
    veto_factors: tuple[str, ...] = ()
    if isinstance(node, Prod):
        variable = [f for d, f in node.factors if not d and not _is_constant(f)]
        if len(variable) >= 2:
            veto_factors = tuple(
                to_text(f) for f in variable if (r := interval(f, ranges))[0] <= 0 <= r[1]
            )
    veto = bool(veto_factors)
    linear = _is_linear(node)
    kind = "unbounded" if not bounded else "veto" if veto else "linear" if linear else "bounded"
    nodes = walk(node)
    return Structure(
        kind=kind,
        range=(lo, hi),
        bounded=bounded,
        linear=linear,
        veto=veto,
        veto_factors=veto_factors,
        primitives=primitives_of(node),
        aggregations=tuple(sorted({n.fn for n in nodes if isinstance(n, Agg)})),
        depth=depth_of(node),
        size=len(nodes),
    )
