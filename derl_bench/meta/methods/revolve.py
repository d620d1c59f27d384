"""``revolve``: REvolve-style island evolution with distance-aware crossover
(:class:`~derl_bench.meta.search.IslandEvolution`)."""

from __future__ import annotations

from typing import Any

from derl_bench.meta.methods.base import Method
from derl_bench.meta.search import IslandEvolution, Proposer
from derl_bench.reward.primitives import env_primitives


def island_evolution(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    return IslandEvolution(env_primitives(env_id, recipe.family), recipe.seed, recipe.islands,
                           recipe.population, recipe.crossover_rate, recipe.migrate_every,
                           recipe.max_depth)


METHOD = Method(
    name="revolve",
    summary="island evolution (mutation and distance-aware crossover)",
    proposer=island_evolution,
    settings=("islands", "migrate_every", "crossover_rate", "max_depth"),
)
