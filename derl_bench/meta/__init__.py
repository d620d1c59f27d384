"""Reward discovery: DERL's outer loop and the black-box search baselines.

- ``derl``: a language-model Meta-Optimizer writes Meta-Rewards (constrained decoding keeps them
  valid); each trains an inner GRPO policy; the policies' validation scores train the
  Meta-Optimizer with GRPO.
- ``derl-pop``: the same, with every inner run warm-started from the best policy so far.
- ``random``: random search over the grammar.
- ``revolve``: REvolve-style island evolution with distance-aware crossover.

See :func:`run_meta` and ``docs/meta-loop.md``.
"""

from derl_bench.meta.config import (
    METHODS,
    MetaConfig,
    OptimizerConfig,
    load_meta_config,
    meta_config_from_dict,
)
from derl_bench.meta.loop import MetaResult, run_meta
from derl_bench.meta.search import IslandEvolution, Proposal, RandomSearch

__all__ = ["METHODS", "IslandEvolution", "MetaConfig", "MetaResult", "OptimizerConfig", "Proposal",
           "RandomSearch", "load_meta_config", "meta_config_from_dict", "run_meta"]
