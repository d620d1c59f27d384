"""ScienceWorld's prompts: the agent prompt's text (the card's ``prompt`` hook, :data:`PROMPT`)
and RLVMR's ScienceWorld prompt for the ``rlvmr`` protocol (its ``rlvmr_prompt`` hook,
:data:`RLVMR_PROMPT`).

ScienceWorld's valid action-object combinations run into the thousands per state, so both list
the action templates (:data:`SCIENCEWORLD_ACTION_TABLE`) rather than the valid actions. RLVMR's
prompt is transcribed from RLVMR/code/agent_system/environments/prompts/sciworld.py and the
``build_text_obs`` of RLVMR/code/agent_system/environments/env_manager.py (zzjweb/digitalhuman,
built on verl-agent), the non-meta-thinking variant: the action templates and the objects that
can replace OBJ, every earlier action and the last 2 observations, the first history entry of
step 2 numbered as step 0 (as RLVMR's code does).

    >>> turn = AgentTurn(task="boil water", observation="This room is called the kitchen.",
    ...                  admissible=(), history=(), step=0)
    >>> text = scienceworld_text(turn, "Valid_actions: ['wait']", 2)
    >>> "Your current task is: boil water" in text and "Valid_actions: ['wait']" in text
    True
"""

from __future__ import annotations

from derl_bench.policies.prompts import AgentPromptText, AgentTurn
from derl_bench.policies.rlvmr_prompts import RLVMRRules

SCIENCEWORLD_ACTION_TABLE: tuple[tuple[str, str], ...] = (
    ("open OBJ", "open a container"),
    ("close OBJ", "close a container"),
    ("activate OBJ", "activate a device"),
    ("deactivate OBJ", "deactivate a device"),
    ("connect OBJ to OBJ", "connect electrical components"),
    ("disconnect OBJ", "disconnect electrical components"),
    ("use OBJ [on OBJ]", "use a device/item"),
    ("look around", "describe the current room"),
    ("look at OBJ", "describe an object in detail"),
    ("look in OBJ", "describe a container's contents"),
    ("read OBJ", "read a note or book"),
    ("move OBJ to OBJ", "move an object to a container"),
    ("pick up OBJ", "move an object to the inventory"),
    ("put down OBJ", "drop an inventory item"),
    ("pour OBJ into OBJ", "pour a liquid into a container"),
    ("dunk OBJ into OBJ", "dunk a container into a liquid"),
    ("mix OBJ", "chemically mix a container"),
    ("go to LOC", "move to a new location"),
    ("teleport to LOC", "teleport to a specific room"),
    ("eat OBJ", "eat a food"),
    ("flush OBJ", "flush a toilet"),
    ("focus on OBJ", "signal intent on a task object"),
    ("wait", "take no action for 10 iterations"),
    ("wait1", "take no action for 1 iteration"),
    ("task", "describe current task"),
    ("inventory", "list your inventory"),
)
"""ScienceWorld's action templates and what each does (the descriptions are RLVMR's, whose
prompt lists them: :data:`RLVMR_PROMPT`). Its valid object combinations run into the
thousands per state, so a prompt lists the templates instead (OBJ/LOC come from the
observation)."""
SCIENCEWORLD_ACTIONS = tuple(template for template, _ in SCIENCEWORLD_ACTION_TABLE)
"""ScienceWorld's action templates, as the agent prompt lists them."""

PROMPT = AgentPromptText(
    "You are an expert agent playing ScienceWorld, a text-based science simulation.",
    SCIENCEWORLD_ACTIONS)
"""The agent prompt's text: its opening line, and the templates it lists."""

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


RLVMR_PROMPT = RLVMRRules(scienceworld_text, lists_actions=True)
"""RLVMR's ScienceWorld prompt: :func:`scienceworld_text`, with the env's action text."""


__all__ = ["PROMPT", "RLVMR_OMITS", "RLVMR_PROMPT", "SCIENCEWORLD_ACTIONS",
           "SCIENCEWORLD_ACTION_TABLE", "SCIWORLD_TEMPLATE", "SCIWORLD_TEMPLATE_NO_HIS",
           "scienceworld_text"]
