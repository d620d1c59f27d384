"""Canonical form, hash, distance and structure analysis."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from derl_bench.reward import (
    canonical_text,
    compile_reward,
    distance,
    levenshtein,
    random_expression,
    stable_hash,
)

EQUIVALENT = [
    ("g1 + 0.5 * g2", "0.50*g2+g1", "(g2 / 2) + (g1)", "g2*0.5 + g1*1", "g1 - -0.5*g2"),
    ("g1 * g2", "g2 * g1", "(g2)*(g1)", "g1 * g2 * 1.0"),
    ("max(g1, g2, g1)", "max(g2, g1)", "max(g2, max(g1, g1))"),
    ("g1 + g1", "2 * g1", "g1 * 2.0"),
    ("1 + 1 + g3", "g3 + 2", "2.0e0 + g3"),
    ("-(g1 - g2)", "g2 - g1", "-g1 + g2"),
]


@pytest.mark.parametrize("group", EQUIVALENT)
def test_equal_rewards_share_canonical_form_and_hash(group):
    forms = {canonical_text(e, "math") for e in group}
    assert len(forms) == 1
    hashes = {compile_reward(e, domain="math").hash for e in group}
    assert len(hashes) == 1
    assert len({compile_reward(e, domain="math") for e in group}) == 1  # dedupe in a set


def test_aliases_dedupe_with_their_expansion():
    assert compile_reward("g1", domain="agent") == compile_reward("success", domain="agent")
    assert (
        compile_reward("g2 + g3", domain="agent").canonical
        == "first_third(env_reward) + mid_third(env_reward)"
    )


def test_different_rewards_differ():
    a, b = compile_reward("g1 - g2", domain="math"), compile_reward("g2 - g1", domain="math")
    assert a.canonical != b.canonical and a.hash != b.hash


def test_number_formatting():
    assert canonical_text("outcome * 2.0", "math") == "2 * outcome"
    assert canonical_text("outcome * 0.000001", "math") == "1e-06 * outcome"
    assert canonical_text("outcome + 1e20", "math") == "outcome + 1e+20"
    assert canonical_text("outcome - 0.5", "math") == "outcome - 0.5"


def test_hash_is_stable_across_runs():
    # The hash is part of stored results: it is defined as SHA-256 of the canonical text, never
    # Python's per-process salted hash().
    assert stable_hash("outcome") == hashlib.sha256(b"outcome").hexdigest()[:16]
    assert len(compile_reward("g1", domain="math").hash) == 16


@pytest.mark.parametrize("seed", range(60))
def test_canonical_form_is_idempotent_and_equivalent(seed):
    domain = "agent" if seed % 2 else "math"
    expr = random_expression(seed, domain)
    first = compile_reward(expr, domain=domain)
    again = compile_reward(first.canonical, domain=domain)
    assert again.canonical == first.canonical and again.hash == first.hash
    rng = np.random.default_rng(seed)
    traj = {n: rng.integers(-4, 5, size=(6, 5)) / 2 for n in first.primitives}
    lengths = np.array([0, 1, 2, 3, 4, 5])
    np.testing.assert_allclose(
        again.episodic(traj, lengths), first.episodic(traj, lengths), rtol=1e-9, atol=1e-9
    )


def test_levenshtein_and_distance():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
    assert distance("g1 + g2", "g2 + g1", "math") == 0.0
    near = distance("g1 + g2", "g1 + g3", "math")
    far = distance("g1 + g2", "sqrt(response_length) * 7", "math")
    assert 0 < near < far <= 1
    assert distance("g1", "g2", "math") == distance("g2", "g1", "math")


@pytest.mark.parametrize(
    "expr,domain,kind",
    [
        ("g1 + 0.5 * (g2 + 0.5 * (g3 + 0.5 * (g4 + 0.5)))", "math", "linear"),
        ("g1 + 0.5 * (g2 + 0.5 * (g3 + 0.5 * (g4 + 0.5)))", "agent", "linear"),
        ("(g1 + g2) / 2", "math", "linear"),
        ("g1 * g2", "math", "veto"),
        ("success * (0.5 + mean(format_valid))", "agent", "veto"),
        ("0.1 + g1 * g2", "math", "bounded"),
        ("max(g1, g2)", "math", "bounded"),
        ("clip(score_delta, -1, 1)", "agent", "bounded"),
        ("g1 / g2", "math", "unbounded"),
        ("sum(format_valid)", "agent", "unbounded"),
        ("response_length * 0.001", "math", "unbounded"),
        ("clip(response_length, 0, 100) * outcome", "math", "veto"),
        ("g1 * my_signal", "math", "unbounded"),
    ],
)
def test_structure_classes(expr, domain, kind):
    primitives = None
    if "my_signal" in expr:
        primitives = ["outcome", "my_signal"]
    assert compile_reward(expr, domain=domain, primitives=primitives).structure.kind == kind


def test_structure_details():
    s = compile_reward("success * format_valid * 2", domain="agent").structure
    assert s.veto and s.veto_factors == ("format_valid", "success")
    assert s.range == (0.0, 2.0)
    assert s.primitives == ("format_valid", "success")
    assert s.depth == 2 and s.size == 4
    deep = compile_reward("sqrt(abs(mean(success) - 1))", domain="agent").structure
    assert deep.depth == 5 and deep.aggregations == ("mean",)
    assert not deep.linear and deep.bounded


def test_declared_ranges_for_custom_primitives():
    reward = compile_reward(
        "g1 * my_signal", domain="math", primitives={"outcome": (0.0, 1.0), "my_signal": (0.0, 3.0)}
    )
    assert reward.structure.kind == "veto" and reward.structure.range == (0.0, 3.0)
