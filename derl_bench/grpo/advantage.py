"""Group-relative advantages: each reward compared with the others of its group.

A group is the G samples of one math problem, or the G episodes of one game/variation started
from the same reset seed. Within a group, the advantage is ``(r - mean) / (std + eps)``;
``scale_by_std=False`` gives ``r - mean`` (Dr. GRPO's choice, unbiased by group difficulty).
A group whose rewards are all equal carries no signal and gets zero advantage::

    >>> group_advantages([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]).round(4).tolist()
    [1.0, -1.0, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def group_advantages(rewards: Sequence[float] | np.ndarray, groups: Sequence[int] | np.ndarray,
                     scale_by_std: bool = True, eps: float = 1e-6) -> np.ndarray:
    """Advantage of each sample within its group (see the module docstring).

    ``std`` is the population standard deviation (ddof=0), so a pair {0, 1} maps to {-1, +1}
    up to ``eps``.
    """
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(groups)
    if r.shape != g.shape or r.ndim != 1:
        raise ValueError(f"rewards {r.shape} and groups {g.shape} must be equal 1-D shapes")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    adv = np.zeros_like(r)
    for group in np.unique(g):
        idx = g == group
        if r[idx].max() == r[idx].min():
            continue  # all equal: exactly zero, not the rounding noise of r - mean(r)
        centred = r[idx] - r[idx].mean()
        adv[idx] = centred / (r[idx].std() + eps) if scale_by_std else centred
    return adv


ESTIMATORS = ("grpo", "rloo")
"""Advantage estimators for one group of rewards (:func:`outer_advantages`)."""


def leave_one_out_advantages(rewards: Sequence[float] | np.ndarray) -> np.ndarray:
    """REINFORCE with a leave-one-out baseline (RLOO): each reward minus the mean of the
    others, unscaled, so advantages keep the size of the reward differences::

        >>> leave_one_out_advantages([1.0, 0.0, 0.0, 0.0]).round(4).tolist()
        [1.0, -0.3333, -0.3333, -0.3333]
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or len(r) < 2:
        raise ValueError("leave-one-out needs a 1-D group of at least two rewards")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    return r - (r.sum() - r) / (len(r) - 1)


def outer_advantages(rewards: Sequence[float] | np.ndarray, estimator: str = "grpo",
                     ) -> np.ndarray:
    """Advantages of one group under ``estimator`` (one of :data:`ESTIMATORS`)."""
    if estimator == "grpo":
        return group_advantages(rewards, [0] * len(rewards))
    if estimator == "rloo":
        return leave_one_out_advantages(rewards)
    raise ValueError(f"unknown advantage estimator {estimator!r}; known: {ESTIMATORS}")
