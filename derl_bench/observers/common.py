"""Observers that apply to every env family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import gymnasium as gym

from derl_bench.observers.base import Observer, Transition


class EnvReward(Observer):
    """``env_reward``: the env's own reward for the step (the sparse outcome signal)."""

    names = ("env_reward",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"env_reward": t.reward}


class StepFraction(Observer):
    """``step_fraction``: the step's index over the step cap, so 1.0 on the last allowed step."""

    names = ("step_fraction",)

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return {"step_fraction": min(1.0, t.step / max(1, t.max_steps))}


class RepeatedAction(Observer):
    """``repeated_action``: 1.0 when this exact action (after whitespace/case folding) was
    already taken earlier in the episode."""

    names = ("repeated_action",)

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def reset(self, env: gym.Env, observation: str, info: Mapping[str, Any]) -> None:
        self._seen = set()

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        key = " ".join(t.action.lower().split())
        repeated = key in self._seen
        self._seen.add(key)
        return {"repeated_action": float(repeated)}


class Located(Protocol):
    """An env that says where its agent is (``None`` or empty: unknown)."""

    @property
    def agent_location(self) -> str | None: ...


class NewLocation(Observer[Located]):
    """``new_location``: 1.0 when the step took the agent somewhere not visited before in the
    episode (the starting place counts as visited). Reads the env's ``agent_location``;
    an empty or ``None`` location is unknown and never new."""

    names = ("new_location",)

    def __init__(self) -> None:
        self._visited: set[str] = set()

    def reset(self, env: Located, observation: str, info: Mapping[str, Any]) -> None:
        location = env.agent_location
        self._visited = {location} if location else set()

    def observe(self, env: Located, t: Transition) -> Mapping[str, float]:
        location = env.agent_location
        new = bool(location) and location not in self._visited
        if location:
            self._visited.add(location)
        return {"new_location": float(new)}
