"""Constrained decoding agrees with the parser, and the random generator only makes valid
expressions."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derl_bench.reward import (
    ExpressionPrefix,
    MetaRewardError,
    TokenConstraint,
    allowed_next_chars,
    compile_reward,
    random_expression,
)
from derl_bench.reward.constrained import ALPHABET

AUTOMATA = {d: ExpressionPrefix(d) for d in ("math", "agent")}


def _compiles(text: str, domain: str) -> bool:
    try:
        compile_reward(text, domain=domain)
    except MetaRewardError:
        return False
    return True


def _complete_greedily(automaton: ExpressionPrefix, text: str) -> str:
    for _ in range(400):
        if automaton.is_complete(text):
            return text
        allowed = automaton.allowed_chars(text)
        for ch in [")", ",", "0", *sorted(allowed - set(" ()0,")), "("]:
            if ch in allowed:
                text += ch
                break
        else:
            raise AssertionError(f"dead end after {text!r}")
    raise AssertionError(f"no completion of {text!r}")


def test_allowed_next_chars_examples():
    assert "(" in allowed_next_chars("", "math") and ")" not in allowed_next_chars("", "math")
    assert allowed_next_chars("clip(g1,", "math") >= set("0.(g-+ ")
    assert ")" not in allowed_next_chars("clip(g1,", "math")
    assert "*" in allowed_next_chars("g1*", "math")  # g1**...
    assert "*" not in allowed_next_chars("g1**2*", "math")  # no chained powers
    assert set("0123456789") & allowed_next_chars("g1**", "math") == set("012345678")
    assert allowed_next_chars("g1 '", "math") == frozenset()
    assert ")" not in allowed_next_chars("max(mean(success)", "agent")  # would nest
    assert "," in allowed_next_chars("max(mean(success)", "agent")
    assert allowed_next_chars("mean(ma", "agent") == {"x"}  # max, pointwise; not mean
    assert "e" not in allowed_next_chars("mean(m", "agent")
    assert "e" in allowed_next_chars("m", "agent")
    assert not AUTOMATA["agent"].accepts("mean(mean(")
    assert not AUTOMATA["agent"].accepts("mean(g2")
    assert AUTOMATA["agent"].accepts("mean(g1")
    assert not AUTOMATA["math"].accepts("__")
    assert not AUTOMATA["math"].accepts("1e999")
    assert not AUTOMATA["math"].accepts("(" * 33)
    assert AUTOMATA["math"].is_complete("g1 + 0.5 * (g2 + 0.5 * (g3 + 0.5 * (g4 + 0.5)))")
    assert not AUTOMATA["math"].is_complete("g1 +")


@pytest.mark.parametrize("seed", range(40))
def test_every_prefix_of_a_valid_expression_is_accepted(seed):
    domain = "agent" if seed % 2 else "math"
    expr = random_expression(seed, domain)
    automaton = AUTOMATA[domain]
    state = automaton.feed("")
    for ch in expr:
        state = automaton.step(state, ch)
        assert state is not None, expr
    assert automaton.is_complete(expr)
    assert automaton.is_complete(compile_reward(expr, domain=domain).canonical)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    text=st.text(alphabet=sorted(ALPHABET | set("'[]=_x")), max_size=24),
    domain=st.sampled_from(["math", "agent"]),
)
def test_complete_strings_agree_with_the_parser(text, domain):
    assert AUTOMATA[domain].is_complete(text) == _compiles(text, domain)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10**6), steps=st.integers(0, 30), domain=st.sampled_from(["math", "agent"])
)
def test_accepted_prefixes_can_always_be_completed(seed, steps, domain):
    automaton = AUTOMATA[domain]
    rng = random.Random(seed)
    text = ""
    for _ in range(steps):  # a random walk through allowed characters
        allowed = sorted(automaton.allowed_chars(text))
        assert allowed, text
        text += rng.choice(allowed)
    completed = _complete_greedily(automaton, text)
    assert _compiles(completed, domain), completed


def test_token_constraint_matches_character_checks():
    vocab = [
        "g1",
        "+",
        " 0.5",
        "*",
        "(",
        ")",
        "mean(",
        "success",
        "__import__",
        "'",
        "g",
        "1",
        "**",
        "**9",
        "**2",
        ",",
        "max(",
        "env_reward)",
        "",
        " ",
        "success)",
    ]
    constraint = TokenConstraint(vocab, "agent")
    automaton = AUTOMATA["agent"]
    for prefix in ["", "g1", "g1 +", "mean(", "max(mean(success)", "g1**2", "(g1", "__"]:
        expected = [i for i, tok in enumerate(vocab) if tok and automaton.accepts(prefix + tok)]
        assert constraint.allowed(prefix) == expected, prefix
    assert constraint.allowed("__") == []
    assert constraint.is_complete("g1 + 0.5") and not constraint.is_complete("g1 +")
    by_id = TokenConstraint({7: "g1", 9: ")"}, "math")
    assert by_id.allowed("(") == [7]


def test_generator_is_seeded_and_valid():
    assert random_expression(5, "agent") == random_expression(5, "agent")
    drawn = {random_expression(s, "agent") for s in range(50)}
    assert len(drawn) > 40
    stream = random.Random(1)
    assert random_expression(stream, "math") != random_expression(stream, "math")
    for seed in range(200):
        for domain in ("math", "agent"):
            expr = random_expression(seed, domain, max_depth=5, max_length=120)
            assert len(expr) <= 120
            assert _compiles(expr, domain), expr


def test_generator_respects_primitives_and_depth():
    names = ["alpha", "beta"]
    for seed in range(50):
        expr = random_expression(seed, "agent", primitives=names, max_depth=3)
        reward = compile_reward(expr, domain="agent", primitives=names)
        assert set(reward.primitives) <= set(names)
        parsed_depth = compile_reward(expr, domain="agent", primitives=names).structure.depth
        assert parsed_depth <= 3 + 2  # canonical form may add a sign or coefficient level
    with_aliases = {random_expression(s, "math", use_aliases=True) for s in range(40)}
    assert any(re.search(r"\bg[1-4]\b", e) for e in with_aliases)
    without = [random_expression(s, "math", use_aliases=False) for s in range(40)]
    assert not any(re.search(r"\bg[1-4]\b", e) for e in without)
