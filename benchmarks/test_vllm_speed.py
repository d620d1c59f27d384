"""The vLLM backend's sampling speed against the lean sampler, same model and prompts in the
same run (``vllm_speed.py``); ``extra_info["ratio"]`` is the lean sampler's seconds per token
over vLLM's (lower: derl-bench's own sampler is the faster). Skipped where vLLM is not
installed; its key is optional in the baseline, since only machines with a vLLM build report
it."""

from __future__ import annotations

import pytest
import vllm_speed as bench

from derl_bench.policies.backends import backend_missing

UNAVAILABLE = backend_missing("vllm")
pytestmark = [pytest.mark.benchmark_suite, pytest.mark.vllm,
              pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))]


def test_vllm_sampling_against_the_lean_sampler(benchmark):
    figures = benchmark.pedantic(bench.measure, args=("tiny",),
                                 kwargs={"prompts": 16, "max_new_tokens": 64, "rounds": 3,
                                         "eager": True},
                                 rounds=1, iterations=1)
    benchmark.extra_info.update(figures)
    benchmark.extra_info["ratio_key"] = "vllm.sample"
    assert figures["lean"]["tokens"] > 0 and figures["vllm"]["tokens"] > 0
