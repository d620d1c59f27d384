"""GRPO learns: a tiny random model raises a toy reward far above where it starts.

The toy env is single-step: whatever the policy writes is scored by an observer emitting
``outcome`` = the fraction of the response's characters that are ``a``; the Meta-Reward is
``outcome``. A random model writes ``a`` rarely, but some samples of a group write it more
than others, and GRPO must push the policy toward them within a few dozen steps.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from derl_bench.grpo import TrainConfig, train
from derl_bench.observers import ObserveWrapper
from derl_bench.observers.base import Observer, Transition

TARGET = "a"


class ToyPromptEnv(gym.Env):
    """One fixed prompt; any response ends the episode."""

    max_steps = 1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Write anything you like.", {}

    def step(self, action):
        return "", 0.0, True, False, {}


class TargetRate(Observer):
    names = ("outcome",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"outcome": t.action.count(TARGET) / max(1, len(t.action))}


def toy_env() -> gym.Env:
    return ObserveWrapper(ToyPromptEnv(), [TargetRate()])


def test_grpo_raises_toy_reward(tmp_path):
    config = TrainConfig(
        name="toy", env_id="toy", meta_reward="outcome", output_dir=str(tmp_path / "run"),
        group_size=8, prompts_per_step=2, steps=18, learning_rate=2e-2, kl_coef=1e-3,
        updates_per_batch=2, max_new_tokens=16, save_every=0, tensorboard=False,
        progress=False, seed=0,
    )
    history = train(config, env_factory=toy_env, family="math")
    rewards = np.array([m["reward/mean"] for m in history])
    start, end = rewards[:3].mean(), rewards[-3:].mean()
    assert len(history) == 18
    assert end > 0.2, f"final reward {end:.3f} (start {start:.3f}): {rewards.round(3)}"
    assert end > 2.5 * start, f"reward rose only from {start:.3f} to {end:.3f}"
    # The second update per batch is off-policy, so the clipped ratio really acted.
    assert max(m["clip_fraction"] for m in history) > 0
    assert max(m["kl"] for m in history) > 0
