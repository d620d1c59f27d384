"""GRPO for LLM policies: one advantage/loss implementation for math and agents.

- :mod:`~derl_bench.grpo.advantage`: group-relative advantages;
- :mod:`~derl_bench.grpo.loss`: clipped-ratio loss with k3 KL, token-level aggregation, masking;
- :mod:`~derl_bench.grpo.config`: the run's :class:`TrainConfig` and YAML recipes;
- :mod:`~derl_bench.grpo.trainer`: the compact trainer (every env);
- :mod:`~derl_bench.grpo.commands`: GRPO of a command policy (ALFWorld's small agent);
- :mod:`~derl_bench.grpo.trl`: TRL's ``GRPOTrainer``, for math and for agents;
- :mod:`~derl_bench.grpo.dispatch`: the trainers behind one interface, and the one place that
  chooses which runs a recipe.

The names below are imported from their module on first use, so code that needs only the
advantage or the loss (the meta loop, SFT, evaluation) does not load the trainer, the envs
and transformers with them::

    >>> import derl_bench.grpo as grpo
    >>> grpo.group_advantages([1.0, 0.0], [0, 0]).round(4).tolist()
    [1.0, -1.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from derl_bench.lazy import lazy_exports

if TYPE_CHECKING:
    from derl_bench.grpo.advantage import group_advantages
    from derl_bench.grpo.checkpoint import ResumeError
    from derl_bench.grpo.config import ConfigError, TrainConfig, load_config, parse_overrides
    from derl_bench.grpo.loss import LossOutput, grpo_loss, k3_kl, masked_mean, token_logprobs
    from derl_bench.grpo.trainer import train

_MODULE_OF = {
    "group_advantages": "advantage",
    "ConfigError": "config",
    "TrainConfig": "config",
    "load_config": "config",
    "parse_overrides": "config",
    "LossOutput": "loss",
    "grpo_loss": "loss",
    "k3_kl": "loss",
    "masked_mean": "loss",
    "token_logprobs": "loss",
    "ResumeError": "checkpoint",
    "train": "trainer",
}

__all__ = [
    "ConfigError",
    "LossOutput",
    "ResumeError",
    "TrainConfig",
    "group_advantages",
    "grpo_loss",
    "k3_kl",
    "load_config",
    "masked_mean",
    "parse_overrides",
    "token_logprobs",
    "train",
]


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF, __all__)
