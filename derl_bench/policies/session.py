"""One agent episode as an LLM policy sees it: the task, the current observation, the
admissible actions and the (observation, action) history the prompt shows.

Training rollouts, SFT demonstrations and the evaluator all keep an :class:`AgentSession` per
episode, so a policy is prompted the same way wherever it runs::

    >>> session = AgentSession.start("You are in the kitchen. Your task is to: put a mug "
    ...                              "in the fridge.", {"admissible_commands": ["look"]})
    >>> session.task, session.turn().step
    ('put a mug in the fridge.', 0)
    >>> session.act("look")
    >>> session.observe("You see a mug 1.", {"admissible_commands": ["take mug 1"]})
    >>> turn = session.turn()
    >>> turn.step, turn.admissible
    (1, ('take mug 1',))
    >>> turn.history
    (('You are in the kitchen. Your task is to: put a mug in the fridge.', 'look'),)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from derl_bench.policies.prompts import AgentTurn

_ADMISSIBLE_KEYS = ("admissible_actions", "admissible_commands", "valid_actions",
                    "valid_action_list")
_TASK_KEYS = ("task", "task_description", "goal")


def observation_text(observation: Any) -> str:
    """An env observation as the text a prompt shows (dict observations: their text field)."""
    if isinstance(observation, str):
        return observation
    if isinstance(observation, Mapping):
        for key in ("text", "observation", "problem", "question"):
            if isinstance(observation.get(key), str):
                return observation[key]
    return str(observation)


def admissible_actions(info: Mapping[str, Any]) -> list[str]:
    """The admissible commands an agent env reports in ``info`` (empty when it reports none)."""
    for key in _ADMISSIBLE_KEYS:
        value = info.get(key)
        if value is not None:
            return [str(a) for a in value]
    return []


def task_description(observation: str, info: Mapping[str, Any]) -> str:
    """The episode's task: from ``info`` when the env says it, else from the first observation
    ("... Your task is to: X")."""
    for key in _TASK_KEYS:
        if isinstance(info.get(key), str) and info[key].strip():
            return info[key].strip()
    marker = "your task is to:"
    lowered = observation.lower()
    if marker in lowered:
        return observation[lowered.index(marker) + len(marker):].strip().split("\n")[0]
    return observation.strip()


@dataclass
class AgentSession:
    """The prompt state of one agent episode (see the module docstring)."""

    task: str
    observation: str
    admissible: list[str]
    history: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def start(cls, observation: Any, info: Mapping[str, Any]) -> AgentSession:
        """The session of an episode whose reset returned ``observation`` and ``info``."""
        text = observation_text(observation)
        return cls(task_description(text, info), text, admissible_actions(info))

    def observe(self, observation: Any, info: Mapping[str, Any]) -> None:
        """Take in what the env returned for the last action."""
        self.observation = observation_text(observation)
        self.admissible = admissible_actions(info)

    def act(self, action: str) -> None:
        """Record the action taken on the current observation."""
        self.history.append((self.observation, action))

    def turn(self, admissible: Sequence[str] | None = None) -> AgentTurn:
        """What the prompt shows now; ``admissible`` replaces the env's own list (RLVMR's
        prompt takes the evaluator's)."""
        return AgentTurn(task=self.task, observation=self.observation,
                         admissible=tuple(self.admissible if admissible is None else admissible),
                         history=tuple(self.history), step=len(self.history))
