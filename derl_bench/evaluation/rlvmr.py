"""The ``rlvmr`` evaluation protocol: RLVMR's validation run, as its public code does it.

RLVMR (and DERL, which reuses its code) validates with its own episode draws, prompts and
sampling (RLVMR/code/ of zzjweb/digitalhuman, built on verl-agent). A family's evaluation
adapter draws the protocol's episodes
(:meth:`~derl_bench.evaluation.families.FamilyAdapter.rlvmr_eval_set`) and gives the action
text its prompt lists (:meth:`~derl_bench.evaluation.families.FamilyAdapter.available_actions`);
its card's ``rlvmr_prompt`` hook names the prompt
(:class:`~derl_bench.policies.rlvmr_prompts.RLVMRPrompt`). ScienceWorld's draws, which follow
RLVMR's code line by line, are in :mod:`derl_bench.families.scienceworld.rlvmr`.

The other settings of the protocol: sampling temperature 0.4 (``val_kwargs.temperature``), the
family's RLVMR prompt (ScienceWorld: action templates plus the objects that can replace OBJ,
every earlier action and the last 2 observations; ALFWorld: the whole episode's history), and
verl-agent's action projection (:func:`derl_bench.observers.think_action.parse_verl_agent`).
"""

from __future__ import annotations

TEMPERATURE = 0.4


__all__ = ["TEMPERATURE"]
