"""How many torch threads a job gets."""

from __future__ import annotations

import pytest

from derl_bench.policies.threads import ALONE_THREADS, alone_threads, available_cores


def test_a_small_models_job_alone_takes_up_to_two_cores_unless_told_otherwise():
    assert alone_threads({}) == min(ALONE_THREADS, available_cores()) >= 1
    assert alone_threads({"DERL_BENCH_NUM_THREADS": "3"}) == 3
    with pytest.raises(ValueError, match="at least 1"):
        alone_threads({"DERL_BENCH_NUM_THREADS": "0"})
