"""Command-policy episodes in lockstep (one batched forward per turn) against one state at a
time, per step, same games and model in the same run (``command_rollout.py``);
``extra_info["ratio"]`` is lockstep / one at a time, lower is better; and a whole GRPO step of
a command policy over its arithmetic (``command_rollout.grpo_step``)."""

from __future__ import annotations

import command_rollout as bench
import pytest

pytestmark = pytest.mark.benchmark_suite


def test_command_rollout_lockstep_over_one_at_a_time(benchmark, data_root):
    figures = benchmark.pedantic(bench.measure, kwargs={"games": 16, "envs": 8},
                                 rounds=1, iterations=1)
    benchmark.extra_info.update(figures)
    benchmark.extra_info["ratio_key"] = "alfworld.command_rollout"
    assert figures["steps_lockstep"] > 0 and figures["steps_one_at_a_time"] > 0
    split = figures["lockstep_split_s"]
    assert split["model_s"] > 0 and split["step_s"] > 0


def test_command_grpo_step_over_its_arithmetic(benchmark, data_root):
    """A whole GRPO step (64 episodes of 12 commands, 2 update epochs, one thread) over the
    model's passes alone at its shapes; ``extra_info`` holds the step's seconds and split."""
    figures = benchmark.pedantic(bench.grpo_step, kwargs={"timed_steps": 1},
                                 rounds=1, iterations=1)
    benchmark.extra_info.update(figures)
    benchmark.extra_info["ratio_key"] = "alfworld.command_grpo_step"
    assert 0 < figures["arithmetic_commands"] <= 64 * 12 and figures["commands"] > 0
    assert figures["split_s"]["time/update_s"] > 0 and figures["forward_backward_s"] > 0
