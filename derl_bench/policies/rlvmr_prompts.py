"""RLVMR's agent prompts, verbatim, for the ``rlvmr`` evaluation protocol.

A family's card names its RLVMR prompt, an :class:`RLVMRRules`, as its ``rlvmr_prompt`` hook;
:class:`RLVMRPrompt` builds a step's messages with it. ALFWorld's is here, ScienceWorld's in
:mod:`derl_bench.families.scienceworld.prompts`. Both are transcribed from
RLVMR/code/agent_system/environments/prompts/{sciworld,alfworld}.py and the
``build_text_obs`` methods of RLVMR/code/agent_system/environments/env_manager.py
(zzjweb/digitalhuman, built on verl-agent), the non-meta-thinking variants that its GRPO and
GiGPO baselines use. The differences from :class:`~derl_bench.policies.prompts.AgentPrompt`:

- ScienceWorld lists the action templates and the objects that can replace OBJ (not the valid
  action-object combinations), shows every earlier action and the last 2 observations, and
  numbers the first history entry of step 2 as step 0 (as RLVMR's code does);
- ALFWorld shows the whole episode's history, and no task line on the first step.

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
from derl_bench.policies.prompts import AgentTurn, Messages

_ALFWORLD_ACTIONS_AND_ANSWER = [
    'Your admissible actions of the current situation are: [{admissible_actions}].',
    '',
    "Now it's your turn to take an action.",
    ('You should first reason step-by-step about the current situation. This reasoning process '
     'MUST be enclosed within <think> </think> tags. '),
    ("Once you've finished your reasoning, you should choose an admissible action for current "
     "step and present it within <action> </action> tags."),
    '',
]
"""The end of both ALFWorld prompts: the admissible actions and how to answer."""

ALFWORLD_TEMPLATE_NO_HIS = "\n".join([
    '',
    'You are an expert agent operating in the ALFRED Embodied Environment.',
    'Your current observation is: {current_observation}',
    *_ALFWORLD_ACTIONS_AND_ANSWER,
])

ALFWORLD_TEMPLATE = "\n".join([
    '',
    ('You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: '
     '{task_description}'),
    ('Prior to this step, you have already taken {step_count} step(s). Below are the most recent '
     '{history_length} observaitons and the corresponding actions you took: {action_history}'),
    'You are now at step {current_step} and your current observation is: {current_observation}',
    *_ALFWORLD_ACTIONS_AND_ANSWER,
])


def alfworld_text(turn: AgentTurn, available: str, observations_shown: int) -> str:
    """RLVMR's ALFWorld prompt for one step: the whole history and ``turn.admissible``."""
    admissible = "\n ".join(f"'{s}'" for s in turn.admissible if s != "help")
    history = list(turn.history)
    if not history:
        return ALFWORLD_TEMPLATE_NO_HIS.format(current_observation=turn.observation,
                                               admissible_actions=admissible)
    lines = [f"\n[Observation {j + 1}: '{obs}', Action {j + 1}: '{action}']"
             for j, (obs, action) in enumerate(history)]
    return ALFWORLD_TEMPLATE.format(
        task_description=turn.task, step_count=len(history), history_length=len(history),
        action_history="".join(lines).strip(), current_step=len(history) + 1,
        current_observation=turn.observation, admissible_actions=admissible)


@dataclass(frozen=True)
class RLVMRRules:
    """How RLVMR prompts one family (its card's ``rlvmr_prompt`` hook): the text of a step,
    and whether that text lists the env's available actions (ScienceWorld's action text)
    rather than the admissible ones."""

    text: Callable[[AgentTurn, str, int], str]
    lists_actions: bool


ALFWORLD = RLVMRRules(alfworld_text, lists_actions=False)


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
        (:func:`derl_bench.families.scienceworld.rlvmr.scienceworld_available_actions`);
        ALFWorld lists ``turn.admissible``."""
        text = self.rules.text(turn, available_actions, self.observations_shown)
        return [{"role": "user", "content": text}]


__all__ = ["ALFWORLD", "ALFWORLD_TEMPLATE", "ALFWORLD_TEMPLATE_NO_HIS", "RLVMRPrompt",
           "RLVMRRules"]
