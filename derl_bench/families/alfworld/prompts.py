"""ALFWorld's prompts: the agent prompt's opening line (the card's ``prompt`` hook) and RLVMR's
ALFWorld prompt, verbatim, for the ``rlvmr`` evaluation protocol (its ``rlvmr_prompt`` hook).

RLVMR's is transcribed from RLVMR/code/agent_system/environments/prompts/alfworld.py and the
``build_text_obs`` of RLVMR/code/agent_system/environments/env_manager.py (see
:mod:`derl_bench.policies.rlvmr_prompts`): the whole episode's history, and no task line on the
first step.

    >>> from derl_bench.policies.prompts import AgentTurn
    >>> turn = AgentTurn(task="put a mug in the fridge", observation="You are in the kitchen.",
    ...                  admissible=("go to fridge 1", "help"), history=(), step=0)
    >>> print(alfworld_text(turn, "", 2).splitlines()[3])
    Your admissible actions of the current situation are: ['go to fridge 1'].
"""

from __future__ import annotations

from derl_bench.policies.prompts import AgentPromptText, AgentTurn
from derl_bench.policies.rlvmr_prompts import RLVMRRules

PROMPT = AgentPromptText(
    "You are an expert agent operating in the ALFRED Embodied Environment.")

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


RLVMR_PROMPT = RLVMRRules(alfworld_text, lists_actions=False)
