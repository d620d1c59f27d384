"""Primitive observers of ``derl/ScienceWorld-v0``.

They read the bare :class:`~derl_bench.families.scienceworld.ScienceWorldEnv`: its step info and
attributes cost nothing; goal progress and valid actions cost one simulator call each and are
fetched only by the observers that need them (and cached by the env for the rest of the step).

    >>> import gymnasium as gym
    >>> env = gym.make("derl_bench:derl/ScienceWorld-v0")  # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    >>> obs, r, term, trunc, info = env.step("open door to kitchen")  # doctest: +SKIP
    >>> info["primitives"]["action_valid"], info["primitives"]["score"]  # doctest: +SKIP
    (1.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from derl_bench.observers.base import Observer, Transition
from derl_bench.observers.common import EnvReward, NewLocation, RepeatedAction, StepFraction

if TYPE_CHECKING:
    from derl_bench.families.scienceworld import ScienceWorldEnv


class Success(Observer["ScienceWorldEnv"]):
    """``success``: 1.0 when the task is completed with the success score (100 by default)."""

    names = ("success",)

    def observe(self, env: ScienceWorldEnv, t: Transition) -> Mapping[str, float]:
        return {"success": float(env.success)}


class PublishedSuccess(Observer["ScienceWorldEnv"]):
    """``published_success``: 1.0 when RLVMR's rule counts the episode as won (it ended,
    including by the 100-tick limit, with a score above 0; see
    :attr:`~derl_bench.families.scienceworld.ScienceWorldEnv.published_success`). A reward built on
    it can be gamed by scoring a few points and waiting; ``success`` cannot."""

    names = ("published_success",)

    def observe(self, env: ScienceWorldEnv, t: Transition) -> Mapping[str, float]:
        return {"published_success": float(env.published_success)}


class Failed(Observer["ScienceWorldEnv"]):
    """``failed``: 1.0 when the simulator declared the task failed (score below zero)."""

    names = ("failed",)

    def observe(self, env: ScienceWorldEnv, t: Transition) -> Mapping[str, float]:
        return {"failed": float(env.failed)}


class Score(Observer["ScienceWorldEnv"]):
    """``score``: the simulator's score in 0..1 (a failed task counts as 0);
    ``score_delta``: its change this step (so a failure shows as a drop to 0)."""

    names = ("score", "score_delta")

    def __init__(self) -> None:
        self._last = 0.0

    def reset(self, env: ScienceWorldEnv, observation: str, info: Mapping[str, Any]) -> None:
        self._last = max(0.0, env.score / 100.0)

    def observe(self, env: ScienceWorldEnv, t: Transition) -> Mapping[str, float]:
        score = min(1.0, max(0.0, env.score / 100.0))
        delta, self._last = score - self._last, score
        return {"score": score, "score_delta": delta}


class GoalProgress(Observer["ScienceWorldEnv"]):
    """``goal_progress``: the fraction of the task's sequential subgoals done (from the
    simulator's goal progress report); ``goal_progress_delta``: its change this step.

    Costs one simulator call a step.
    """

    names = ("goal_progress", "goal_progress_delta")

    def __init__(self) -> None:
        self._last = 0.0

    @staticmethod
    def _fraction(env: ScienceWorldEnv) -> float:
        done, total = env.goal_progress()
        return done / total if total else 0.0

    def reset(self, env: ScienceWorldEnv, observation: str, info: Mapping[str, Any]) -> None:
        self._last = self._fraction(env)

    def observe(self, env: ScienceWorldEnv, t: Transition) -> Mapping[str, float]:
        progress = self._fraction(env)
        delta, self._last = progress - self._last, progress
        return {"goal_progress": progress, "goal_progress_delta": delta}


class ActionValid(Observer["ScienceWorldEnv"]):
    """``action_valid``: 1.0 when the action was a valid ScienceWorld action.

    ``mode="parsed"`` (the default, free): the simulator's parser matched the input to an
    action on objects the agent can see — the same grammar and objects the valid-action list
    is generated from. ``mode="listed"``: the action (whitespace-normalised, lower-cased) is
    literally in the valid-action list of the state it was taken in; this fetches that list
    after every reset and step (one simulator call each).
    """

    names = ("action_valid",)

    def __init__(self, mode: str = "parsed") -> None:
        if mode not in ("parsed", "listed"):
            raise ValueError(f"ActionValid mode must be 'parsed' or 'listed', got {mode!r}")
        self.mode = mode
        self._valid: frozenset[str] = frozenset()

    @staticmethod
    def _key(action: str) -> str:
        return " ".join(action.lower().split())

    def _fetch(self, env: ScienceWorldEnv) -> None:
        if self.mode == "listed":
            self._valid = frozenset(map(self._key, env.valid_actions()))

    def reset(self, env: ScienceWorldEnv, observation: str, info: Mapping[str, Any]) -> None:
        self._fetch(env)

    def observe(self, env: ScienceWorldEnv, t: Transition) -> Mapping[str, float]:
        if self.mode == "parsed":
            return {"action_valid": float(env.last_action_parsed)}
        valid = self._key(t.action) in self._valid
        self._fetch(env)
        return {"action_valid": float(valid)}


def default_observers(env: ScienceWorldEnv | None = None) -> list[Observer]:
    """The observers ``gymnasium.make("derl/ScienceWorld-v0")`` attaches."""
    return [
        Success(),
        PublishedSuccess(),
        Failed(),
        Score(),
        GoalProgress(),
        ActionValid(),
        NewLocation(),
        RepeatedAction(),
        StepFraction(),
        EnvReward(),
    ]


__all__ = [
    "ActionValid",
    "Failed",
    "GoalProgress",
    "NewLocation",
    "PublishedSuccess",
    "Score",
    "Success",
    "default_observers",
]
