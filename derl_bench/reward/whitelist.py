"""The released DERL code's rules for the Meta-Optimizer's output: which tokens its decoder
may emit, how a sample becomes a formula, and when a formula is valid.

The official decoder (``constrained_rollout.py``) has no grammar. It allows a fixed set of
tokens at every step: a token whose text, decoded on its own without clean-up of spaces, is one
of ``+ - * / ( )``, ``g1``..``g4``, ``g``, ``1``..``4``, or consists only of the characters
``+ - * / ( ) . : e``, digits and whitespace; and the tokenizer's end, begin, padding and
unknown tokens. Only the base vocabulary (``tokenizer.vocab_size``) is scanned, so added
tokens are allowed only when they are one of those four special tokens::

    >>> [t for t in ["g1", " g1", "0.5", " *", "e-3", "\\n", "exp", "", "g"] if whitelisted(t)]
    ['g1', '0.5', ' *', 'e-3', '\\n', 'g']

A sample's formula is its first line, stripped of surrounding whitespace and then of
surrounding full stops (:func:`formula_text`). The formula is valid (``expression_check.py``)
when its parentheses balance, it names one of ``g1``..``g4``, and Python's arithmetic gives a
number for it at ``g1 = g2 = 1``, ``g3 = 1e-6``, ``g4 = 1 + 1e-6`` (:func:`check_formula`)::

    >>> check_formula("0.4*g1 + 0.6*g2") is None
    True
    >>> check_formula("g1 / (g2 - 1)")
    'float division by zero'
    >>> check_formula("2 * 3")
    'names none of g1..g4'

The official check calls Python's ``eval``; here the formula is parsed with :mod:`ast` and
only arithmetic is evaluated (numbers, ``g1``..``g4``, unary ``+ -``, binary ``+ - * / // % **``),
which is all that text made of whitelisted tokens can express. Anything else in it (a call, an
attribute, a tuple, another name) is what ``eval`` would fail on, and it is invalid here too.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

WHITELIST_TOKENS = frozenset({"+", "-", "*", "/", "(", ")", "g1", "g2", "g3", "g4",
                              "g", "1", "2", "3", "4"})
"""Token texts the official decoder allows as a whole."""
WHITELIST_CHARS = re.compile(r"[+\-*/().:e0-9\s]+")
"""Token texts made only of these characters are allowed too."""
CHECK_VALUES: dict[str, float] = {"g1": 1.0, "g2": 1.0, "g3": 1e-6, "g4": 1.0 + 1e-6}
"""The values the official validity check evaluates a formula at."""
MAX_POWER_BITS = 100_000
"""An integer power whose result would need more bits is refused rather than computed (the
official ``eval`` would grind through it; no whitelisted formula needs it)."""

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def whitelisted(token_text: str) -> bool:
    """Whether the official decoder allows a token whose decoded text is ``token_text``."""
    return token_text in WHITELIST_TOKENS or WHITELIST_CHARS.fullmatch(token_text) is not None


def whitelist_ids(tokenizer: Any) -> list[int]:
    """The token ids the official decoder allows for ``tokenizer`` (a HF tokenizer), sorted:
    the base vocabulary's whitelisted tokens and the end, begin, padding and unknown tokens."""
    allowed = {i for i in range(tokenizer.vocab_size)
               if whitelisted(tokenizer.decode([i], clean_up_tokenization_spaces=False))}
    for special in (tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id,
                    tokenizer.unk_token_id):
        if special is not None:
            allowed.add(int(special))
    return sorted(allowed)


def formula_text(sample: str) -> str:
    """The formula the official code reads from a decoded sample: its first line, stripped of
    whitespace, then of full stops at either end.

        >>> formula_text(" 0.5*g1 + g2.\\nmore")
        '0.5*g1 + g2'
    """
    return sample.split("\n")[0].strip().strip(".")


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return False
    return depth == 0


def _power(base: Any, exponent: Any) -> Any:
    if (isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1
            and exponent * math.log2(abs(base)) > MAX_POWER_BITS):
        raise OverflowError(f"integer power {base}**{exponent} is too large")
    return operator.pow(base, exponent)


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, complex):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in CHECK_VALUES:
            raise NameError(f"name {node.id!r} is not defined")
        return CHECK_VALUES[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        return _BINARY[type(node.op)](left, right)
    raise TypeError(f"{type(node).__name__} is not arithmetic")


def check_formula(formula: str) -> str | None:
    """``None`` when ``formula`` passes the official validity check (module docstring), else
    why it fails. An empty formula fails."""
    if not formula.strip():
        return "empty"
    if not _balanced(formula):
        return "unbalanced parentheses"
    if not any(name in formula for name in CHECK_VALUES):
        return "names none of g1..g4"
    try:
        value = _evaluate(ast.parse(formula, mode="eval"))
    except SyntaxError as err:
        return f"not an expression: {err.msg}"
    except (ArithmeticError, NameError, TypeError, ValueError) as err:
        return str(err)
    if type(value) not in (int, float):
        return f"evaluates to {type(value).__name__}, not a number"
    return None
