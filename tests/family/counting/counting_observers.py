"""The counting family's primitives: whether the goal is reached, and the env's reward."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym

from derl_bench.observers import Observer
from derl_bench.observers.base import Transition


class Reached(Observer):
    names = ("success", "env_reward")

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"success": float(bool(t.info.get("won"))), "env_reward": float(t.reward)}


def default_observers(env: gym.Env) -> list[Observer]:
    return [Reached()]
