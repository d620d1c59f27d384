"""``control-planted``: a searcher better than random search by construction. Every proposal
is a one-edit neighbour of the reward the task's card plants (``planted_reward``): a random
subtree of it replaced by a fresh random expression (:class:`~derl_bench.meta.search.
Neighbourhood`), so its picks start next to the task's best reward. A board that cannot rank
it above random search cannot see a better searcher."""

from __future__ import annotations

from typing import Any

from derl_bench.meta.methods.base import CONTROLS_GROUP, Method
from derl_bench.meta.search import Neighbourhood, Proposer
from derl_bench.reward.primitives import env_primitives


def planted_neighbourhood(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    from derl_bench.reward.planted import planted_reward

    return Neighbourhood(env_primitives(env_id, recipe.family),
                         planted_reward(env_id, recipe.family), recipe.seed, recipe.max_depth)


def _check(recipe: Any) -> str | None:
    from derl_bench.reward.planted import planted_reward

    try:
        planted_reward(recipe.inner.env_id, recipe.family)
    except ValueError as err:
        return f"method control-planted searches around the task's planted reward: {err}"
    return None


METHOD = Method(
    name="control-planted",
    summary="one-edit neighbours of the task's planted reward (a control)",
    proposer=planted_neighbourhood,
    settings=("max_depth",),
    check=_check,
    group=CONTROLS_GROUP,
)
