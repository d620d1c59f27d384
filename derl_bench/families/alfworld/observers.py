"""Primitive observers of ``derl/ALFWorld-v0``.

=======================  ===============================================================
primitive                meaning on a step
=======================  ===============================================================
``success``              1.0 when the game is won on this step
``goal_progress``        best fraction of the PDDL goal's conjuncts that hold now
                         (existentials pulled out; type/equality atoms only pick the
                         objects); 1.0 exactly when the goal holds
``goal_progress_delta``  ``goal_progress`` minus its value before the step (can be < 0)
``action_admissible``    1.0 when the command was one of the admissible commands
``action_effective``     1.0 when the feedback is not "Nothing happens."
``new_location``         1.0 when the step moved the agent to a location not yet visited
                         in the episode (the start location counts as visited)
``env_reward``           the env's reward (1.0 on the winning step)
``step_fraction``        step index / step cap
``repeated_action``      1.0 when the same command was already taken in the episode
=======================  ===============================================================

Add your own observer by subclassing :class:`~derl_bench.observers.Observer`; the bare env
(``env.unwrapped``) exposes ``goal_progress()``, ``last_action_admissible``,
``agent_location``, ``admissible_commands`` and ``game_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from derl_bench.families.alfworld import NOTHING_HAPPENS, ALFWorldEnv
from derl_bench.observers.base import Observer, Transition
from derl_bench.observers.common import EnvReward, NewLocation, RepeatedAction, StepFraction


class Success(Observer["ALFWorldEnv"]):
    """``success``: 1.0 on the step that wins the game."""

    names = ("success",)

    def observe(self, env: ALFWorldEnv, t: Transition) -> Mapping[str, float]:
        return {"success": float(bool(t.info.get("won")) and t.terminated)}


class GoalProgress(Observer["ALFWorldEnv"]):
    """``goal_progress`` and ``goal_progress_delta`` from the env's goal evaluation."""

    names = ("goal_progress", "goal_progress_delta")

    def __init__(self) -> None:
        self._previous = 0.0

    def reset(self, env: ALFWorldEnv, observation: str, info: Mapping[str, Any]) -> None:
        self._previous = float(env.goal_progress())

    def observe(self, env: ALFWorldEnv, t: Transition) -> Mapping[str, float]:
        progress = float(env.goal_progress())
        delta, self._previous = progress - self._previous, progress
        return {"goal_progress": progress, "goal_progress_delta": delta}


class ActionAdmissible(Observer["ALFWorldEnv"]):
    """``action_admissible``: the command was in the admissible list before the step."""

    names = ("action_admissible",)

    def observe(self, env: ALFWorldEnv, t: Transition) -> Mapping[str, float]:
        return {"action_admissible": float(bool(env.last_action_admissible))}


class ActionEffective(Observer["ALFWorldEnv"]):
    """``action_effective``: the game reacted with something other than "Nothing happens."."""

    names = ("action_effective",)

    def observe(self, env: ALFWorldEnv, t: Transition) -> Mapping[str, float]:
        return {"action_effective": float(t.observation.strip() != NOTHING_HAPPENS)}


def default_observers(env: ALFWorldEnv | None = None) -> list[Observer]:
    """The observers ``gymnasium.make("derl/ALFWorld-v0")`` attaches."""
    return [
        Success(),
        GoalProgress(),
        ActionAdmissible(),
        ActionEffective(),
        NewLocation(),
        EnvReward(),
        StepFraction(),
        RepeatedAction(),
    ]


__all__ = [
    "ActionAdmissible",
    "ActionEffective",
    "GoalProgress",
    "NewLocation",
    "Success",
    "default_observers",
]
