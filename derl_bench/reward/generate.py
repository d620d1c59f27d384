"""Seeded random Meta-Rewards over a domain's primitives, for cold-start data and random search.

Every expression it returns parses in its domain::

    >>> random_expression(0, "math") == random_expression(0, "math")
    True
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from derl_bench.reward.canonical import to_text
from derl_bench.reward.functions import POINTWISE
from derl_bench.reward.nodes import (
    AGGREGATIONS,
    MAX_DEPTH,
    Agg,
    Call,
    Neg,
    Node,
    Num,
    Pow,
    Prim,
    Prod,
    Sum,
)
from derl_bench.reward.parser import resolve
from derl_bench.reward.primitives import PrimitiveSet

_CONSTANTS = (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 0.05, 0.3)


class _Generator:
    def __init__(
        self,
        rng: random.Random,
        names: list[str],
        aliases: list[str],
        episode_aliases: list[str],
        max_width: int,
    ) -> None:
        self.rng = rng
        self.names = names
        self.aliases = aliases
        self.episode_aliases = episode_aliases  # aliases that are trajectory terms
        self.max_width = max_width

    def leaf(self, inside: bool) -> Node:
        rng = self.rng
        if rng.random() < 0.2:
            return Num(rng.choice(_CONSTANTS))
        pool = self.names + [a for a in self.aliases if not inside or a not in self.episode_aliases]
        return Prim(rng.choice(pool))

    def node(self, depth: int, inside: bool, root: bool = False) -> Node:
        rng = self.rng
        if depth <= 1 or (not root and rng.random() < 0.3):
            return self.leaf(inside)
        choice = rng.choice(("sum", "sum", "prod", "agg", "agg", "call", "neg", "pow"))
        if choice == "agg" and inside:
            choice = "prod"
        width = rng.randint(2, self.max_width)
        if choice == "sum":
            return Sum(
                tuple(
                    (rng.choice((1, 1, -1)) if i else 1, self.node(depth - 1, inside))
                    for i in range(width)
                )
            )
        if choice == "prod":
            factors: list[tuple[bool, Node]] = (
                [(False, Num(rng.choice(_CONSTANTS)))] if rng.random() < 0.5 else [])
            factors += [
                (i > 0 and rng.random() < 0.15, self.node(depth - 1, inside))
                for i in range(width - len(factors))
            ]
            return Prod(tuple(factors))
        if choice == "agg":
            return Agg(rng.choice(AGGREGATIONS), self.node(depth - 1, True))
        if choice == "neg":
            return Neg(self.node(depth - 1, inside))
        if choice == "pow":
            base = self.leaf(inside)
            return Pow(
                base if isinstance(base, Prim) else Prim(rng.choice(self.names)), rng.randint(2, 3)
            )
        function = POINTWISE[rng.choice(tuple(POINTWISE))]
        low, high = function.arity
        if high > low:
            return Call(function.name, tuple(self.node(depth - 1, inside) for _ in range(width)))
        constants = function.generated_constants
        operands = [self.node(depth - 1, inside) for _ in range(low - len(constants))]
        for choices in constants:
            value = rng.choice(choices)
            operands.append(Num(value) if value >= 0 else Neg(Num(-value)))
        return Call(function.name, tuple(operands))


def random_expression(
    seed: int | random.Random,
    domain: str | PrimitiveSet,
    *,
    max_depth: int = 4,
    max_width: int = 3,
    primitives: Iterable[str] | None = None,
    use_aliases: bool = True,
    max_length: int = 400,
) -> str:
    """A random valid expression over the primitives of ``domain``: an env id (only the
    primitives that env declares), a family, or ``"math"``/``"agent"``.

    ``seed`` is an int or a :class:`random.Random` (to draw a stream). ``max_depth`` bounds
    the tree height, ``max_width`` the operands per sum/product/min/max, ``max_length`` the text
    (a longer draw is replaced by a fresh one).
    """
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    chosen = resolve(domain, primitives)
    names = list(chosen.names)
    aliases = [
        a
        for a, text in chosen.aliases.items()
        if use_aliases and all(p in names for p in _names_in(text))
    ]
    episode_aliases = [a for a in aliases if "(" in chosen.aliases[a]]
    generator = _Generator(rng, names, aliases, episode_aliases, max(2, max_width))
    depth = max(1, min(max_depth, MAX_DEPTH // 2))
    for _ in range(100):
        text = to_text(generator.node(depth, inside=False, root=True))
        if len(text) <= max_length:
            return text
    return to_text(generator.leaf(inside=False))


def _names_in(text: str) -> list[str]:
    import re

    return [n for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text) if n not in AGGREGATIONS]
