"""Prompt builders: what an LLM policy sees at each step, per env family.

Math (GSM8K, MATH) shows the problem and asks for step-by-step reasoning with the final answer in
``\\boxed{}``. Agents (ALFWorld, ScienceWorld) use the verl-agent prompt that the RLVMR and DERL
protocols train with: the task, the last ``history_window`` (observation, action) pairs, the
current observation, the admissible actions, and the ``<think>…</think><action>…</action>``
answer format::

    >>> MathPrompt().messages("What is 2 + 3?")[0]["content"].endswith("\\\\boxed{}.")
    True
    >>> turn = AgentTurn(task="put a mug in the fridge", observation="You are in the kitchen.",
    ...                  admissible=("go to fridge 1", "look"), history=(), step=0)
    >>> from derl_bench.family import resolve_family
    >>> alfworld = AgentPrompt(resolve_family("alfworld").prompt)
    >>> "'go to fridge 1'" in alfworld.messages(turn)[0]["content"]
    True

A multi-turn family's card names its :class:`AgentPromptText` as its ``prompt`` hook (the
opening line, and the action templates to list where the env gives no admissible actions).
A builder returns chat messages; :func:`render` turns them into text with the tokenizer's chat
template, or into plain text for a model without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from derl_bench.family import Family

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class AgentPromptText:
    """What a multi-turn family's agent prompt says of its env (the card's ``prompt`` hook):
    the opening line, and the action templates listed when a turn has no admissible actions
    (OBJ/LOC stand for things named in the observation)."""

    intro: str
    action_templates: tuple[str, ...] = ()



ANSWER_FORMAT = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class MathPrompt:
    """The problem followed by the instruction to reason and box the final answer."""

    instruction: str = MATH_INSTRUCTION

    def messages(self, problem: str) -> Messages:
        """Chat messages for one problem."""
        return [{"role": "user", "content": f"{problem.strip()}\n{self.instruction}"}]


MATH_PROMPT = MathPrompt()
"""A single-step family's default ``prompt`` hook: an object whose ``messages(problem)`` gives
the chat messages of one problem."""


def problem_prompt(family: Family) -> Any:
    """The prompt a single-step ``family`` asks its problems with: its card's ``prompt`` hook,
    or :data:`MATH_PROMPT` where the card names none.

    >>> from derl_bench.family import resolve_family
    >>> problem_prompt(resolve_family("derl/GSM8K-v0")) is MATH_PROMPT
    True
    """
    return MATH_PROMPT if family.prompt is None else family.prompt


@dataclass(frozen=True)
class AgentTurn:
    """Everything the agent prompt shows at one step of an episode.

    ``history`` holds the episode's earlier (observation, action) pairs, oldest first; the
    prompt shows the last ``history_window`` of them. ``step`` counts actions taken so far.
    """

    task: str
    observation: str
    admissible: Sequence[str]
    history: Sequence[tuple[str, str]]
    step: int


@dataclass(frozen=True)
class AgentPrompt:
    """verl-agent's ALFWorld/ScienceWorld prompt with a configurable history window, built on
    a family's prompt text (its card's ``prompt`` hook, as
    :attr:`~derl_bench.family.Family.prompt` resolves it)."""

    text: AgentPromptText
    history_window: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.text, AgentPromptText):
            raise ValueError(f"an agent prompt needs an AgentPromptText (a multi-turn card's "
                             f"prompt hook), not {type(self.text).__name__}")
        if self.history_window < 0:
            raise ValueError(f"history_window must be >= 0, got {self.history_window}")

    def messages(self, turn: AgentTurn) -> Messages:
        """Chat messages for one step."""
        actions = "\n ".join(f"'{a}'" for a in turn.admissible if a != "help")
        lines = [f"{self.text.intro} Your task is to: {turn.task.strip()}"]
        shown = list(turn.history)[-self.history_window:] if self.history_window else []
        if shown:
            first = turn.step - len(shown) + 1
            past = "\n".join(
                f"[Observation {first + i}: '{obs.strip()}', Action {first + i}: '{act}']"
                for i, (obs, act) in enumerate(shown)
            )
            lines.append(
                f"Prior to this step, you have already taken {turn.step} step(s). Below are the "
                f"most recent {len(shown)} observations and the corresponding actions you took: "
                f"{past}"
            )
        lines.append(f"You are now at step {turn.step + 1} and your current observation is: "
                     f"{turn.observation.strip()}")
        if actions:
            lines.append(f"Your admissible actions of the current situation are: [{actions}].")
        elif self.text.action_templates:
            templates = ", ".join(self.text.action_templates)
            lines.append(f"Available actions (OBJ and LOC name things in the observation): "
                         f"[{templates}].")
        lines.append("")
        lines.append(ANSWER_FORMAT)
        return [{"role": "user", "content": "\n".join(lines)}]


def render(tokenizer: Any, messages: Messages) -> str:
    """Prompt text for ``messages``: the chat template when the tokenizer has one, else the
    contents joined by blank lines (base models)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages) + "\n\n"
