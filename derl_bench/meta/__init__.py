"""Reward discovery: DERL's outer loop and the black-box search baselines.

- ``derl``: a language-model Meta-Optimizer writes Meta-Rewards (constrained decoding keeps them
  valid); each trains an inner GRPO policy; the policies' validation scores train the
  Meta-Optimizer with GRPO.
- ``derl-pop``: the same, with every inner run warm-started from the best policy so far.
- ``random``: random search over the grammar.
- ``revolve``: REvolve-style island evolution with distance-aware crossover.

Each method is one module of :mod:`derl_bench.meta.methods`, whose registry also finds methods
from outside the package. See :func:`run_meta` and ``docs/meta-loop.md``. The names below are
imported on first use, so that reading the method registry (the command line's choices, the
leaderboards' method groups) does not load the training stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from derl_bench.lazy import lazy_exports

if TYPE_CHECKING:
    from derl_bench.meta.config import MetaConfig, load_meta_config, meta_config_from_dict
    from derl_bench.meta.loop import run_meta
    from derl_bench.meta.optimizer_config import OptimizerConfig
    from derl_bench.meta.search import IslandEvolution, Proposal, RandomSearch
    from derl_bench.meta.types import MetaResult

_HOMES = {"MetaConfig": "config", "load_meta_config": "config", "meta_config_from_dict": "config",
          "OptimizerConfig": "optimizer_config", "MetaResult": "types", "run_meta": "loop",
          "IslandEvolution": "search", "Proposal": "search", "RandomSearch": "search"}




__all__ = ["IslandEvolution", "MetaConfig", "MetaResult", "OptimizerConfig", "Proposal",
           "RandomSearch", "load_meta_config", "meta_config_from_dict", "run_meta"]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
