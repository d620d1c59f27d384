"""Canonical form, stable hash and edit distance of Meta-Rewards.

The canonical form is what two equal rewards share: aliases expanded, sums and products
flattened, commutative operands sorted, constants folded, numbers printed one way::

    >>> canonical_text("0.50*g2 + g1", "math")
    '0.5 * format_boxed + outcome'
    >>> canonical_text("g1 + 0.5 * g2", "math") == canonical_text("(g2/2)+(g1)", "math")
    True
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from derl_bench.reward.functions import POINTWISE, power, safe_div
from derl_bench.reward.nodes import Agg, Call, Neg, Node, Num, Pow, Prim, Prod, Sum
from derl_bench.reward.parser import parse

if TYPE_CHECKING:
    from derl_bench.reward.primitives import PrimitiveSet

# Precedence levels of the printer.
_SUM, _PROD, _UNARY, _POW, _ATOM = 1, 2, 3, 4, 5


def format_number(value: float) -> str:
    """Print a finite number the one canonical way (``2.0 -> '2'``, ``0.50 -> '0.5'``)."""
    if value == 0:
        return "0"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _prec(node: Node) -> int:
    if isinstance(node, Sum):
        return _SUM
    if isinstance(node, Prod):
        return _PROD
    if isinstance(node, Neg):
        return _UNARY
    if isinstance(node, Num):
        return _UNARY if node.value < 0 else _ATOM
    if isinstance(node, Pow):
        return _POW
    return _ATOM


def _wrap(node: Node, minimum: int) -> str:
    text = to_text(node)
    return f"({text})" if _prec(node) < minimum else text


def to_text(node: Node) -> str:
    """Print any tree as an expression the parser reads back to the same tree shape."""
    if isinstance(node, Num):
        return format_number(node.value) if node.value >= 0 else "-" + format_number(-node.value)
    if isinstance(node, Prim):
        return node.name
    if isinstance(node, Neg):
        return "-" + _wrap(node.arg, _UNARY)
    if isinstance(node, Sum):
        parts: list[str] = []
        for i, (sign, term) in enumerate(node.terms):
            if i == 0:
                parts.append(("-" if sign < 0 else "") + _wrap(term, _PROD))
            else:
                parts.append(("+ " if sign > 0 else "- ") + _wrap(term, _PROD))
        return " ".join(parts)
    if isinstance(node, Prod):
        out = ""
        for i, (divide, factor) in enumerate(node.factors):
            text = _wrap(factor, _UNARY if i == 0 else _POW)
            out = text if i == 0 else f"{out} {'/' if divide else '*'} {text}"
        return out
    if isinstance(node, Pow):
        return f"{_wrap(node.base, _ATOM)}**{node.exponent}"
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(to_text(a) for a in node.args)})"
    if isinstance(node, Agg):
        return f"{node.fn}({to_text(node.arg)})"
    raise TypeError(f"not an expression node: {node!r}")


# -- normalisation -------------------------------------------------------------------------
def _finite_num(value: float) -> Num | None:
    return Num(value + 0.0) if math.isfinite(value) else None


def _negate(node: Node) -> Node:
    if isinstance(node, Num):
        return Num(-node.value + 0.0)
    if isinstance(node, Sum):
        return _make_sum([(-s, t) for s, t in node.terms])
    return _make_sum([(-1, node)])


def _split_coefficient(node: Node) -> tuple[float, Node]:
    """``2 * x -> (2, x)``; a term with no numeric coefficient -> ``(1, node)``."""
    if isinstance(node, Prod) and isinstance(node.factors[0][1], Num):
        rest = node.factors[1:]
        inner: Node = rest[0][1] if len(rest) == 1 and not rest[0][0] else Prod(rest)
        return node.factors[0][1].value, inner
    return 1.0, node


def _make_sum(terms: list[tuple[int, Node]]) -> Node:
    constant = 0.0
    like: dict[str, tuple[float, Node]] = {}  # like terms: inner text -> (coefficient, inner)
    pending = list(terms)
    while pending:
        sign, term = pending.pop(0)
        if isinstance(term, Sum):
            pending[:0] = [(sign * s, t) for s, t in term.terms]
        elif isinstance(term, Num):
            constant += sign * term.value
        else:
            coefficient, inner = _split_coefficient(term)
            key = to_text(inner)
            previous = like.get(key, (0.0, inner))[0]
            like[key] = (previous + sign * coefficient, inner)
    if not math.isfinite(constant) or not all(math.isfinite(c) for c, _ in like.values()):
        return Sum(tuple(terms))  # leave an overflowing constant sum unfolded
    flat = [
        (1 if c > 0 else -1, _make_prod_from(abs(c), inner))
        for key, (c, inner) in sorted(like.items())
        if c != 0
    ]
    if constant:
        flat.append((1 if constant > 0 else -1, Num(abs(constant))))
    if not flat:
        return Num(0.0)
    if len(flat) == 1 and flat[0][0] > 0:
        return flat[0][1]
    return Sum(tuple(flat))


def _make_prod_from(coefficient: float, inner: Node | None) -> Node:
    if inner is None or coefficient == 0:
        return Num(coefficient + 0.0)
    if coefficient == 1:
        return inner
    factors = inner.factors if isinstance(inner, Prod) else ((False, inner),)
    return Prod(((False, Num(coefficient)), *factors))


def _make_prod(factors: list[tuple[bool, Node]]) -> Node:
    coefficient = 1.0
    top: list[Node] = []
    bottom: list[Node] = []
    pending = list(factors)
    while pending:
        divide, factor = pending.pop(0)
        if isinstance(factor, Prod):
            pending[:0] = [(divide ^ d, f) for d, f in factor.factors]
            continue
        if isinstance(factor, Sum) and len(factor.terms) == 1 and factor.terms[0][0] < 0:
            coefficient = -coefficient
            factor = factor.terms[0][1]
            pending.insert(0, (divide, factor))
            continue
        if isinstance(factor, Num):
            if divide:
                coefficient = safe_div(coefficient, factor.value)
            else:
                coefficient *= factor.value
            continue
        (bottom if divide else top).append(factor)
    if not math.isfinite(coefficient):
        return Prod(tuple(factors))
    if coefficient == 0:
        return Num(0.0)
    top.sort(key=to_text)
    bottom.sort(key=to_text)
    body: list[tuple[bool, Node]] = [(False, f) for f in top] + [(True, f) for f in bottom]
    if not body:
        return Num(coefficient)
    if coefficient < 0:
        return _negate(_make_prod([(False, Num(-coefficient)), *body]))
    if coefficient != 1 or body[0][0]:
        body.insert(0, (False, Num(coefficient)))
    return body[0][1] if len(body) == 1 else Prod(tuple(body))


def _make_call(fn: str, args: list[Node]) -> Node:
    function = POINTWISE[fn]
    if function.commutative:
        flat: list[Node] = []
        for arg in args:
            flat.extend(arg.args if isinstance(arg, Call) and arg.fn == fn else (arg,))
        unique = sorted({to_text(a): a for a in flat}.items())
        args = [a for _, a in unique]
        if len(args) == 1:
            return args[0]
    if all(isinstance(a, Num) for a in args):
        numbers = [cast(Num, a).value for a in args]  # all Num: checked just above
        folded = _finite_num(function.scalar(*numbers))
        if folded is not None:
            return folded
    return Call(fn, tuple(args))


def normalize(node: Node) -> Node:
    """Rewrite a tree into canonical shape (see the module docstring)."""
    if isinstance(node, (Num, Prim)):
        return Num(node.value + 0.0) if isinstance(node, Num) else node
    if isinstance(node, Neg):
        return _negate(normalize(node.arg))
    if isinstance(node, Sum):
        return _make_sum([(s, normalize(t)) for s, t in node.terms])
    if isinstance(node, Prod):
        return _make_prod([(d, normalize(f)) for d, f in node.factors])
    if isinstance(node, Pow):
        base = normalize(node.base)
        if node.exponent == 0:
            return Num(1.0)
        if node.exponent == 1:
            return base
        if isinstance(base, Num):
            folded = _finite_num(power(base.value, node.exponent))
            if folded is not None:
                return folded
        return Pow(base, node.exponent)
    if isinstance(node, Call):
        return _make_call(node.fn, [normalize(a) for a in node.args])
    if isinstance(node, Agg):
        return Agg(node.fn, normalize(node.arg))
    raise TypeError(f"not an expression node: {node!r}")


def canonical_text(expr: str, domain: str | PrimitiveSet,
                   primitives: Iterable[str] | None = None) -> str:
    """Parse ``expr`` and print its canonical form."""
    return to_text(normalize(parse(expr, domain, primitives)))


def stable_hash(canonical: str) -> str:
    """16 hex digits of SHA-256 of a canonical form: equal rewards, equal hashes."""
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()[:16]


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions) between two strings."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def distance(a: str, b: str, domain: str | PrimitiveSet,
             primitives: Iterable[str] | None = None) -> float:
    """Normalised Levenshtein distance of the canonical forms, in ``[0, 1]``.

    >>> distance("g1 + g2", "g2+g1", "math")
    0.0
    """
    ca = canonical_text(a, domain, primitives)
    cb = canonical_text(b, domain, primitives)
    longest = max(len(ca), len(cb))
    return levenshtein(ca, cb) / longest if longest else 0.0
