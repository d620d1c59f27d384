"""The expression tree and the language's limits (the functions are in
:mod:`derl_bench.reward.functions`).

Sums and products are n-ary, so ``a + b + c + ...`` stays one shallow node however long it
is: tree depth only grows with parentheses and calls, which the parser bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from derl_bench.reward.functions import MAX_POWER as MAX_POWER  # beside MAX_LENGTH, MAX_DEPTH
from derl_bench.reward.functions import POINTWISE, TRAJECTORY

MAX_LENGTH = 4096
"""Longest accepted expression, in characters."""
MAX_DEPTH = 32
"""Deepest accepted nesting of parentheses and calls."""
# Views of the function table (:mod:`derl_bench.reward.functions`) that the parser and the
# constrained decoder check names and argument counts against.
FUNCTIONS: dict[str, tuple[int, int]] = {name: f.arity for name, f in POINTWISE.items()}
"""Pointwise functions: name -> (fewest, most) arguments."""
AGGREGATIONS: tuple[str, ...] = tuple(TRAJECTORY)
"""Trajectory terms: one argument, a step-level expression."""
CALLABLE_NAMES: frozenset[str] = frozenset(FUNCTIONS) | frozenset(AGGREGATIONS)
AMBIGUOUS_NAMES: frozenset[str] = frozenset(FUNCTIONS) & frozenset(AGGREGATIONS)


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Prim:
    name: str


@dataclass(frozen=True)
class Neg:
    arg: Node


@dataclass(frozen=True)
class Sum:
    """``terms`` are ``(sign, node)`` pairs, sign +1 or -1."""

    terms: tuple[tuple[int, Node], ...]


@dataclass(frozen=True)
class Prod:
    """``factors`` are ``(divide, node)`` pairs; ``divide`` marks a divisor."""

    factors: tuple[tuple[bool, Node], ...]


@dataclass(frozen=True)
class Pow:
    base: Node
    exponent: int


@dataclass(frozen=True)
class Call:
    """A pointwise function from :data:`FUNCTIONS`."""

    fn: str
    args: tuple[Node, ...]


@dataclass(frozen=True)
class Agg:
    """A trajectory term from :data:`AGGREGATIONS` over a step-level argument."""

    fn: str
    arg: Node


Node = Union[Num, Prim, Neg, Sum, Prod, Pow, Call, Agg]  # noqa: UP007


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of ``node``."""
    if isinstance(node, Neg):
        return (node.arg,)
    if isinstance(node, Sum):
        return tuple(t for _, t in node.terms)
    if isinstance(node, Prod):
        return tuple(f for _, f in node.factors)
    if isinstance(node, Pow):
        return (node.base,)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Agg):
        return (node.arg,)
    return ()


def walk(node: Node) -> list[Node]:
    """Every node of the tree, parents before children."""
    out: list[Node] = []
    stack = [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(children(current)))
    return out


def contains_aggregation(node: Node) -> bool:
    """Whether a trajectory term occurs anywhere in ``node``."""
    return any(isinstance(n, Agg) for n in walk(node))


def primitives_of(node: Node) -> tuple[str, ...]:
    """The sorted primitive names ``node`` reads."""
    return tuple(sorted({n.name for n in walk(node) if isinstance(n, Prim)}))


def depth_of(node: Node) -> int:
    """Height of the tree; a single leaf has depth 1."""
    kids = children(node)
    return 1 + (max(depth_of(k) for k in kids) if kids else 0)
