"""End to end on ALFWorld L0 and ScienceWorld L0 with the tiny model: multi-turn GRPO,
checkpoints, logs, curve and resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from derl_bench.cli import main
from derl_bench.grpo import load_config, train
from derl_bench.grpo.runlog import read_metrics

REPO = Path(__file__).resolve().parents[2]

BASELINES = REPO / "baselines"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("family", ["alfworld", "scienceworld"])
def test_agent_recipes_train_and_resume(data_root, tmp_path, family):
    outcome = tmp_path / "outcome"
    recipe = str(BASELINES / f"{family}-outcome.yaml")
    assert main(["train", recipe, "--output", str(outcome), "steps=1", "progress=false"]) == 0
    assert main(["train", recipe, "--output", str(outcome), "--resume", "steps=2",
                 "progress=false"]) == 0
    metrics = read_metrics(outcome)
    assert [m["step"] for m in metrics] == [0, 1]
    for m in metrics:
        assert 1 <= m["length/episode_mean"] <= 3  # recipe caps episodes at 3 actions
        assert {"reward/mean", "success/mean", "kl", "entropy", "clip_fraction"} <= m.keys()
    assert (outcome / "checkpoints" / "step-2" / "model.safetensors").is_file()
    assert (outcome / "learning_curve.png").read_bytes()[:8] == PNG_MAGIC
    assert list((outcome / "tensorboard").glob("events.out.tfevents.*"))

    average = tmp_path / "average"
    assert main(["train", str(BASELINES / f"{family}-average.yaml"), "--output", str(average),
                 "steps=1", "progress=false", "tensorboard=false"]) == 0
    assert len(read_metrics(average)) == 1
    shaped = tmp_path / "outcome-format"
    assert main(["train", str(BASELINES / f"{family}-outcome-format.yaml"), "--output",
                 str(shaped), "steps=1", "progress=false", "tensorboard=false"]) == 0
    assert len(read_metrics(shaped)) == 1


def test_multi_turn_update_moves_the_policy(data_root, tmp_path):
    # A reward read off the sampled tokens differs between a random policy's episodes, so
    # the shared loss really trains every step of every episode here.
    def first_token_reward(episodes):
        return np.array([np.mean([s.completion_ids[0] for s in e.steps]) for e in episodes])

    config = load_config(BASELINES / "alfworld-outcome.yaml", [
        f"output_dir={tmp_path / 'run'}", "steps=2", "progress=false", "tensorboard=false",
    ])
    history = train(config, reward_fn=first_token_reward)
    assert any(m["advantage/zero_fraction"] < 1 for m in history)
    assert any(m["grad_norm"] > 0 for m in history)
    assert history[-1]["kl"] > 0
