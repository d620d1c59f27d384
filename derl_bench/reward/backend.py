"""Array operations the evaluator needs, for numpy and (lazily imported) torch.

Only these few operations differ between the two libraries; the evaluator is written once
against this small surface.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_torch(value: Any) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


class NumpyOps:
    """float64 numpy arrays."""

    name = "numpy"

    def __init__(self) -> None:
        self.dtype = np.float64

    def array(self, value: Any) -> np.ndarray:
        return np.asarray(value, dtype=self.dtype)

    def lengths(self, value: Any) -> np.ndarray:
        return np.asarray(value).astype(np.int64, copy=False)

    def scalar(self, value: float) -> np.ndarray:
        return np.asarray(value, dtype=self.dtype)

    def arange(self, n: int) -> np.ndarray:
        return np.arange(n)

    def where(self, cond: Any, a: Any, b: Any) -> np.ndarray:
        return np.where(cond, a, b)

    def broadcast(self, value: Any, shape: tuple[int, ...]) -> np.ndarray:
        return np.broadcast_to(value, shape)

    def cumsum_padded(self, x: np.ndarray) -> np.ndarray:
        """``(B, T) -> (B, T + 1)`` with a leading 0 column."""
        out = np.empty((x.shape[0], x.shape[1] + 1), dtype=self.dtype)
        out[:, 0] = 0.0
        np.cumsum(x, axis=1, out=out[:, 1:])
        return out

    def gather(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        """``x[b, index[b]]`` for a ``(B,)`` index."""
        if x.flags.c_contiguous:  # flat ``take`` is several times faster than fancy indexing
            return x.reshape(-1).take(np.arange(0, x.size, x.shape[1]) + index)
        return x[np.arange(x.shape[0]), index]

    def third_sums(self, x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """``(B, 3)`` sums of the three thirds of each row, for rows with ``lengths >= 3``
        (where the thirds are disjoint and contiguous); other rows hold garbage.

        One ``reduceat`` pass reads each value once, several times faster than a running sum.
        """
        batch, steps = x.shape
        base = np.arange(0, batch * steps, steps)
        index = np.empty((batch, 4), dtype=np.intp)
        index[:, 0] = base
        index[:, 1] = base + lengths // 3
        index[:, 2] = base + (2 * lengths) // 3
        index[:, 3] = base + lengths
        flat = index.reshape(-1)
        if batch and flat[-1] >= x.size:
            flat = flat[:-1]
        sums = np.add.reduceat(x.reshape(-1), flat) if batch else np.zeros(0)
        out = np.zeros(batch * 4, dtype=self.dtype)
        out[: len(sums)] = sums
        return out.reshape(batch, 4)[:, :3]

    def columns(self, x: np.ndarray, index: np.ndarray) -> np.ndarray:
        """``x[:, index]``."""
        return np.take(x, index, axis=1)

    def cummax(self, x: np.ndarray) -> np.ndarray:
        return np.maximum.accumulate(x, axis=1)

    def cummin(self, x: np.ndarray) -> np.ndarray:
        return np.minimum.accumulate(x, axis=1)

    def rowsum(self, x: np.ndarray) -> np.ndarray:
        return x.sum(axis=1)

    def rowmax(self, x: np.ndarray) -> np.ndarray:
        return x.max(axis=1)

    def rowmin(self, x: np.ndarray) -> np.ndarray:
        return x.min(axis=1)

    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    abs = staticmethod(np.abs)
    sqrt = staticmethod(np.sqrt)
    log1p = staticmethod(np.log1p)
    sign = staticmethod(np.sign)
    isfinite = staticmethod(np.isfinite)

    def sanitize(self, x: Any, limit: float) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray(x, dtype=self.dtype)
        invalid = ~np.isfinite(x)
        return np.clip(
            np.nan_to_num(x, nan=0.0, posinf=limit, neginf=-limit), -limit, limit
        ), invalid

    def float32(self, x: Any) -> np.ndarray:
        """``x`` rounded to float32 and returned in float64 (what ``float(torch.tensor(x,
        dtype=torch.float32))`` gives)."""
        return np.asarray(x, dtype=np.float32).astype(self.dtype)

    def roll_right(self, x: np.ndarray) -> np.ndarray:
        """Shift columns right by one (the first column is then meaningless)."""
        return np.roll(x, 1, axis=1)

    def to_numpy(self, x: Any) -> np.ndarray:
        return np.asarray(x)


class TorchOps:
    """torch tensors on the inputs' device, in their floating dtype (float32 otherwise), or in
    float64 when asked (``float64``); :attr:`out_dtype` is the inputs' dtype either way."""

    name = "torch"

    def __init__(self, like: Any, float64: bool = False) -> None:
        import torch

        self.torch = torch
        self.device = like.device
        self.out_dtype = like.dtype if like.is_floating_point() else torch.float32
        self.dtype = torch.float64 if float64 else self.out_dtype

    def array(self, value: Any) -> Any:
        return self.torch.as_tensor(value, dtype=self.dtype, device=self.device)

    def lengths(self, value: Any) -> Any:
        return self.torch.as_tensor(value, device=self.device).long()

    def scalar(self, value: float) -> Any:
        return self.torch.tensor(value, dtype=self.dtype, device=self.device)

    def arange(self, n: int) -> Any:
        return self.torch.arange(n, device=self.device)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return self.torch.where(cond, self._t(a), self._t(b))

    def _t(self, x: Any) -> Any:
        return x if isinstance(x, self.torch.Tensor) else self.scalar(float(x))

    def broadcast(self, value: Any, shape: tuple[int, ...]) -> Any:
        return self._t(value).expand(shape)

    def cumsum_padded(self, x: Any) -> Any:
        zero = self.torch.zeros((x.shape[0], 1), dtype=self.dtype, device=self.device)
        return self.torch.cat([zero, self.torch.cumsum(x, dim=1)], dim=1)

    def gather(self, x: Any, index: Any) -> Any:
        return x.gather(1, index.long().unsqueeze(1)).squeeze(1)

    def columns(self, x: Any, index: np.ndarray) -> Any:
        return x[:, self.torch.as_tensor(index, device=self.device)]

    def cummax(self, x: Any) -> Any:
        return self.torch.cummax(x, dim=1).values

    def cummin(self, x: Any) -> Any:
        return self.torch.cummin(x, dim=1).values

    def rowsum(self, x: Any) -> Any:
        return x.sum(dim=1)

    def rowmax(self, x: Any) -> Any:
        return x.amax(dim=1)

    def rowmin(self, x: Any) -> Any:
        return x.amin(dim=1)

    def maximum(self, a: Any, b: Any) -> Any:
        return self.torch.maximum(self._t(a), self._t(b))

    def minimum(self, a: Any, b: Any) -> Any:
        return self.torch.minimum(self._t(a), self._t(b))

    def abs(self, x: Any) -> Any:
        return self.torch.abs(self._t(x))

    def sqrt(self, x: Any) -> Any:
        return self.torch.sqrt(self._t(x))

    def log1p(self, x: Any) -> Any:
        return self.torch.log1p(self._t(x))

    def sign(self, x: Any) -> Any:
        return self.torch.sign(self._t(x))

    def isfinite(self, x: Any) -> Any:
        return self.torch.isfinite(self._t(x))

    def sanitize(self, x: Any, limit: float) -> tuple[Any, Any]:
        x = self._t(x)
        invalid = ~self.torch.isfinite(x)
        cleaned = self.torch.nan_to_num(x, nan=0.0, posinf=limit, neginf=-limit)
        return self.torch.clamp(cleaned, -limit, limit), invalid

    def float32(self, x: Any) -> Any:
        """``x`` rounded to float32, in the inputs' dtype."""
        return self._t(x).to(self.torch.float32).to(self.out_dtype)

    def roll_right(self, x: Any) -> Any:
        return self.torch.roll(x, 1, dims=1)

    def to_numpy(self, x: Any) -> np.ndarray:
        return x.detach().cpu().numpy()
