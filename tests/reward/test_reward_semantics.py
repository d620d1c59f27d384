"""The ``derl-official`` semantics of the Meta-Reward language against the official rule."""

from __future__ import annotations

import ast
import itertools
import json

import numpy as np
import pytest
import torch

from derl_bench.family import resolve_family
from derl_bench.grpo.config import ConfigError, TrainConfig, compile_run_reward, config_from_dict
from derl_bench.grpo.trainer import meta_reward_fn
from derl_bench.reward import (
    SEMANTICS,
    ForbiddenConstructError,
    MetaRewardError,
    compile_reward,
)
from derl_bench.rollout.types import Episode, Step

ENV = "derl/GSM8K-v0"
MATH_G = ("outcome", "format_boxed", "cot_steps", "loose_outcome")
COMBOS = list(itertools.product((0, 1), repeat=4))


def official_value(formula: str, bits: tuple[int, ...]) -> float:
    """A transcription of the released code's rule (meta_reward_grpo.py and
    reward_score/__init__.py): each g is 1 + 1e-6 or 1e-6, the formula is evaluated as Python,
    any exception (a ZeroDivisionError) makes the reward 0, and the value goes through a
    float32 tensor."""
    g = {f"g{i + 1}": (1 + 1e-6 if bit else 1e-6) for i, bit in enumerate(bits)}
    try:
        res = eval(formula, {"__builtins__": {"abs": abs, "min": min, "max": max}}, g)  # noqa: S307
    except Exception:
        res = 0.0
    with np.errstate(over="ignore"):
        return float(np.float32(res))


def batch(combos: list[tuple[int, ...]] = COMBOS) -> dict[str, np.ndarray]:
    return {name: np.array([[float(c[i])] for c in combos]) for i, name in enumerate(MATH_G)}


def python_accepts(formula: str) -> bool:
    try:
        ast.parse(formula, mode="eval")
    except SyntaxError:
        return False
    return True


def test_every_corpus_formula_gets_the_official_value_on_all_16_outcomes(data_root):
    from derl_bench.data.corpus import cold_start_formulas

    formulas = [f for f in cold_start_formulas(data_root) if python_accepts(f)]
    assert len(formulas) == 196
    checked, rejected = 0, []
    for formula in formulas:
        try:
            reward = compile_reward(formula, env=ENV, semantics="derl-official")
        except MetaRewardError:
            rejected.append(formula)
            continue
        expected = [official_value(formula, bits) for bits in COMBOS]
        assert reward.episodic(batch()).tolist() == expected, formula
        checked += 1
    assert checked == 193
    # The three the language refuses are the conditional expressions (`... if ... else 0`).
    assert len(rejected) == 3 and all(" if " in f and " else " in f for f in rejected)


@pytest.mark.parametrize("formula", [
    "g1 / (g3 - g4) + g2",              # a zero divisor only on some outcomes
    "(g1 + 0.5 * g2) / (g3 - g4 + 1.0)",  # cancellation: 1e16, not a division by zero
    "g1 * 0 / (g2 - g2) + 1",           # 0 * anything / 0 still raises in Python
    "-(g1 - g2) ** 3 / (g3 * g4) + abs(g1 - g4) - max(g2, g3 / g1, 2) * min(g4, 0.5)",
    "((g1 * 1e160) ** 2 + 1) / (g1 - g2 + 1e-300)",  # ** overflow raises: 0
    "g1 * 1e300 * 1e300 - g2 * 1e300 * 1e300",       # no exception: inf - inf is nan
])
def test_edge_cases_match_the_official_rule(formula):
    reward = compile_reward(formula, env=ENV, semantics="derl-official")
    expected = np.array([official_value(formula, bits) for bits in COMBOS])
    got = reward.episodic(batch())
    np.testing.assert_array_equal(got, expected)


def test_official_values_are_never_clipped_and_a_division_by_zero_zeroes_the_sample():
    official = compile_reward("g1 / (g3 * g4)", env=ENV, semantics="derl-official")
    default = compile_reward("g1 / (g3 * g4)", env=ENV)
    rows = batch([(1, 0, 0, 0), (1, 0, 1, 1), (0, 0, 0, 0)])
    assert official.episodic(rows).tolist() == [
        float(np.float32((1 + 1e-6) / 1e-12)), float(np.float32((1 + 1e-6) / (1 + 1e-6) ** 2)),
        float(np.float32(1e-6 / 1e-12))]
    assert default.episodic(rows).tolist() == [0.0, 1.0, 0.0]   # x / 0 = 0, term by term
    zero = compile_reward("g2 + g1 / (g3 - g4)", env=ENV, semantics="derl-official")
    default = compile_reward("g2 + g1 / (g3 - g4)", env=ENV)
    rows = batch([(1, 1, 1, 1)])
    assert zero.episodic(rows).tolist() == [0.0]           # the whole reward, not the term
    assert default.episodic(rows).tolist() == [1.0]


def test_torch_batches_compute_in_float64_and_return_the_inputs_dtype():
    reward = compile_reward("(g1 + 0.5 * g2) / (g3 - g4 + 1.0)", env=ENV, semantics="derl-official")
    rows = {k: torch.tensor(v, dtype=torch.float32) for k, v in batch().items()}
    got = reward.episodic(rows)
    assert got.dtype == torch.float32
    expected = np.asarray(reward.episodic(batch()), dtype=np.float32)
    np.testing.assert_array_equal(got.numpy(), expected)
    steps = reward.per_step(rows)
    assert steps.shape == (16, 1) and torch.equal(steps[:, 0], got)


def test_the_official_language_is_what_the_official_eval_accepts():
    for expr, fragment in [("g1 + success_rate", "not a known primitive"),
                           ("g1 + response_length", "reads only g1..g4"),
                           ("mean(g1)", "no trajectory terms"),
                           ("sqrt(g1)", "only the functions abs, max, min")]:
        with pytest.raises(MetaRewardError, match=fragment):
            compile_reward(expr, env=ENV, semantics="derl-official")
    # the four primitives by name are g1..g4
    assert compile_reward("outcome + format_boxed", env=ENV, semantics="derl-official").primitives \
        == ("format_boxed", "outcome")
    with pytest.raises(MetaRewardError, match="g1..g4 to be four primitives"):
        compile_reward("g1", env="derl/ALFWorld-v0", semantics="derl-official")
    with pytest.raises(MetaRewardError, match="never clips"):
        compile_reward("g1", env=ENV, bound=10.0, semantics="derl-official")
    with pytest.raises(MetaRewardError, match="semantics must be one of"):
        compile_reward("g1", env=ENV, semantics="python")
    with pytest.raises(ForbiddenConstructError, match="conditional"):
        compile_reward("g1 if g2 > 0 else 0", env=ENV, semantics="derl-official")


def test_semantics_is_part_of_a_rewards_identity():
    a = compile_reward("g1 + g2", env=ENV)
    b = compile_reward("g1 + g2", env=ENV, semantics="derl-official")
    assert a.hash == b.hash and a != b and len({a, b}) == 2
    assert "derl-official" in repr(b)


def test_train_config_carries_the_semantics_to_the_reward():
    assert TrainConfig().reward_semantics == "derl" and "derl-official" in SEMANTICS
    with pytest.raises(ConfigError, match="reward_semantics"):
        config_from_dict({"reward_semantics": "official"})
    config = config_from_dict({"meta_reward": "g1 / (g3 - g4)", "env_id": ENV,
                               "reward_semantics": "derl-official"})

    def episode(bits: tuple[int, ...]) -> Episode:
        primitives = dict(zip(MATH_G, map(float, bits), strict=True))
        return Episode(0, 0, [Step([1], [2], "r", "r", {**primitives, "response_length": 1.0})])

    score = meta_reward_fn(compile_run_reward(config, resolve_family(ENV)))
    values = score([episode((1, 0, 0, 1)), episode((1, 0, 1, 1))])
    assert values.tolist() == [official_value("g1 / (g3 - g4)", (1, 0, 0, 1)), 0.0]


def test_the_reward_command_takes_the_semantics(tmp_path, capsys):
    from derl_bench.cli import main

    log = tmp_path / "episodes.jsonl"
    steps = [dict(zip(MATH_G, map(float, bits), strict=True))
             for bits in ((1, 1, 0, 1), (1, 1, 1, 1))]
    log.write_text("\n".join(json.dumps([step]) for step in steps) + "\n")
    expr = "g1 / (g3 - g4) + g2"
    assert main(["reward", "eval", expr, "--env", ENV, "--trajectories", str(log),
                 "--semantics", "derl-official"]) == 0
    rewards = [json.loads(line)["reward"] for line in capsys.readouterr().out.splitlines()]
    assert rewards == [official_value(expr, (1, 1, 0, 1)), 0.0]
    assert main(["reward", "check", "sqrt(g1)", "--env", ENV, "--semantics", "derl-official"]) == 2
    assert "only the functions" in capsys.readouterr().err


def test_the_documented_corpus_figures_are_the_measured_ones(data_root):
    from pathlib import Path

    from benchmarks.official_semantics import measure

    figures = measure()
    assert figures["compiled"] == {"derl": 193, "derl-official": 193}
    assert figures["ranking_reversed"] <= figures["ranking_differs"] <= 193
    doc = (Path(__file__).resolve().parents[2] / "docs" / "meta-reward.md").read_text()
    for key in ("ranking_differs", "ties_broken_by_official", "ranking_reversed",
                "official_formulas_above_1e5"):
        assert f"| {figures[key]} |" in doc, key
    assert f"({figures['official_values_above_1e5']} of the 3088 values)" in doc
