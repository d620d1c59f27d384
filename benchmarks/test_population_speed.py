"""Population-batched inner runs: seconds per inner run together over separately, same run.

A generation of 4 rewards at the proxy's inner settings, shortened (10 GRPO steps, 100
validation problems) so the suite stays quick, on 2 worker processes each way (see
``population_throughput.py``). ``extra_info["ratio"]`` is seconds per inner run as one
population over seconds per inner run as separate runs (lower is better; the goal is at most
0.25, a 4x throughput), so the baseline catches a change that makes populations slow again.
"""

from __future__ import annotations

import population_throughput as bench
import pytest

pytestmark = pytest.mark.benchmark_suite


def test_population_inner_runs_per_minute(benchmark):
    figures = benchmark.pedantic(bench.measure, kwargs={"steps": 10, "validation": 100,
                                                        "population": 4, "workers": 2},
                                 rounds=1, iterations=1)
    benchmark.extra_info.update(figures)
    benchmark.extra_info["ratio_key"] = "meta.population"
    assert figures["separate"]["inner_runs"] == figures["together"]["inner_runs"] == 8
    assert figures["separate"]["scores"] == figures["together"]["scores"]
