"""The proposer check's settings: its budget, rules, proposers and the Meta-Optimizer's."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from derl_bench.experiments.proxy.config import ENV_ID
from derl_bench.meta.config import OptimizerConfig
from derl_bench.meta.methods import CONTROLS_GROUP, methods, registry


def check_proposers() -> tuple[str, ...]:
    """The methods of the registry (:mod:`derl_bench.meta.methods`) the check runs: those that
    search for a reward without warm starts (the check trains no policy to start from), the
    ones whose proposer learns first, each in registry order. The controls are left out: they
    are built from a task's planted reward, which the check's rules replace.

    >>> check_proposers()[:4]
    ('derl', 'derl-frozen', 'random', 'revolve')
    """
    found = [m for m in methods()
             if m.searches and not m.warm_starts and m.group != CONTROLS_GROUP]
    return tuple(m.name for m in sorted(found, key=lambda m: not m.learns))


def learner(name: str) -> bool:
    """Whether proposer ``name`` learns (the Meta-Optimizer: cold-started on each corpus of
    ``cold_starts``); ``False`` for a name the registry lacks (an old result's)."""
    method = registry().get(name)
    return method is not None and method.learns




@dataclass
class CheckConfig:
    """The check's budget and rules. The defaults are the full check (docs/proposer-check.md)."""

    output: str = "runs/proposer-check"
    env_id: str = ENV_ID
    rules: list[str] = field(default_factory=lambda: [
        "rank:g1 + 0.5 * g2", "pays:answer_closeness", "noisy-rank:g1 + 0.5 * g2"])
    proposers: list[str] = field(default_factory=lambda: list(check_proposers()))
    cold_starts: list[str] = field(default_factory=lambda: ["paper", "generator"])
    seeds: list[int] = field(default_factory=lambda: list(range(10)))
    generations: int = 20
    population: int = 8
    endpoint_from: int = 10
    """First generation of the endpoint window (the official code runs 20 generations; the
    window is its second half)."""
    probe_problems: int = 32
    noise_n: int = 200
    noise_low: float = 0.0
    noise_high: float = 0.1
    outer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """The Meta-Optimizer's settings, a meta recipe's ``optimizer`` with its defaults (the
    settings this check selected, docs/proposer-check.md). The check sets the model (a tiny
    one, shared through ``cache``) and the cold-start corpora (``cold_starts``) itself."""
    max_depth: int = 3
    """``random``/``revolve``: deepest expression tree drawn from the grammar."""
    cache: str | None = None
    """Where the Meta-Optimizer's initial weights and cold starts are kept (default
    ``<output>/cache``): checks that share it fine-tune each cold start once."""
    workers: int = 1
    """Processes that run (rule, proposer, seed) units side by side; the results do not depend
    on it (every unit is seeded on its own)."""

    def __post_init__(self) -> None:
        known = check_proposers()
        unknown = [p for p in self.proposers if p not in known]
        if unknown:
            raise ValueError(f"unknown proposers {unknown}; known: {', '.join(known)}")
        if not self.seeds or self.generations < 1 or self.population < 2:
            raise ValueError("the check needs a seed, a generation and a population >= 2")
        if not 0 <= self.endpoint_from < self.generations:
            raise ValueError("endpoint_from must name a generation of the run")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if isinstance(self.outer, dict):
            self.outer = OptimizerConfig(**self.outer)


SMALL: dict[str, Any] = {"seeds": [0, 1], "generations": 3, "population": 4, "endpoint_from": 1,
         "probe_problems": 4}
"""``--small``: every proposer, rule and cold start at a size CI runs in about a minute."""


def small(config: CheckConfig) -> CheckConfig:
    """``config`` at the ``--small`` size."""
    return replace(config, **SMALL, outer=replace(config.outer, sft_steps=10, sft_examples=32))


def proposer_runs(config: CheckConfig) -> list[tuple[str, str | None]]:
    """Every (proposer, cold start) the check runs; a proposer that is not a learner has no
    cold start."""
    return [(name, cold) for name in config.proposers
            for cold in (config.cold_starts if learner(name) else [None])]
