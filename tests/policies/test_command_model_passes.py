"""``benchmarks/command_rollout.py``: two command models' passes over the same rows, in turn,
as ratios to the first (``--passes``); a GRPO step at a given model shape (``--layers``)."""

from __future__ import annotations

from derl_bench.policies.command_model import CommandModelSpec, init_command_model
from tests.scripts import load_script


def test_passes_times_each_model_on_the_same_rows_against_the_first(tmp_path):
    bench = load_script("benchmarks/command_rollout.py")
    four = init_command_model(tmp_path / "four", "derl/ALFWorld-v0")
    two = init_command_model(tmp_path / "two", "derl/ALFWorld-v0",
                             CommandModelSpec(num_hidden_layers=2))
    result = bench.passes([str(four), str(two)], rows=4, tokens=8, rounds=2, repeats=1)
    models = result["models"]
    assert list(models) == [str(four), str(two)]
    assert models[str(four)]["ratio_to_first"] == [1.0, 1.0]
    assert all(s > 0 for m in models.values() for s in m["seconds"])
    assert len(models[str(two)]["seconds"]) == 2
    # Two of four layers gone, the embedding (tied to the head) kept.
    assert models[str(two)]["parameters"] < models[str(four)]["parameters"]


def test_the_step_benchmark_times_the_shape_it_is_given(data_root):
    bench = load_script("benchmarks/command_rollout.py")
    figures = bench.grpo_step(games=1, group=2, envs=2, max_episode_steps=2, timed_steps=1,
                              layers=2)
    assert figures["layers"] == 2 and figures["episodes"] == 2
    assert figures["step_s"] > 0 and figures["arithmetic_s"] > 0
    # the arithmetic's rows are as many distinct (state, command) rows as the step trained
    assert figures["arithmetic_commands"] == round(figures["commands_distinct"])
