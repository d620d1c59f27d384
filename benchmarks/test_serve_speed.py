"""A served step against an in-process step, measured in the same run.

    pytest benchmarks/test_serve_speed.py --benchmark-enable -s

``benchmark.extra_info["ratio"]`` (key ``serve.step``) is the mean round trip of one ALFWorld
step through ``derl-bench serve`` (one OpenEnv WebSocket session on 127.0.0.1, the server in
its own process) over the mean in-process step of the same env, wrappers and commands (lower
is better). The concurrent load test is ``python benchmarks/serve_load.py``
(docs/serving.md).
"""

from __future__ import annotations

import pytest
from serve_load import Server, in_process_step_ms, served_steps

pytestmark = pytest.mark.benchmark_suite

ENV = "derl/ALFWorld-v0"
STEPS = 100


def test_served_step_vs_in_process_step(benchmark, data_root):
    pytest.importorskip("openenv.core")

    def measure() -> dict:
        local_ms = in_process_step_ms(ENV, STEPS)
        with Server(ENV, max_sessions=1) as server:
            served = served_steps(server, 1, STEPS)
            open_after = server.status()["open_envs"]
        return {"in_process_step_ms": round(local_ms, 3), **served, "open_after": open_after}

    figures = benchmark.pedantic(measure, rounds=1)
    assert figures["errors"] == [] and figures["steps"] == STEPS
    benchmark.extra_info.update({k: v for k, v in figures.items() if k != "errors"})
    benchmark.extra_info["ratio"] = round(figures["step_ms_mean"]
                                          / figures["in_process_step_ms"], 4)
    benchmark.extra_info["ratio_key"] = "serve.step"
