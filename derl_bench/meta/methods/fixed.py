"""``fixed``: the hand-made ``reward`` at the search methods' budget: one inner run per candidate
slot, each with its own seed (:class:`~derl_bench.meta.search.FixedReward`)."""

from __future__ import annotations

from typing import Any

from derl_bench.meta.methods.base import HAND_MADE_GROUP, Method
from derl_bench.meta.search import FixedReward, Proposer


def fixed_reward(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    assert recipe.reward is not None  # check_reward refused a recipe without one
    return FixedReward(recipe.reward, recipe.seed)


def check_reward(recipe: Any) -> str | None:
    return None if recipe.reward else "method fixed needs a reward expression"


METHOD = Method(
    name="fixed",
    summary="a hand-made reward at the same budget, each inner run with its own seed",
    proposer=fixed_reward,
    searches=False,
    settings=("reward",),
    check=check_reward,
    group=HAND_MADE_GROUP,
)
