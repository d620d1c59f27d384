"""Reward discovery across workers: one generation of 4 inner runs, 2 Ray workers vs 1.

``extra_info["ratio"]`` is seconds with 2 workers over seconds with 1, in the same Ray
instance and run (lower is better; the goal on a 2-core machine is at most 0.625, a 1.6x
speed-up), so the baseline catches a change that serialises inner runs again.
"""

from __future__ import annotations

import meta_workers as bench
import pytest

from derl_bench.meta.workers import ray_available

pytestmark = [pytest.mark.benchmark_suite,
              pytest.mark.skipif(not ray_available(), reason="ray is not installed")]


def test_meta_generation_on_two_workers(benchmark):
    figures = benchmark.pedantic(bench.measure, kwargs={"steps": 30, "workers": 2},
                                 rounds=1, iterations=1)
    benchmark.extra_info.update(ratio_key="meta.workers", ratio=1 / figures["speedup"],
                                **figures)
    assert figures["seconds_1_worker"] > 0 and figures["seconds_2_workers"] > 0
