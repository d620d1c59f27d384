"""RLVMR's agent prompts, verbatim, for the ``rlvmr`` evaluation protocol.

Transcribed from RLVMR/code/agent_system/environments/prompts/{sciworld,alfworld}.py and the
``build_text_obs`` methods of RLVMR/code/agent_system/environments/env_manager.py
(zzjweb/digitalhuman, built on verl-agent), the non-meta-thinking variants that its GRPO and
GiGPO baselines use. The differences from :class:`~derl_bench.policies.prompts.AgentPrompt`:

- ScienceWorld lists the action templates and the objects that can replace OBJ (not the valid
  action-object combinations), shows every earlier action and the last 2 observations, and
  numbers the first history entry of step 2 as step 0 (as RLVMR's code does);
- ALFWorld shows the whole episode's history, and no task line on the first step.

ScienceWorld's rules are here; a family's card names its own :class:`RLVMRRules` as its
``rlvmr_prompt`` hook (ALFWorld's are in :mod:`derl_bench.families.alfworld.prompts`).

    >>> turn = AgentTurn(task="boil water", observation="This room is called the kitchen.",
    ...                  admissible=(), history=(), step=0)
    >>> text = RLVMRPrompt("scienceworld").messages(turn, "Valid_actions: ['wait']")[0]["content"]
    >>> "Your current task is: boil water" in text and "Valid_actions: ['wait']" in text
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from derl_bench.family import family_spec
from derl_bench.policies.prompts import SCIENCEWORLD_ACTION_TABLE, AgentTurn, Messages

RLVMR_OMITS = ("teleport to LOC",)
"""ScienceWorld action templates that RLVMR's list leaves out."""
_ACTIONS = [f'{{{{"action": "{template}", "description": "{description}"}}}}'
            for template, description in SCIENCEWORLD_ACTION_TABLE if template not in RLVMR_OMITS]
_ACTION_LINES = ["[", *(f"{line}," for line in _ACTIONS[:-1]), _ACTIONS[-1], "]"]
"""RLVMR's action list, one JSON object a line, braces doubled for ``str.format``."""

_SCIWORLD_OPENING = [
    '',
    ('You are an expert agent operating in the ScienceWorld environment, which is a text-based '
     'virtual environment centered around accomplishing tasks from the elementary science '
     'curriculum.'),
    'Your current task is: {task_description}',
    '',
]
_SCIWORLD_ACTIONS = [
    'Here are the actions you may take:',
    *_ACTION_LINES,
    '',
    'Current available actions:',
    '{available_actions}',
    '',
]
"""The parts both ScienceWorld prompts share: the opening, and the actions."""

SCIWORLD_TEMPLATE_NO_HIS = "\n".join([
    *_SCIWORLD_OPENING,
    'Your current observation is: {current_observation}',
    *_SCIWORLD_ACTIONS,
    "Now it's your turn to take an action.",
    ('You should first reason step-by-step about the current situation. This reasoning process '
     'MUST be enclosed within <think> </think> tags. '),
    ("Once you've finished your reasoning, you should choose an appropriate action for the "
     "current step and present it within <action> </action> tags."),
    '',
])

SCIWORLD_TEMPLATE = "\n".join([
    *_SCIWORLD_OPENING,
    ('Prior to this step, you have already taken {step_count} step(s). Below are the most recent '
     '{history_length} observations and the corresponding actions you took: {action_history}'),
    'You are now at step {current_step} and your current observation is: {current_observation}',
    *_SCIWORLD_ACTIONS,
    ("Now it's your turn to take an action. You should first reason step-by-step about the "
     "current situation. This reasoning process MUST be enclosed within <think> </think> tags."),
    ("Once you've finished your reasoning, you should choose an appropriate action for the "
     "current step and present it within <action> </action> tags."),
    '',
])


def scienceworld_text(turn: AgentTurn, available: str, observations_shown: int) -> str:
    """RLVMR's ScienceWorld prompt for one step: every earlier action, the last
    ``observations_shown`` observations, and ``available`` (the action text)."""
    history = list(turn.history)
    if not history:
        return SCIWORLD_TEMPLATE_NO_HIS.format(
            task_description=turn.task, current_observation=turn.observation,
            available_actions=available)
    recent = history[-observations_shown:]
    # negative for a short history, as in RLVMR, which then numbers entries from 0
    recent_start = len(history) - observations_shown
    lines = [f"\n[Step {j + 1}, Action {j + 1}: '{history[j][1]}']"
             for j in range(recent_start)]
    lines += [f"\n[Step {recent_start + j + 1}, Observation {recent_start + j + 1}: "
              f"'{obs}', Action {recent_start + j + 1}: '{action}']"
              for j, (obs, action) in enumerate(recent)]
    return SCIWORLD_TEMPLATE.format(
        task_description=turn.task, step_count=len(history), history_length=len(recent),
        action_history="".join(lines).strip(), current_step=len(history) + 1,
        current_observation=turn.observation, available_actions=available)


@dataclass(frozen=True)
class RLVMRRules:
    """How RLVMR prompts one family (its card's ``rlvmr_prompt`` hook): the text of a step,
    and whether that text lists the env's available actions (ScienceWorld's action text)
    rather than the admissible ones."""

    text: Callable[[AgentTurn, str, int], str]
    lists_actions: bool


SCIENCEWORLD = RLVMRRules(scienceworld_text, lists_actions=True)


@dataclass(frozen=True)
class RLVMRPrompt:
    """RLVMR's prompt for ``family``, a family whose card names an ``rlvmr_prompt``
    (ScienceWorld and ALFWorld)."""

    family: str
    observations_shown: int = 2
    """ScienceWorld: how many recent observations the history shows."""

    def __post_init__(self) -> None:
        spec = family_spec(self.family)
        if not spec.has_part("rlvmr_prompt"):
            raise ValueError(f"no RLVMR prompt for family {self.family!r}")
        object.__setattr__(self, "_rules", spec.part("rlvmr_prompt"))

    @property
    def rules(self) -> RLVMRRules:
        rules: RLVMRRules = self.__dict__["_rules"]
        return rules

    @property
    def lists_actions(self) -> bool:
        """Whether a step needs the env's available-action text (else its admissible ones)."""
        return self.rules.lists_actions

    def messages(self, turn: AgentTurn, available_actions: str = "") -> Messages:
        """Chat messages for one step. ``available_actions`` is ScienceWorld's action text
        (:func:`derl_bench.evaluation.rlvmr.scienceworld_available_actions`); ALFWorld lists
        ``turn.admissible``."""
        text = self.rules.text(turn, available_actions, self.observations_shown)
        return [{"role": "user", "content": text}]


__all__ = ["SCIENCEWORLD", "SCIWORLD_TEMPLATE", "SCIWORLD_TEMPLATE_NO_HIS", "RLVMRPrompt",
           "RLVMRRules"]
