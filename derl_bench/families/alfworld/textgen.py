"""Text generation: TextWorld's grammar derivation, memoised.

The same derivation as textworld's ``ContextSensitiveGrammar.derive``, with two savings that do
not change the text: parsed symbols and queries are memoised (TextWorld re-parses them with
TatSu on every call), and contexts are copied shallowly (derivation never mutates entity
infos or variables, only the top-level dicts, which are still copied).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from derl_bench.families.alfworld.upstream import EngineError


@functools.cache
def parsed_symbols(text: str) -> tuple[Any, ...]:
    from textworld.envs.pddl.textgen import _parse_and_convert

    return tuple(_parse_and_convert(text, rule_name="symbols"))


@functools.cache
def _parsed_query(expression: str) -> Any:
    from textworld.logic import Rule

    return Rule.parse_conjunctive_query(expression)


def _copy_context(context: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def _with_context(symbol: Any, context: dict[str, Any]) -> Any:
    clone = copy.copy(symbol)
    clone.context = context
    return clone


def _query(expression: str, context: dict[str, Any]) -> list[dict[str, Any]]:
    contexts = []
    rule = _parsed_query(expression)
    for mapping in context["state"].all_assignments(rule, context["mapping"]):
        new = _copy_context(context)
        new["variables"].update(
            {ph.name: new["entity_infos"][var.name] for ph, var in mapping.items()})
        new["mapping"].update(mapping)
        contexts.append(new)
    return contexts


def _derive_conditional(symbol: Any, context: dict[str, Any]) -> list[Any]:
    if not context:
        raise EngineError("empty grammar context")
    contexts = _query(symbol.given, context) if symbol.given else [_copy_context(context)]
    return [_with_context(symbol.expression, _copy_context(c)) for c in contexts]


def _replace(grammar: Any, symbol: Any) -> list[Any]:
    from textworld.envs.pddl.textgen import CSGUnknownSymbolError

    rules = grammar._rules.get(str(symbol))
    if not rules:
        raise CSGUnknownSymbolError(symbol)
    state, mapping = symbol.context["state"], symbol.context["mapping"]
    for rule in rules:
        if not rule.condition or any(
            True for _ in state.all_assignments(_parsed_query(rule.condition), mapping)
        ):
            return [_with_context(s, _copy_context(symbol.context)) for s in rule.rhs]
    raise IndexError(f"no applicable rule for #{symbol}#")


def derive_text(grammar: Any, start: str, context: dict[str, Any]) -> str:
    """Expand ``start`` with ``grammar`` in ``context`` (TextWorld's derivation, memoised)."""
    from textworld.envs.pddl.textgen import (
        ConditionalSymbol,
        EvalSymbol,
        ListSymbol,
        NonterminalSymbol,
        TerminalSymbol,
        display_list,
    )

    stack = [_with_context(s, _copy_context(context)) for s in reversed(parsed_symbols(start))]
    derived: list[str] = []
    while stack:
        symbol = stack.pop()
        if isinstance(symbol, TerminalSymbol):
            derived.append(str(symbol))
        elif isinstance(symbol, NonterminalSymbol):
            stack.extend(reversed(_replace(grammar, symbol)))
        elif isinstance(symbol, ConditionalSymbol):
            stack.extend(reversed(_derive_conditional(symbol, symbol.context)))
        elif isinstance(symbol, ListSymbol):
            inner = symbol.symbol
            if isinstance(inner, ConditionalSymbol):
                items = _derive_conditional(inner, symbol.context)
            else:
                inner = _with_context(inner, symbol.context)
                items = inner.derive()
            stack.extend(reversed(display_list(items, symbol.context)))
        elif isinstance(symbol, EvalSymbol):
            stack.extend(reversed(symbol.derive()))
        else:
            raise EngineError(f"unknown grammar symbol {symbol!r}")
    return "".join(derived)

