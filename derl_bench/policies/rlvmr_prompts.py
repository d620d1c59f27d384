"""RLVMR's agent prompts, verbatim, for the ``rlvmr`` evaluation protocol.

A family's card names its RLVMR prompt, an :class:`RLVMRRules`, as its ``rlvmr_prompt`` hook;
:class:`RLVMRPrompt` builds a step's messages with it. Each family keeps its own in its package
(:mod:`derl_bench.families.alfworld.prompts`, :mod:`derl_bench.families.scienceworld.prompts`),
both transcribed from
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
    >>> from derl_bench.family import resolve_family
    >>> prompt = RLVMRPrompt(resolve_family("scienceworld").rlvmr_prompt)
    >>> text = prompt.messages(turn, "Valid_actions: ['wait']")[0]["content"]
    >>> "Your current task is: boil water" in text and "Valid_actions: ['wait']" in text
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from derl_bench.policies.prompts import AgentTurn, Messages


@dataclass(frozen=True)
class RLVMRRules:
    """How RLVMR prompts one family (its card's ``rlvmr_prompt`` hook): the text of a step,
    and whether that text lists the env's available actions (ScienceWorld's action text)
    rather than the admissible ones."""

    text: Callable[[AgentTurn, str, int], str]
    lists_actions: bool




@dataclass(frozen=True)
class RLVMRPrompt:
    """RLVMR's prompt of a family, built on the rules its card names as ``rlvmr_prompt``
    (ScienceWorld's and ALFWorld's, as :attr:`~derl_bench.family.Family.rlvmr_prompt` resolves
    them)."""

    rules: RLVMRRules
    observations_shown: int = 2
    """ScienceWorld: how many recent observations the history shows."""

    def __post_init__(self) -> None:
        if not isinstance(self.rules, RLVMRRules):
            raise ValueError(f"an RLVMR prompt needs RLVMRRules (a card's rlvmr_prompt hook), "
                             f"not {type(self.rules).__name__}")

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


__all__ = ["RLVMRPrompt",
           "RLVMRRules"]
