"""How many intra-op threads torch gets: chosen per process from the model size and free cores.

On a CPU, torch splits every op over its intra-op threads and then waits for all of them. A
small model's ops are far too short to gain from that, and when another process is busy (a
test run, a vector env, a second worker) one descheduled thread stalls every op: throughput
falls 5-40x. So small models run on one thread, and larger ones split the cores this process
may use among the workers that share them.

The choice, first match wins:

1. ``num_threads`` passed in (a recipe's ``num_threads``);
2. the ``DERL_BENCH_NUM_THREADS`` environment variable;
3. 1 for a model under :data:`SMALL_MODEL_PARAMS` parameters;
4. the cores this process may run on, divided by ``DERL_BENCH_WORKERS`` (default 1).

    >>> choose_threads(num_params=127_000, num_threads=None, environ={})
    1
    >>> choose_threads(num_params=500_000_000, num_threads=None,
    ...                environ={"DERL_BENCH_WORKERS": "64"})
    1
    >>> choose_threads(num_params=500_000_000, num_threads=3, environ={})
    3
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

SMALL_MODEL_PARAMS = 20_000_000
"""Below this many parameters an op is too short to split over threads."""


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not every platform has affinity masks
        return os.cpu_count() or 1


def choose_threads(num_params: int | None, num_threads: int | None = None,
                   environ: Mapping[str, str] | None = None) -> int:
    """The intra-op thread count for a process training or sampling a model of ``num_params``
    parameters (see the module docstring)."""
    env = os.environ if environ is None else environ
    if num_threads is not None:
        if num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {num_threads}")
        return int(num_threads)
    if env.get("DERL_BENCH_NUM_THREADS"):
        value = int(env["DERL_BENCH_NUM_THREADS"])
        if value < 1:
            raise ValueError(f"DERL_BENCH_NUM_THREADS must be at least 1, got {value}")
        return value
    if num_params is not None and num_params < SMALL_MODEL_PARAMS:
        return 1
    workers = max(1, int(env.get("DERL_BENCH_WORKERS", "1") or 1))
    return max(1, available_cores() // workers)


ALONE_THREADS = 2
"""Threads for a small model's job that runs alone, before any worker starts (the base
policy's fine-tuning): on 2 cores a tiny model's SFT ran 1.45x faster on 2 threads than on 1,
with the same weights (DigitsBalance's base, 400 steps). More were not measured."""


def alone_threads(environ: Mapping[str, str] | None = None) -> int:
    """The intra-op thread count for a small model's job that has the machine to itself:
    ``DERL_BENCH_NUM_THREADS`` where set, else :data:`ALONE_THREADS` of the cores this process
    may use.

    >>> alone_threads({"DERL_BENCH_NUM_THREADS": "1"})
    1
    """
    env = os.environ if environ is None else environ
    if env.get("DERL_BENCH_NUM_THREADS"):
        return choose_threads(None, None, env)
    return max(1, min(ALONE_THREADS, available_cores()))


def configure_threads(model: Any | None = None, num_threads: int | None = None) -> int:
    """Set torch's intra-op thread count for ``model`` (see :func:`choose_threads`); returns it."""
    import torch

    params = sum(p.numel() for p in model.parameters()) if model is not None else None
    threads = choose_threads(params, num_threads)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


__all__ = ["ALONE_THREADS", "SMALL_MODEL_PARAMS", "alone_threads", "available_cores",
           "choose_threads", "configure_threads"]
