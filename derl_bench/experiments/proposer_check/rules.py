"""The proposer check's scoring rules (see the package docstring): each scores a reward in
[-1, 1] from its values on a probe set, with a known optimum at 1."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from derl_bench.experiments.proposer_check.config import CheckConfig
from derl_bench.meta.probe import ProbeSet
from derl_bench.reward import MetaReward, compile_reward, primitive_set

RULE_KINDS = ("rank", "pays")
OPTIMUM = 1.0 - 1e-9
"""A score at or above this counts as the optimum (float rounding of 1)."""


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    _, inverse = np.unique(x, return_inverse=True)
    return (np.bincount(inverse, weights=ranks) / np.bincount(inverse))[inverse]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation with averaged ties; 0 when either side is constant.

    >>> spearman(np.array([1., 2., 3.]), np.array([10., 20., 40.]))
    1.0
    >>> spearman(np.array([1., 1., 1.]), np.array([1., 2., 3.]))
    0.0
    """
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return 0.0 if denominator == 0 else round(float((ra * rb).sum()) / denominator, 12)


@dataclass(frozen=True)
class Rule:
    """A scoring rule (see the module docstring)."""

    name: str
    kind: str
    argument: str
    noisy: bool

    def score(self, reward: MetaReward | None, probe: ProbeSet) -> float:
        """The noise-free score of ``reward`` (``None``: it did not compile) in [-1, 1]."""
        if reward is None:
            return -1.0
        if self.kind == "rank":
            target = compile_reward(self.argument, env=probe.env_id)
            return spearman(probe.values(reward), probe.values(target))
        return probe.pays(reward, self.argument)


def parse_rule(text: str, env_id: str) -> Rule:
    """``KIND:ARGUMENT`` as a :class:`Rule`, checked against the env's primitives."""
    kind, sep, argument = text.partition(":")
    noisy = kind.startswith("noisy-")
    base = kind.removeprefix("noisy-")
    if not sep or base not in RULE_KINDS or not argument.strip():
        raise ValueError(f"rule {text!r}: expected rank:EXPR, pays:NAME or noisy-<kind>:...")
    argument = argument.strip()
    chosen = primitive_set(env_id)
    if base == "rank":
        compile_reward(argument, env=env_id)
    else:
        argument = chosen.aliases.get(argument, argument)
        if argument not in chosen.names:
            raise ValueError(f"rule {text!r}: {argument!r} is not a primitive of {env_id}")
    return Rule(text, base, argument, noisy)


def observed(score: float, rule: Rule, config: CheckConfig, rng: np.random.Generator,
             ) -> float:
    """What the proposer is told: the score itself, or its validation-like measurement."""
    if not rule.noisy:
        return score
    p = config.noise_low + (config.noise_high - config.noise_low) * (score + 1) / 2
    return float(rng.binomial(config.noise_n, min(1.0, max(0.0, p))) / config.noise_n)
