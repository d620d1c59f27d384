"""ALFWorld's text games behind the Gymnasium API, and what the family plugs into the stages
(its card, ``envs/alfworld.md``, names them), one module per job:

- :mod:`~derl_bench.families.alfworld.env`: the Gymnasium env, ``ALFWorldEnv``;
- :mod:`~derl_bench.families.alfworld.games`: game ids, levels, splits and their manifests;
- :mod:`~derl_bench.families.alfworld.engine`: one game being played (commands, feedback, plan);
- :mod:`~derl_bench.families.alfworld.game`: a game's data, translated and parsed once per
  process;
- :mod:`~derl_bench.families.alfworld.state`: fast-downward's state built from that data;
- :mod:`~derl_bench.families.alfworld.textgen`: TextWorld's grammar derivation, memoised;
- :mod:`~derl_bench.families.alfworld.goal`: the PDDL goal and how much of it holds;
- :mod:`~derl_bench.families.alfworld.upstream`: the lazily imported upstream libraries;
- :mod:`~derl_bench.families.alfworld.teacher`: the searching teacher;
- :mod:`~derl_bench.families.alfworld.observers`: the primitives;
- :mod:`~derl_bench.families.alfworld.prompts`: the agent prompt's text and RLVMR's prompt;
- :mod:`~derl_bench.families.alfworld.adapter`: the evaluation rules;
- :mod:`~derl_bench.families.alfworld.compact_state`: the compact state a command policy reads;
- :mod:`~derl_bench.families.alfworld.vocab`: the command model's word-level tokenizer;
- :mod:`~derl_bench.families.alfworld.commands`: those two, for the command stack;
- :mod:`~derl_bench.families.alfworld.data`: the dataset ``derl-bench data`` downloads.

The names below are imported from their module on first use, so resolving one of the card's
hooks does not load the engine with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from derl_bench.lazy import lazy_exports

if TYPE_CHECKING:
    from derl_bench.families.alfworld.engine import NOTHING_HAPPENS
    from derl_bench.families.alfworld.env import ALFWorldEnv
    from derl_bench.families.alfworld.upstream import EngineError

_MODULE_OF = {"ALFWorldEnv": "env", "NOTHING_HAPPENS": "engine", "EngineError": "upstream"}

__all__ = ["ALFWorldEnv", "NOTHING_HAPPENS", "EngineError"]


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF, __all__)
