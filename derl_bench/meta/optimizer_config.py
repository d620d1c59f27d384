"""The Meta-Optimizer's settings: a meta recipe's ``optimizer`` section, read by the methods
whose proposer is the Meta-Optimizer (``derl``, ``derl-pop``, ``derl-frozen``;
:mod:`derl_bench.meta.methods`)."""

from __future__ import annotations

from dataclasses import dataclass

from derl_bench.grpo.advantage import ESTIMATORS
from derl_bench.grpo.config import ConfigError
from derl_bench.settings import COUNT, GROUP_TEMPERATURE, LEARNING_RATE, number_at_least, refuse

DECODERS = ("grammar", "whitelist")
"""How the Meta-Optimizer samples: derl-bench's grammar automaton, or the official token
whitelist (:mod:`derl_bench.meta.optimizer`)."""
INVALID_RULES = ("score", "drop")
"""What the outer update does with an invalid proposal: learn from its ``invalid_score``, or
drop it and refill the group with copies of the first valid proposal."""

COLD_STARTS = ("paper", "generator")
"""The Meta-Optimizer's cold-start corpora
(:meth:`~derl_bench.meta.optimizer.MetaOptimizer.cold_start`)."""


@dataclass
class OptimizerConfig:
    """The Meta-Optimizer: its model, sampler, outer update and cold start.

    The outer update's settings default to what the proposer check selected
    (docs/proposer-check.md): learning rate 1e-3, KL 0.001 to a reference reset before every
    update, 4 epochs, leave-one-out advantages."""

    model: str = "tiny"
    """A HF name, a local path, or ``tiny`` (a tiny model written under the run directory)."""
    learning_rate: float = 1e-3
    """The outer update's learning rate (finite, > 0); ``derl-frozen`` never updates."""
    kl_coef: float = 0.001
    max_new_tokens: int = 48
    """Longest expression in tokens (the grammar decoder always closes it within this)."""
    temperature: float = 1.0
    epochs: int = 4
    """Optimiser passes over each generation's group (the official code: 4 PPO epochs)."""
    reference_reset: bool = True
    """Make the current Meta-Optimizer the KL reference before every update (the official
    code resets it each iteration); otherwise the reference stays the cold-started model."""
    advantage: str = "rloo"
    """``grpo`` (group mean and std), ``rloo`` (leave-one-out baseline, unscaled) or ``raw``
    (the score itself, no baseline: the official code's one-member groups)."""
    decoder: str = "grammar"
    """``grammar`` (derl-bench's prompt and grammar-constrained decoding) or ``whitelist``
    (the official prompt, token whitelist, first-line formula and validity check;
    :mod:`derl_bench.reward.whitelist`)."""
    invalid: str = "score"
    """An invalid proposal is learnt from at the run's ``invalid_score`` (``score``), or
    ``drop``-ped from the update, the group refilled with copies of the first valid proposal
    (the official update)."""
    cold_start: str = "generator"
    """The cold-start corpus: ``paper`` (the DERL paper's 206 formulas, those that compile in
    the env's domain; needs ``derl-bench data download derl``) or ``generator`` (draws from
    the grammar)."""
    sft_examples: int = 206
    """Cold start from the generator: how many expressions it draws (the paper's corpus has
    206); 0 skips the cold start."""
    sft_steps: int = 150
    cache: str | None = None
    """A folder where cold-started Meta-Optimizers are kept, keyed by everything that
    determines them, so runs that share a cold start fine-tune once (``None``: no cache)."""

    def __post_init__(self) -> None:
        for name, allowed in (("advantage", ESTIMATORS), ("decoder", DECODERS),
                              ("invalid", INVALID_RULES), ("cold_start", COLD_STARTS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"optimizer {name} must be one of {', '.join(allowed)}, got "
                                  f"{getattr(self, name)!r}")
        if self.epochs < 1:
            raise ConfigError(f"optimizer epochs must be at least 1, got {self.epochs!r}")
        if self.sft_examples < 0 or self.sft_steps < 0:
            raise ConfigError("optimizer sft_examples and sft_steps must be >= 0")
        rules = {"learning_rate": LEARNING_RATE._replace(
                     why="a Meta-Optimizer that never learns is method: derl-frozen"),
                 "kl_coef": number_at_least(0), "temperature": GROUP_TEMPERATURE,
                 "max_new_tokens": COUNT}
        refuse(((f"optimizer.{name}", getattr(self, name), rule) for name, rule in rules.items()),
               ConfigError)
