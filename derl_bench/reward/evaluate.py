"""Batched evaluation of a parsed Meta-Reward over trajectories of primitives.

A compiled reward walks its (small) canonical tree once per call, and every node is one
vectorised array operation over the whole batch: ``(B, T)`` step arrays and ``(B,)`` episode
arrays, in numpy or torch. Nothing is ever executed from the expression text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from derl_bench.reward.backend import NumpyOps, TorchOps, is_torch
from derl_bench.reward.errors import TrajectoryError
from derl_bench.reward.functions import POINTWISE
from derl_bench.reward.nodes import Agg, Call, Neg, Node, Num, Pow, Prim, Prod, Sum
from derl_bench.reward.semantics import OFFICIAL_EPSILON

THIRDS = {"first_third": 0, "mid_third": 1, "last_third": 2}


def third_bounds(lengths: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Step range ``[start, end)`` of third ``k`` (0, 1, 2) of episodes of ``lengths`` steps.

    Third ``k`` starts at ``floor(k * L / 3)`` and ends at ``floor((k + 1) * L / 3)``, but holds
    at least one step whenever ``L >= 1`` (so short episodes share steps between thirds).

    >>> [tuple(int(v[0]) for v in third_bounds(np.array([5]), k)) for k in range(3)]
    [(0, 1), (1, 3), (3, 5)]
    """
    start = (k * lengths) // 3
    end = np.minimum(np.maximum(((k + 1) * lengths) // 3, start + 1), lengths)
    return start, end


class Evaluation:
    """One evaluation of a tree over one batch (``per_step`` picks the mode)."""

    def __init__(
        self,
        ops: Any,
        columns: Mapping[str, Any],
        lengths: Any,
        shape: tuple[int, int],
        lengths_np: np.ndarray,
        per_step: bool,
        official: bool = False,
    ) -> None:
        self.ops = ops
        self.columns = columns
        self.lengths = lengths
        self.lengths_np = lengths_np
        self.batch, self.steps = shape
        self.per_step = per_step
        self.official = official
        self.raised: Any = None
        """``official``: where Python would have raised (a zero divisor, a ``**`` overflow)."""
        self.full = bool(self.batch == 0 or lengths_np.min() >= self.steps)
        self.has_steps = lengths > 0
        self.last_index = ops.where(self.has_steps, lengths - 1, 0)
        self._mask: Any = None
        self.cache: dict[tuple[str, Node], Any] = {}

    @property
    def mask(self) -> Any:
        """``(B, T)``: which steps are real (not padding)."""
        if self._mask is None:
            self._mask = self.ops.arange(self.steps)[None, :] < self.lengths[:, None]
        return self._mask

    # -- tree walk ----------------------------------------------------------------------
    def value(self, node: Node, inside: bool = False) -> Any:
        ops = self.ops
        if isinstance(node, Num):
            return ops.scalar(node.value)
        if isinstance(node, Prim):
            column = self.columns[node.name]
            if not (inside or self.per_step):
                column = ops.where(self.has_steps, ops.gather(column, self.last_index), 0.0)
            return column + OFFICIAL_EPSILON if self.official else column
        if isinstance(node, Agg):
            return self._prefix(node) if self.per_step else self._episode(node)
        if isinstance(node, Neg):
            return -self.value(node.arg, inside)
        if isinstance(node, Sum):
            total = None
            for sign, term in node.terms:
                v = self.value(term, inside)
                total = (
                    (v if sign > 0 else -v)
                    if total is None
                    else (total + v if sign > 0 else total - v)
                )
            return total
        if isinstance(node, Prod):
            out = None
            for divide, factor in node.factors:
                v = self.value(factor, inside)
                if divide:
                    zero = v == 0
                    if self.official:
                        self._raise_where(zero)
                    out = ops.where(
                        zero, 0.0, (1.0 if out is None else out) / ops.where(zero, 1.0, v)
                    )
                else:
                    out = v if out is None else out * v
            return out
        if isinstance(node, Pow):
            base = self.value(node.base, inside)
            result = base**node.exponent
            if self.official:  # Python's float ** raises OverflowError where numpy gives inf
                self._raise_where(ops.isfinite(base) & ~ops.isfinite(result))
            return result
        if isinstance(node, Call):
            return self._call(node, [self.value(a, inside) for a in node.args])
        raise TypeError(f"not an expression node: {node!r}")

    def _raise_where(self, mask: Any) -> None:
        self.raised = mask if self.raised is None else self.raised | mask

    def _call(self, node: Call, args: list[Any]) -> Any:
        return POINTWISE[node.fn].array(self.ops, *args)

    # -- trajectory terms ---------------------------------------------------------------
    def _steps_of(self, node: Agg) -> Any:
        key = ("steps", node.arg)
        if key not in self.cache:
            values = self.ops.broadcast(self.value(node.arg, inside=True), (self.batch, self.steps))
            self.cache[key] = values
        return self.cache[key]

    def _masked(self, node: Agg, fill: float = 0.0) -> Any:
        key = (f"masked{fill}", node.arg)
        if key not in self.cache:
            values = self._steps_of(node)
            self.cache[key] = values if self.full else self.ops.where(self.mask, values, fill)
        return self.cache[key]

    def _cumsum(self, node: Agg) -> Any:
        key = ("cumsum", node.arg)
        if key not in self.cache:
            # Unmasked: a third's sum reads the running sum at steps <= its episode length,
            # which padding (later steps) never reaches.
            self.cache[key] = self.ops.cumsum_padded(self._steps_of(node))
        return self.cache[key]

    def _episode(self, node: Agg) -> Any:
        ops, fn = self.ops, node.fn
        if fn in ("sum", "mean"):
            total = ops.rowsum(self._masked(node))
            return total if fn == "sum" else total / ops.array(np.maximum(self.lengths_np, 1))
        if fn == "last":
            return ops.where(self.has_steps, ops.gather(self._steps_of(node), self.last_index), 0.0)
        if fn in ("max", "min"):
            fill = -np.inf if fn == "max" else np.inf
            masked = self._masked(node, fill)
            extreme = ops.rowmax(masked) if fn == "max" else ops.rowmin(masked)
            return ops.where(self.has_steps, extreme, 0.0)
        start, end = third_bounds(self.lengths_np, THIRDS[fn])
        count = ops.array(np.maximum(end - start, 1))
        if hasattr(ops, "third_sums"):
            return self._third_sums(node)[:, THIRDS[fn]] / count
        cumulative = self._cumsum(node)
        total = ops.gather(cumulative, ops.lengths(end)) - ops.gather(
            cumulative, ops.lengths(start)
        )
        return total / count

    def _third_sums(self, node: Agg) -> Any:
        """``(B, 3)`` sums of the thirds, with the short episodes (thirds share steps) and
        empty episodes set apart."""
        key = ("thirds", node.arg)
        if key not in self.cache:
            values = self._steps_of(node)
            sums = self.ops.third_sums(values, self.lengths_np)
            short = self.lengths_np < 3
            if short.any():
                rows = np.flatnonzero(short)
                lengths = self.lengths_np[rows]
                first = np.where(lengths > 0, values[rows, 0], 0.0)
                second = np.where(lengths > 1, values[rows, np.minimum(1, self.steps - 1)], first)
                sums[rows] = np.stack([first, first, second], axis=1)
            self.cache[key] = sums
        return self.cache[key]

    def _prefix(self, node: Agg) -> Any:
        ops, fn = self.ops, node.fn
        if fn == "last":
            return self._steps_of(node)
        if fn == "max":
            return ops.cummax(self._steps_of(node))
        if fn == "min":
            return ops.cummin(self._steps_of(node))
        cumulative = self._cumsum(node)
        prefix = np.arange(1, self.steps + 1)
        if fn in ("sum", "mean"):
            running = cumulative[:, 1:]
            return running if fn == "sum" else running / ops.array(prefix)
        start, end = third_bounds(prefix, THIRDS[fn])
        total = ops.columns(cumulative, end) - ops.columns(cumulative, start)
        return total / ops.array(end - start)


def prepare(
    traj: Mapping[str, Any], lengths: Any, names: tuple[str, ...], float64: bool = False
) -> tuple[Any, dict[str, Any], Any, np.ndarray, tuple[int, int]]:
    """Check a batch and convert it for evaluation: ``(ops, columns, lengths, lengths as
    numpy, (B, T))``; ``float64`` computes torch inputs in float64 too, as Python would."""
    if not isinstance(traj, Mapping):
        raise TrajectoryError(
            f"trajectories must be a mapping of name -> array, not {type(traj).__name__}"
        )
    missing = [n for n in names if n not in traj]
    if missing:
        raise TrajectoryError(
            f"missing primitive(s) {', '.join(map(repr, missing))}; given: "
            f"{', '.join(sorted(map(str, traj))) or 'none'}"
        )
    sample = next((traj[n] for n in names), next(iter(traj.values()), None))
    ops: Any = (
        TorchOps(sample, float64)
        if is_torch(sample)
        else (TorchOps(lengths, float64) if is_torch(lengths) and sample is None else NumpyOps())
    )
    columns: dict[str, Any] = {}
    shape: tuple[int, int] | None = None
    for name in names:
        try:
            column = ops.array(traj[name])
        except (TypeError, ValueError) as err:
            raise TrajectoryError(f"primitive {name!r} is not numeric: {err}") from None
        if column.ndim == 1:
            column = column.reshape(-1, 1)
        if column.ndim != 2:
            raise TrajectoryError(
                f"primitive {name!r} has shape {tuple(column.shape)}; expected (batch, steps)"
            )
        if shape is not None and tuple(column.shape) != shape:
            raise TrajectoryError(
                f"primitive {name!r} has shape {tuple(column.shape)}, others {shape}"
            )
        shape = tuple(column.shape)
        columns[name] = column
    lengths_np = _lengths_numpy(lengths, shape, sample)
    if shape is not None and shape[1] == 0:  # no steps at all: one empty padding step
        shape = (shape[0], 1)
        columns = {n: ops.array(np.zeros(shape)) for n in columns}
    if shape is None:
        shape = (len(lengths_np), int(lengths_np.max(initial=1)) or 1)
    if len(lengths_np) != shape[0]:
        raise TrajectoryError(f"{len(lengths_np)} lengths for a batch of {shape[0]}")
    if len(lengths_np) and (lengths_np.min() < 0 or lengths_np.max() > shape[1]):
        raise TrajectoryError(f"lengths must lie in [0, {shape[1]}]")
    return ops, columns, ops.lengths(lengths_np), lengths_np, shape


def _lengths_numpy(lengths: Any, shape: tuple[int, int] | None, sample: Any) -> np.ndarray:
    if lengths is None:
        if shape is None:
            if sample is None:
                raise TrajectoryError("no primitives and no lengths: the batch size is unknown")
            sample_np = np.asarray(sample.detach().cpu() if is_torch(sample) else sample)
            shape = (sample_np.shape[0], sample_np.shape[1] if sample_np.ndim > 1 else 1)
        return np.full(shape[0], shape[1], dtype=np.int64)
    raw = lengths.detach().cpu().numpy() if is_torch(lengths) else np.asarray(lengths)
    if raw.ndim != 1 or not (
        np.issubdtype(raw.dtype, np.integer)
        or (np.issubdtype(raw.dtype, np.floating) and np.all(raw == np.round(raw)))
    ):
        raise TrajectoryError("lengths must be a 1-D array of integers")
    return raw.astype(np.int64)
