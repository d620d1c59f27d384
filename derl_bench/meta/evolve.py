"""Variation operators on Meta-Reward expression trees: subtree mutation and crossover.

Both work on parsed trees (:func:`derl_bench.reward.parser.parse`) and return expression text
that is guaranteed to compile in the domain; a draw that would not (a trajectory term nested in
another, say) is redrawn, and after ``tries`` failures a fresh random expression is returned.

    >>> import random
    >>> child = mutate("g1 + 0.5 * g2", "math", random.Random(0))
    >>> compile_reward(child, domain="math") is not None
    True
"""

from __future__ import annotations

import random
from dataclasses import replace

from derl_bench.reward import MetaRewardError, PrimitiveSet, compile_reward, random_expression
from derl_bench.reward.canonical import to_text
from derl_bench.reward.nodes import Agg, Call, Neg, Node, Pow, Prod, Sum, children
from derl_bench.reward.parser import parse

Path = tuple[int, ...]


def subtree_paths(node: Node, prefix: Path = ()) -> list[Path]:
    """Paths (child indices from the root) of every node, the root's being ``()``."""
    paths = [prefix]
    for i, child in enumerate(children(node)):
        paths.extend(subtree_paths(child, (*prefix, i)))
    return paths


def get_subtree(node: Node, path: Path) -> Node:
    """The node at ``path``."""
    for index in path:
        node = children(node)[index]
    return node


def _with_child(node: Node, index: int, new: Node) -> Node:
    if isinstance(node, Neg | Agg):
        return replace(node, arg=new)
    if isinstance(node, Pow):
        return replace(node, base=new)
    if isinstance(node, Call):
        return replace(node, args=tuple(new if i == index else a for i, a in enumerate(node.args)))
    if isinstance(node, Sum):
        return replace(node, terms=tuple((s, new if i == index else t)
                                         for i, (s, t) in enumerate(node.terms)))
    if isinstance(node, Prod):
        return replace(node, factors=tuple((d, new if i == index else f)
                                           for i, (d, f) in enumerate(node.factors)))
    raise ValueError(f"{type(node).__name__} has no children")


def replace_subtree(node: Node, path: Path, new: Node) -> Node:
    """A copy of ``node`` with the subtree at ``path`` replaced by ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    return _with_child(node, head, replace_subtree(children(node)[head], rest, new))


def _valid(text: str, domain: str | PrimitiveSet, max_length: int) -> bool:
    if len(text) > max_length:
        return False
    try:
        compile_reward(text, domain=domain)
    except MetaRewardError:
        return False
    return True


def mutate(expr: str, domain: str | PrimitiveSet, rng: random.Random, *, max_depth: int = 3,
           max_length: int = 400, tries: int = 20) -> str:
    """Replace a random subtree of ``expr`` with a fresh random expression."""
    tree = parse(expr, domain)
    for _ in range(tries):
        path = rng.choice(subtree_paths(tree))
        donor = parse(random_expression(rng, domain, max_depth=max_depth), domain)
        child = to_text(replace_subtree(tree, path, donor))
        if _valid(child, domain, max_length):
            return child
    return random_expression(rng, domain, max_depth=max_depth)


def crossover(first: str, second: str, domain: str | PrimitiveSet, rng: random.Random, *,
              max_length: int = 400, tries: int = 20) -> str:
    """Graft a random subtree of ``second`` onto a random position of ``first``."""
    a, b = parse(first, domain), parse(second, domain)
    for _ in range(tries):
        child = to_text(replace_subtree(a, rng.choice(subtree_paths(a)),
                                        get_subtree(b, rng.choice(subtree_paths(b)))))
        if _valid(child, domain, max_length):
            return child
    return mutate(first, domain, rng)
