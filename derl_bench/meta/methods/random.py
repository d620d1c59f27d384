"""``random``: random search, every reward drawn from the grammar
(:class:`~derl_bench.meta.search.RandomSearch`)."""

from __future__ import annotations

from typing import Any

from derl_bench.meta.methods.base import Method
from derl_bench.meta.search import Proposer, RandomSearch
from derl_bench.reward.primitives import env_primitives


def random_search(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    return RandomSearch(env_primitives(env_id, recipe.family), recipe.seed, recipe.max_depth)


METHOD = Method(
    name="random",
    summary="random search over the grammar",
    proposer=random_search,
    settings=("max_depth",),
)
