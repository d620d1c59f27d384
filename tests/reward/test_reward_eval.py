"""Evaluation: every operator, function and trajectory term in both modes, against a plain
per-sample reference interpreter, plus the numeric policy and the torch path."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from derl_bench.reward import (
    AGGREGATIONS,
    DEFAULT_LIMIT,
    MetaRewardError,
    TrajectoryError,
    compile_reward,
    random_expression,
)
from derl_bench.reward.nodes import Agg, Call, Neg, Num, Pow, Prim, Prod, Sum


# -- an independent, per-sample reference of the documented semantics ------------------------
def _third(values: list[float], k: int) -> float:
    n = len(values)
    if n == 0:
        return 0.0
    start = k * n // 3
    end = max((k + 1) * n // 3, start + 1)
    chunk = values[start:end]
    return sum(chunk) / len(chunk)


def _aggregate(fn: str, values: list[float]) -> float:
    if not values:
        return 0.0
    return {
        "mean": lambda v: sum(v) / len(v),
        "sum": sum,
        "last": lambda v: v[-1],
        "max": max,
        "min": min,
        "first_third": lambda v: _third(v, 0),
        "mid_third": lambda v: _third(v, 1),
        "last_third": lambda v: _third(v, 2),
    }[fn](values)


def ref_value(node, steps: list[dict[str, float]], at: int | None = None) -> float:
    """Episode value (``at`` None) or the value at one step (inside a trajectory term)."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Prim):
        if at is not None:
            return steps[at][node.name]
        return steps[-1][node.name] if steps else 0.0
    if isinstance(node, Agg):
        return _aggregate(node.fn, [ref_value(node.arg, steps, t) for t in range(len(steps))])
    if isinstance(node, Neg):
        return -ref_value(node.arg, steps, at)
    if isinstance(node, Sum):
        return sum(s * ref_value(t, steps, at) for s, t in node.terms)
    if isinstance(node, Prod):
        out = 1.0
        for divide, factor in node.factors:
            v = ref_value(factor, steps, at)
            out = (0.0 if v == 0 else out / v) if divide else out * v
        return out
    if isinstance(node, Pow):
        try:
            return ref_value(node.base, steps, at) ** node.exponent
        except OverflowError:
            return math.inf
    if isinstance(node, Call):
        a = [ref_value(x, steps, at) for x in node.args]
        if node.fn == "abs":
            return abs(a[0])
        if node.fn == "sqrt":
            return math.sqrt(max(a[0], 0.0))
        if node.fn == "log1p":
            return math.copysign(math.log1p(abs(a[0])), a[0])
        if node.fn == "clip":
            return min(max(a[0], a[1]), a[2])
        return min(a) if node.fn == "min" else max(a)
    raise TypeError(node)


def sanitize(v: float, limit: float = DEFAULT_LIMIT) -> float:
    if math.isnan(v):
        return 0.0
    return min(max(v, -limit), limit)


def ref_episodic(reward, episodes) -> list[float]:
    return [sanitize(ref_value(reward.tree, steps), reward.limit) for steps in episodes]


def ref_per_step(reward, steps) -> list[float]:
    running = [
        sanitize(ref_value(reward.tree, steps[: t + 1]), reward.limit) for t in range(len(steps))
    ]
    return [r - (running[t - 1] if t else 0.0) for t, r in enumerate(running)]


def _episodes(rng: np.random.Generator, names, batch: int = 7, steps: int = 8):
    lengths = [0, 1, 2, 3, 4, 5, steps][:batch]
    return [[{n: float(rng.integers(-8, 9)) / 4 for n in names} for _ in range(n)] for n in lengths]


def _check_against_reference(expr: str, domain: str, seed: int = 0) -> None:
    reward = compile_reward(expr, domain=domain)
    episodes = _episodes(np.random.default_rng(seed), reward.primitives)
    from derl_bench.reward import pad_episodes

    traj, lengths = pad_episodes(episodes, reward.primitives)
    for name in traj:  # padding must never leak into results
        traj[name][np.arange(traj[name].shape[1])[None, :] >= lengths[:, None]] = np.nan
    np.testing.assert_allclose(
        reward.episodic(traj, lengths), ref_episodic(reward, episodes), rtol=1e-9, atol=1e-9
    )
    dense = reward.per_step(traj, lengths)
    for b, steps in enumerate(episodes):
        np.testing.assert_allclose(
            dense[b, : len(steps)], ref_per_step(reward, steps), rtol=1e-9, atol=1e-9
        )
        assert np.all(dense[b, len(steps) :] == 0)


OPERATOR_CASES = [
    "success + failed",
    "success - failed",
    "success * failed",
    "success / failed",
    "-success",
    "success**2",
    "success**3",
    "success**0",
    "2 * success - failed / 4",
    "(success + 1) / (failed - 1)",
]
FUNCTION_CASES = [
    "abs(success)",
    "sqrt(success)",
    "log1p(success)",
    "clip(success, -0.5, 1)",
    "min(success, failed)",
    "max(success, failed, 0.25)",
    "clip(success, 1, 0)",
]


@pytest.mark.parametrize("expr", OPERATOR_CASES + FUNCTION_CASES)
def test_operators_and_functions_match_the_reference(expr):
    _check_against_reference(expr, "agent")


@pytest.mark.parametrize("fn", AGGREGATIONS)
def test_every_aggregation_matches_the_reference(fn):
    _check_against_reference(f"{fn}(success * 2 - failed)", "agent")
    _check_against_reference(f"success + {fn}(failed)", "agent", seed=1)


@pytest.mark.parametrize("domain", ["math", "agent"])
def test_official_expression_matches_the_reference(domain):
    _check_against_reference("g1 + 0.5 * (g2 + 0.5 * (g3 + 0.5 * (g4 + 0.5)))", domain)


def test_thirds_by_hand():
    reward = compile_reward(
        "first_third(env_reward) + 10 * mid_third(env_reward) + 100 * last_third(env_reward)",
        domain="agent",
    )
    traj = {"env_reward": np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])}
    # L = 6: thirds are steps [0, 2), [2, 4), [4, 6).
    assert reward.episodic(traj, [6])[0] == pytest.approx(1.5 + 35 + 550)
    # L = 1: every third is the single step. L = 2: [0, 1), [0, 1), [1, 2).
    assert reward.episodic(traj, [1])[0] == pytest.approx(111)
    assert reward.episodic(traj, [2])[0] == pytest.approx(1 + 10 + 200)


def test_bare_primitive_reads_the_last_real_step():
    reward = compile_reward("success", domain="agent")
    traj = {"success": np.array([[0.0, 0.0, 1.0, 7.0], [5.0, 0.0, 0.0, 0.0]])}
    assert reward.episodic(traj, [3, 0]).tolist() == [1.0, 0.0]
    assert reward.per_step(traj, [3, 0]).tolist() == [[0.0, 0.0, 1.0, 0.0], [0.0] * 4]


def test_per_step_sum_is_a_dense_identity():
    reward = compile_reward("sum(score_delta)", domain="agent")
    traj = {"score_delta": np.array([[1.0, -2.0, 3.0]])}
    assert reward.per_step(traj, [3]).tolist() == [[1.0, -2.0, 3.0]]


def test_division_by_zero_is_zero():
    reward = compile_reward("1 / success + success / (failed - failed)", domain="agent")
    out = reward.episodic({"success": [[0.0], [2.0]], "failed": [[1.0], [1.0]]}, [1, 1])
    assert out.tolist() == [0.0, 0.5]
    assert compile_reward("outcome / 0", domain="math").canonical == "0"


def test_overflow_and_nan_are_clipped_and_flagged():
    reward = compile_reward("score**8 * score**8 * score**8", domain="agent")
    values, invalid = reward.episodic(
        {"score": [[1e20], [-1e20], [1.5]]}, [1, 1, 1], return_invalid=True
    )
    assert values.tolist() == [DEFAULT_LIMIT, DEFAULT_LIMIT, pytest.approx(1.5**24)]
    assert invalid.tolist() == [True, True, False]
    nan_reward = compile_reward("score - score", domain="agent", primitives=["score"])
    assert nan_reward.canonical == "0"
    nan_input = compile_reward("score * 2", domain="agent")
    values, invalid = nan_input.episodic(
        {"score": [[np.nan], [np.inf]]}, [1, 1], return_invalid=True
    )
    assert values.tolist() == [0.0, DEFAULT_LIMIT]
    assert invalid.tolist() == [True, True]


def test_output_bound():
    reward = compile_reward("10 * success - 3", domain="agent", bound=5)
    assert reward.episodic({"success": [[0.0], [1.0], [0.5]]}, [1, 1, 1]).tolist() == [-3, 5, 2]
    dense = reward.per_step({"success": [[1.0, 1.0]]}, [2])
    assert dense.tolist() == [[5.0, 0.0]]
    for bad in (0, -1, math.inf, math.nan, "2"):
        with pytest.raises(MetaRewardError):
            compile_reward("g1", domain="math", bound=bad)


def test_domain_functions_never_produce_nan():
    reward = compile_reward("sqrt(score) + log1p(score) + abs(score)", domain="agent")
    out = reward.episodic({"score": [[-4.0], [0.0], [3.0]]}, [1, 1, 1])
    assert np.all(np.isfinite(out))
    assert out.tolist() == pytest.approx(
        [-math.log1p(4) + 4, 0.0, math.sqrt(3) + math.log1p(3) + 3]
    )


def test_constant_expression_needs_lengths_or_data():
    reward = compile_reward("0.5", domain="math")
    assert reward.primitives == ()
    assert reward.episodic({}, [1, 1, 0]).tolist() == [0.5, 0.5, 0.5]
    assert reward.per_step({}, [2, 0]).tolist() == [[0.5, 0.0], [0.0, 0.0]]
    with pytest.raises(TrajectoryError):
        reward.episodic({}, None)


def test_math_single_step_one_dimensional_input():
    reward = compile_reward("g1 + 0.5 * g2", domain="math")
    out = reward.episodic({"outcome": np.array([1.0, 0.0]), "format_boxed": np.array([1.0, 1.0])})
    assert out.tolist() == [1.5, 0.5]


def test_episodic_from_steps_ragged():
    reward = compile_reward("g1 + mean(format_valid)", domain="agent")
    episodes = [
        [{"success": 0.0, "format_valid": 1.0}, {"success": 1.0, "format_valid": 0.0}],
        [],
        [{"success": 0.0, "format_valid": 1.0, "extra": 3.0}],
    ]
    out = reward.episodic_from_steps(episodes)
    assert isinstance(out, np.ndarray)
    assert out.tolist() == [1.5, 0.0, 1.0]
    with pytest.raises(TrajectoryError, match="episode 0 step 1"):
        reward.episodic_from_steps([[{"success": 0.0, "format_valid": 1.0}, {"success": 1.0}]])
    with pytest.raises(TrajectoryError, match="not a number"):
        reward.episodic_from_steps([[{"success": "yes", "format_valid": 1.0}]])


@pytest.mark.parametrize(
    "traj,lengths,fragment",
    [
        ({"success": [[1.0]]}, [1], "missing primitive"),
        ({"success": [[1.0]], "format_valid": [[1.0, 2.0]]}, [1], "shape"),
        ({"success": [[1.0]], "format_valid": [[1.0]]}, [2], "lengths must lie"),
        ({"success": [[1.0]], "format_valid": [[1.0]]}, [1, 1], "lengths for a batch"),
        ({"success": [[1.0]], "format_valid": [[1.0]]}, [0.5], "integers"),
        ({"success": [[[1.0]]], "format_valid": [[[1.0]]]}, [1], "expected (batch, steps)"),
        ({"success": [["a"]], "format_valid": [[1.0]]}, [1], "not numeric"),
    ],
)
def test_bad_trajectories_are_typed_errors(traj, lengths, fragment):
    reward = compile_reward("success * format_valid", domain="agent")
    with pytest.raises(TrajectoryError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        reward.episodic(traj, lengths)
    with pytest.raises(TrajectoryError):
        reward.episodic([1, 2], [1])  # type: ignore[arg-type]


def test_zero_step_batch():
    reward = compile_reward("mean(success) + 1", domain="agent")
    assert reward.episodic({"success": np.zeros((2, 0))}, [0, 0]).tolist() == [1.0, 1.0]


def test_torch_tensors_are_computed_in_torch():
    torch = pytest.importorskip("torch")
    expr = (
        "g1 + 0.5 * (g2 + 0.5 * (g3 + 0.5 * (g4 + 0.5))) + max(env_reward) "
        "- min(env_reward) / (success - 1) + sqrt(abs(sum(env_reward))) + log1p(last(success))"
    )
    reward = compile_reward(expr, domain="agent")
    rng = np.random.default_rng(3)
    traj = {"success": (rng.random((16, 9)) < 0.5) * 1.0, "env_reward": rng.normal(size=(16, 9))}
    lengths = rng.integers(0, 10, size=16)
    as_torch = {k: torch.tensor(v) for k, v in traj.items()}
    episodic = reward.episodic(as_torch, torch.tensor(lengths))
    dense = reward.per_step(as_torch, lengths)
    assert isinstance(episodic, torch.Tensor) and episodic.dtype == torch.float64
    assert isinstance(dense, torch.Tensor) and dense.shape == (16, 9)
    np.testing.assert_allclose(episodic.numpy(), reward.episodic(traj, lengths), rtol=1e-12)
    np.testing.assert_allclose(
        dense.numpy(), reward.per_step(traj, lengths), rtol=1e-12, atol=1e-12
    )
    as_float32 = {k: torch.tensor(v, dtype=torch.float32) for k, v in traj.items()}
    assert reward.episodic(as_float32, lengths).dtype == torch.float32


# -- properties -------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 10**6), domain=st.sampled_from(["math", "agent"]))
def test_random_expressions_match_the_reference(seed, domain):
    _check_against_reference(random_expression(seed, domain), domain, seed)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(0, 10**6))
def test_per_step_rewards_sum_to_the_episodic_reward(seed):
    reward = compile_reward(random_expression(seed, "agent"), domain="agent")
    rng = np.random.default_rng(seed)
    traj = {n: rng.normal(size=(5, 6)) for n in reward.primitives}
    lengths = np.array([1, 2, 3, 5, 6])
    np.testing.assert_allclose(
        reward.per_step(traj, lengths).sum(axis=1),
        reward.episodic(traj, lengths),
        rtol=1e-7,
        atol=1e-6,
    )
