"""Constrained decoding: which characters (or tokenizer tokens) may come next.

:class:`ExpressionPrefix` is a character-level automaton equivalent to the parser: a prefix it
accepts can still be completed into an expression that compiles, and every expression that
compiles is accepted character by character. A language model decoding a Meta-Reward can
thus be masked to valid expressions only::

    >>> sorted(allowed_next_chars("clip(g1,", "math") & set("(),"))
    ['(']
    >>> ExpressionPrefix("agent").accepts("mean(g2")
    False
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from derl_bench.reward.lexer import NUMBER_RE
from derl_bench.reward.nodes import (
    AGGREGATIONS,
    AMBIGUOUS_NAMES,
    FUNCTIONS,
    MAX_DEPTH,
    MAX_LENGTH,
    MAX_POWER,
)
from derl_bench.reward.parser import resolve
from derl_bench.reward.primitives import PrimitiveSet

ALPHABET = frozenset(string.ascii_letters + string.digits + "_ +-*/(),.")
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_")
WHITESPACE = frozenset(" \t\r\n")
DEFINITE_AGGREGATIONS = frozenset(AGGREGATIONS) - AMBIGUOUS_NAMES


@dataclass(frozen=True)
class Frame:
    """An open parenthesis: a group (``fn`` is None) or a call with ``args`` commas seen."""

    fn: str | None
    args: int = 0
    pointwise: bool = False  # a min/max that must get two or more arguments


@dataclass(frozen=True)
class State:
    mode: str = "operand"  # operand, name, number, fn_open, operator, star, exp_start, exponent
    text: str = ""
    frames: tuple[Frame, ...] = ()
    no_power: bool = False
    length: int = 0


def _in_aggregation(frames: tuple[Frame, ...]) -> bool:
    return any(f.fn in DEFINITE_AGGREGATIONS for f in frames)


def _mark_aggregation(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """An episode value just completed: enclosing min/max still on their first argument can
    no longer be trajectory terms themselves."""
    return tuple(
        replace(f, pointwise=True) if f.fn in AMBIGUOUS_NAMES and f.args == 0 else f for f in frames
    )


class ExpressionPrefix:
    """The automaton for the primitives of an env id, a family or a domain (and optionally a
    custom primitive set)."""

    def __init__(self, domain: str | PrimitiveSet,
                 primitives: Iterable[str] | None = None) -> None:
        chosen = resolve(domain, primitives)
        known = chosen.names
        aliases = {
            a: t
            for a, t in chosen.aliases.items()
            if all(p in known for p in _names(t) if p not in AGGREGATIONS)
        }
        self.episode_aliases = frozenset(a for a, t in aliases.items() if "(" in t)
        self.operands_free = frozenset(known) | frozenset(aliases)
        self.operands_inside = self.operands_free - self.episode_aliases
        self.functions_free = frozenset(FUNCTIONS) | frozenset(AGGREGATIONS)
        self.functions_inside = frozenset(FUNCTIONS)
        self._prefixes = {
            False: _prefixes(self.operands_free | self.functions_free),
            True: _prefixes(self.operands_inside | self.functions_inside),
        }

    # -- public --------------------------------------------------------------------------
    def feed(self, text: str, state: State | None = None) -> State | None:
        """The state after ``text`` (from the start, or from ``state``); None if invalid."""
        current = state or State()
        for ch in text:
            following = self.step(current, ch)
            if following is None:
                return None
            current = following
        return current

    def accepts(self, prefix: str) -> bool:
        """Whether ``prefix`` can still be completed into a valid expression."""
        return self.feed(prefix) is not None

    def is_complete(self, text: str) -> bool:
        """Whether ``text`` is a whole valid expression."""
        state = self.feed(text)
        return state is not None and self.completes(state)

    def completes(self, state: State) -> bool:
        """Whether the text that led to ``state`` is a whole valid expression."""
        end = self._finish_token(state)
        return end is not None and end.mode == "operator" and not end.frames

    def allowed_chars(self, prefix: str) -> frozenset[str]:
        """The characters of :data:`ALPHABET` that keep ``prefix`` valid."""
        state = self.feed(prefix)
        if state is None:
            return frozenset()
        return frozenset(ch for ch in ALPHABET if self.step(state, ch) is not None)

    # -- the automaton -------------------------------------------------------------------
    def step(self, state: State, ch: str) -> State | None:
        if state.length >= MAX_LENGTH:
            return None
        state = replace(state, length=state.length + 1)
        mode = state.mode
        if mode in ("name", "number", "exponent"):
            extended = self._extend_token(state, ch)
            if extended is not None:
                return extended
            finished = self._finish_token(state)
            return None if finished is None else self._dispatch(finished, ch)
        return self._dispatch(state, ch)

    def _dispatch(self, state: State, ch: str) -> State | None:
        mode = state.mode
        if mode == "operand":
            return self._operand(state, ch)
        if mode == "fn_open":
            if ch in WHITESPACE:
                return state
            if ch != "(" or len(state.frames) >= MAX_DEPTH:
                return None
            pointwise = state.text in AMBIGUOUS_NAMES and _in_aggregation(state.frames)
            frame = Frame(state.text, 0, pointwise)
            return replace(state, mode="operand", text="", frames=(*state.frames, frame))
        if mode == "exp_start":
            if ch in WHITESPACE:
                return state
            if ch.isascii() and ch.isdigit() and int(ch) <= MAX_POWER:
                return replace(state, mode="exponent", text=ch)
            return None
        if mode == "star":
            if ch == "*":
                return None if state.no_power else replace(state, mode="exp_start")
            return self._operand(replace(state, mode="operand", no_power=False), ch)
        return self._operator(state, ch)

    def _operand(self, state: State, ch: str) -> State | None:
        if ch in WHITESPACE or ch in "+-":
            return state
        if ch.isascii() and (ch.isdigit() or ch == "."):
            return replace(state, mode="number", text=ch)
        if ch in NAME_CHARS:
            if ch not in self._prefixes[_in_aggregation(state.frames)]:
                return None
            return replace(state, mode="name", text=ch)
        if ch == "(" and len(state.frames) < MAX_DEPTH:
            return replace(state, frames=(*state.frames, Frame(None)))
        return None

    def _operator(self, state: State, ch: str) -> State | None:
        if ch in WHITESPACE:
            return state
        if ch in "+-/":
            return replace(state, mode="operand", no_power=False)
        if ch == "*":
            return replace(state, mode="star")
        if not state.frames or ch not in "),":
            return None
        top, rest = state.frames[-1], state.frames[:-1]
        if ch == ",":
            if top.fn is None or top.fn in DEFINITE_AGGREGATIONS:
                return None
            if top.args + 2 > FUNCTIONS[top.fn][1]:
                return None
            return replace(
                state,
                mode="operand",
                frames=(*rest, replace(top, args=top.args + 1)),
                no_power=False,
            )
        count = top.args + 1
        if top.fn is None:
            return replace(state, frames=rest, no_power=False)
        if top.fn in DEFINITE_AGGREGATIONS or (top.fn in AMBIGUOUS_NAMES and count == 1):
            if top.pointwise:
                return None
            return replace(state, frames=_mark_aggregation(rest), no_power=False)
        if count < FUNCTIONS[top.fn][0]:
            return None
        return replace(state, frames=rest, no_power=False)

    def _extend_token(self, state: State, ch: str) -> State | None:
        text = state.text + ch
        if state.mode == "name":
            if ch in NAME_CHARS and text in self._prefixes[_in_aggregation(state.frames)]:
                return replace(state, text=text)
            return None
        if state.mode == "exponent":
            if ch.isascii() and ch.isdigit() and int(text) <= MAX_POWER:
                return replace(state, text=text)
            return None
        if not (ch.isascii() and (ch.isdigit() or ch in ".eE+-")):
            return None
        if not _number_prefix(text):
            return None
        if NUMBER_RE.fullmatch(text) and float(text) == float("inf"):
            return None
        return replace(state, text=text)

    def _finish_token(self, state: State) -> State | None:
        """Close the token in progress, if any; None when it cannot end here."""
        if state.mode == "number":
            if not NUMBER_RE.fullmatch(state.text):
                return None
            return replace(state, mode="operator", text="", no_power=False)
        if state.mode == "exponent":
            return replace(state, mode="operator", text="", no_power=True)
        if state.mode != "name":
            return state
        inside = _in_aggregation(state.frames)
        name = state.text
        if name in (self.functions_inside if inside else self.functions_free):
            return replace(state, mode="fn_open")
        if name in (self.operands_inside if inside else self.operands_free):
            frames = (
                _mark_aggregation(state.frames) if name in self.episode_aliases else state.frames
            )
            return replace(state, mode="operator", text="", frames=frames, no_power=False)
        return None


def _number_prefix(text: str) -> bool:
    """Whether ``text`` can be extended into a number literal the lexer reads whole."""
    mantissa, _, exponent = text.lower().partition("e")
    if mantissa.count(".") > 1 or not mantissa.replace(".", "").isdigit() and mantissa != ".":
        return False
    if "e" in text.lower():
        if not any(c.isdigit() for c in mantissa):
            return False
        body = exponent[1:] if exponent[:1] in ("+", "-") else exponent
        return body == "" or body.isdigit()
    return "+" not in text and "-" not in text


def _prefixes(names: Iterable[str]) -> frozenset[str]:
    return frozenset(name[:i] for name in names for i in range(1, len(name) + 1))


def _names(text: str) -> list[str]:
    import re

    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)


def allowed_next_chars(
    prefix: str, domain: str, primitives: Iterable[str] | None = None
) -> frozenset[str]:
    """The characters that may follow ``prefix`` in a valid expression of ``domain``."""
    return ExpressionPrefix(domain, primitives).allowed_chars(prefix)


class TokenConstraint:
    """Token-level masks for a language-model vocabulary.

    ``vocab`` maps token ids to their decoded text (a sequence indexed by id, or a mapping).
    :meth:`allowed` walks a trie of the vocabulary, so tokens sharing a beginning share work.
    """

    def __init__(
        self,
        vocab: Sequence[str] | Mapping[int, str],
        domain: str | PrimitiveSet,
        primitives: Iterable[str] | None = None,
    ) -> None:
        self.automaton = ExpressionPrefix(domain, primitives)
        items = vocab.items() if isinstance(vocab, Mapping) else enumerate(vocab)
        self.trie: dict = {}
        for token_id, text in items:
            if not text:
                continue
            node = self.trie
            for ch in text:
                node = node.setdefault(ch, {})
            node.setdefault(None, []).append(token_id)

    def allowed(self, prefix: str) -> list[int]:
        """Ids of the tokens that keep ``prefix`` valid, sorted."""
        state = self.automaton.feed(prefix)
        if state is None:
            return []
        found: list[int] = []
        stack = [(self.trie, state)]
        while stack:
            node, current = stack.pop()
            for ch, child in node.items():
                if ch is None:
                    continue
                following = self.automaton.step(current, ch)
                if following is None:
                    continue
                found.extend(child.get(None, ()))
                stack.append((child, following))
        return sorted(found)

    def is_complete(self, prefix: str) -> bool:
        """Whether the end of sequence may come after ``prefix``."""
        return self.automaton.is_complete(prefix)
