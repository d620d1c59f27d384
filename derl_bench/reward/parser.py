"""Recursive-descent parser: tokens -> expression tree, aliases substituted.

Grammar (lowest precedence first; ``**`` binds tighter than unary minus, as in Python)::

    expr  := term (("+" | "-") term)*
    term  := unary (("*" | "/") unary)*
    unary := ("+" | "-")* power
    power := atom ("**" INTEGER)?
    atom  := NUMBER | NAME | NAME "(" expr ("," expr)* ")" | "(" expr ")"

Nesting depth is checked on the token list before any recursion starts.
"""

from __future__ import annotations

import difflib
import keyword
import math
from collections.abc import Iterable, Mapping

from derl_bench.reward.errors import (
    AggregationError,
    ForbiddenConstructError,
    MetaRewardSyntaxError,
    NumberError,
    TooDeepError,
    UnknownPrimitiveError,
)
from derl_bench.reward.lexer import NAME_RE, Token, check_name_allowed, tokenize
from derl_bench.reward.nodes import (
    AGGREGATIONS,
    CALLABLE_NAMES,
    FUNCTIONS,
    MAX_DEPTH,
    MAX_POWER,
    Agg,
    Call,
    Neg,
    Node,
    Num,
    Pow,
    Prim,
    Prod,
    Sum,
    contains_aggregation,
)
from derl_bench.reward.primitives import Interval, PrimitiveSet, primitive_set


def resolve(
    source: str | PrimitiveSet,
    primitives: Iterable[str] | Mapping[str, Interval] | None = None,
) -> PrimitiveSet:
    """The primitive set to compile against: ``source``'s (an env id, a family, a domain, see
    :func:`~derl_bench.reward.primitives.primitive_set`), or ``primitives`` with its aliases."""
    declared = primitive_set(source)
    if primitives is None:
        return declared
    chosen = declared.with_primitives(primitives)
    for name in chosen.names:
        if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
            raise MetaRewardSyntaxError(f"primitive name {name!r} is not an identifier")
        if name in CALLABLE_NAMES or name in declared.aliases or "__" in name:
            raise ForbiddenConstructError(f"{name!r} cannot be a primitive name")
        if keyword.iskeyword(name) or keyword.issoftkeyword(name):
            raise ForbiddenConstructError(f"{name!r} cannot be a primitive name")
    return chosen


class _Parser:
    def __init__(self, expr: str, known: tuple[str, ...], aliases: Mapping[str, Node]) -> None:
        self.expr = expr
        self.tokens = tokenize(expr)
        self.i = 0
        self.known = known
        self.known_set = frozenset(known)
        self.aliases = aliases
        self._check_depth()

    def _check_depth(self) -> None:
        depth = 0
        for tok in self.tokens:
            if tok.kind == "LPAR":
                depth += 1
                if depth > MAX_DEPTH:
                    raise TooDeepError(
                        f"parentheses nest deeper than {MAX_DEPTH}", tok.pos, self.expr
                    )
            elif tok.kind == "RPAR":
                depth = max(0, depth - 1)

    # -- helpers -------------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _advance(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def _error_unexpected(self, wanted: str) -> Exception:
        tok = self.tok
        if tok.kind == "END":
            return MetaRewardSyntaxError(
                f"unexpected end of expression, expected {wanted}", tok.pos, self.expr
            )
        if tok.kind == "LPAR":
            return ForbiddenConstructError(
                "only whitelisted functions can be called", tok.pos, self.expr
            )
        if tok.kind == "NAME":
            check_name_allowed(tok.text, tok.pos, self.expr)
        return MetaRewardSyntaxError(
            f"unexpected {tok.text!r}, expected {wanted}", tok.pos, self.expr
        )

    # -- grammar -------------------------------------------------------------------------
    def parse(self) -> Node:
        node = self._expr()
        if self.tok.kind != "END":
            raise self._error_unexpected("an operator or the end")
        return node

    def _expr(self) -> Node:
        terms: list[tuple[int, Node]] = [(1, self._term())]
        while self.tok.kind == "OP" and self.tok.text in "+-":
            sign = 1 if self._advance().text == "+" else -1
            terms.append((sign, self._term()))
        return terms[0][1] if len(terms) == 1 else Sum(tuple(terms))

    def _term(self) -> Node:
        factors: list[tuple[bool, Node]] = [(False, self._unary())]
        while self.tok.kind == "OP" and self.tok.text in "*/":
            divide = self._advance().text == "/"
            factors.append((divide, self._unary()))
        return factors[0][1] if len(factors) == 1 else Prod(tuple(factors))

    def _unary(self) -> Node:
        negative = False
        while self.tok.kind == "OP" and self.tok.text in "+-":
            negative ^= self._advance().text == "-"
        node = self._power()
        return Neg(node) if negative else node

    def _power(self) -> Node:
        base = self._atom()
        if not (self.tok.kind == "OP" and self.tok.text == "**"):
            return base
        self._advance()
        tok = self.tok
        if tok.kind != "NUM" or not tok.text.isdigit() or int(tok.text) > MAX_POWER:
            raise NumberError(
                f"the exponent of ** must be an integer literal from 0 to {MAX_POWER}",
                tok.pos,
                self.expr,
            )
        self._advance()
        if self.tok.kind == "OP" and self.tok.text == "**":
            raise NumberError("chained powers (a**b**c) are not allowed", self.tok.pos, self.expr)
        return Pow(base, int(tok.text))

    def _atom(self) -> Node:
        tok = self.tok
        if tok.kind == "NUM":
            self._advance()
            value = float(tok.text)
            if not math.isfinite(value):
                raise NumberError(f"number {tok.text} is out of range", tok.pos, self.expr)
            return Num(value)
        if tok.kind == "LPAR":
            self._advance()
            node = self._expr()
            self._expect_rpar(tok)
            return node
        if tok.kind == "NAME":
            return self._name()
        raise self._error_unexpected("a number, a name or '('")

    def _expect_rpar(self, opening: Token) -> None:
        if self.tok.kind == "RPAR":
            self._advance()
            return
        if self.tok.kind == "END":
            raise MetaRewardSyntaxError("unclosed '('", opening.pos, self.expr)
        raise self._error_unexpected("')'")

    def _name(self) -> Node:
        tok = self._advance()
        name = tok.text
        check_name_allowed(name, tok.pos, self.expr)
        if self.tok.kind == "LPAR":
            return self._call(tok)
        if name in CALLABLE_NAMES:
            raise MetaRewardSyntaxError(
                f"function {name!r} must be called with arguments", tok.pos, self.expr
            )
        if name in self.aliases:
            return self.aliases[name]
        if name in self.known_set:
            return Prim(name)
        pool = list(self.known) + list(self.aliases)
        suggestions = tuple(difflib.get_close_matches(name, pool, n=3, cutoff=0.6))
        raise UnknownPrimitiveError(name, suggestions, tok.pos, self.expr)

    def _call(self, name_tok: Token) -> Node:
        name = name_tok.text
        if name not in CALLABLE_NAMES:
            if name in self.known_set or name in self.aliases:
                reason = f"primitive {name!r} is not callable"
            else:
                close = difflib.get_close_matches(name, sorted(CALLABLE_NAMES), n=3, cutoff=0.6)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                reason = f"call to {name!r} is not allowed{hint}"
            raise ForbiddenConstructError(reason, name_tok.pos, self.expr)
        opening = self._advance()
        args = [self._expr()]
        while self.tok.kind == "COMMA":
            self._advance()
            args.append(self._expr())
        self._expect_rpar(opening)
        if name in AGGREGATIONS and len(args) == 1:
            if contains_aggregation(args[0]):
                raise AggregationError(
                    f"{name}() of a trajectory term: trajectory terms cannot nest",
                    name_tok.pos,
                    self.expr,
                )
            return Agg(name, args[0])
        low, high = FUNCTIONS.get(name, (1, 1))
        if not low <= len(args) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise MetaRewardSyntaxError(
                f"{name}() takes {want} arguments, got {len(args)}", name_tok.pos, self.expr
            )
        return Call(name, tuple(args))


_ALIAS_CACHE: dict[tuple[tuple[tuple[str, str], ...], tuple[str, ...]], dict[str, Node]] = {}


def _alias_nodes(aliases: Mapping[str, str], known: tuple[str, ...]) -> dict[str, Node]:
    key = (tuple(aliases.items()), known)
    if key not in _ALIAS_CACHE:
        nodes: dict[str, Node] = {}
        for alias, text in aliases.items():
            try:
                nodes[alias] = _Parser(text, known, {}).parse()
            except UnknownPrimitiveError:
                continue  # the alias reads a primitive this set lacks: leave it unknown
        if len(_ALIAS_CACHE) > 64:
            _ALIAS_CACHE.clear()
        _ALIAS_CACHE[key] = nodes
    return _ALIAS_CACHE[key]


def parse(
    expr: str,
    domain: str | PrimitiveSet,
    primitives: Iterable[str] | Mapping[str, Interval] | None = None,
) -> Node:
    """Parse ``expr`` over the primitives of ``domain`` (an env id, a family, a domain) into a
    tree with aliases already substituted.

    >>> parse("g1 * 2", "math")
    Prod(factors=((False, Prim(name='outcome')), (False, Num(value=2.0))))
    """
    chosen = resolve(domain, primitives)
    return _Parser(expr, chosen.names, _alias_nodes(chosen.aliases, chosen.names)).parse()
