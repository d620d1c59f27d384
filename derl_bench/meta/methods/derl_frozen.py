"""``derl-frozen``: the control that isolates learning: DERL's cold-started Meta-Optimizer and
sampler, never updated (learning rate 0)."""

from __future__ import annotations

from typing import Any

from derl_bench.meta.methods.base import Method
from derl_bench.meta.methods.derl import OPTIMIZER_SETTINGS, POPULATION_WHY, meta_optimizer
from derl_bench.meta.search import Proposer


def frozen_meta_optimizer(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    """DERL's Meta-Optimizer at learning rate 0."""
    return meta_optimizer(recipe, env_id, cold_start, frozen=True)


METHOD = Method(
    name="derl-frozen",
    summary="DERL's cold-started Meta-Optimizer at learning rate 0 (the control)",
    proposer=frozen_meta_optimizer,
    learns=True,
    min_population=2,
    population_why=POPULATION_WHY,
    settings=OPTIMIZER_SETTINGS,
    # The released code has DERL and DERL-pop; the frozen control is DERL at learning rate 0.
    protocols=("derl", "derl-official"),
)
