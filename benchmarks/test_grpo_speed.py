"""GRPO step speed: the compact trainer vs TRL's GRPOTrainer, same tiny model, batch and run.

Both train the tiny model on the toy env of ``grpo_throughput.py`` (group 8, 2 prompts, 32
new tokens); ``extra_info["ratio"]`` is our seconds per generated token over TRL's (lower is
better), so the committed baseline catches a slowdown of either generation or the update.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import grpo_throughput as bench
import pytest

pytestmark = pytest.mark.benchmark_suite


def test_grpo_step_speed(benchmark):
    args = argparse.Namespace(device="cpu", dtype=None, steps=5, group_size=8, prompts=2,
                              max_new_tokens=32)
    with tempfile.TemporaryDirectory() as tmp:
        model = bench.build_model("tiny", Path(tmp) / "model")
        ours = benchmark.pedantic(bench.run_compact, args=(model, args, Path(tmp) / "ours"),
                                  rounds=1, iterations=1)
        theirs = bench.run_trl(model, args, Path(tmp) / "trl")
    benchmark.extra_info.update(
        ratio_key="grpo.step", ratio=theirs["tokens_per_s"] / ours["tokens_per_s"],
        ours_tokens_per_s=ours["tokens_per_s"], trl_tokens_per_s=theirs["tokens_per_s"],
        phase_s=ours["phase_s"], fraction_of_peak=ours["fraction_of_peak"])
    assert ours["tokens"] > 0 and theirs["tokens"] > 0
