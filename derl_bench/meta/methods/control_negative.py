"""``control-negative``: a searcher worse than random search by construction. It draws from
the grammar as ``random`` does, but without the primitives of the first part the task's card
names for its planted reward (``planted_parts``; on DigitsBalance, ``digit_recall``), so it can
never reach the class of rewards that pay that part. A board that cannot rank it below random
search cannot see a worse searcher."""

from __future__ import annotations

from typing import Any

from derl_bench.family import Family
from derl_bench.meta.methods.base import CONTROLS_GROUP, Method
from derl_bench.meta.search import Proposer, RandomSearch
from derl_bench.reward.primitives import env_primitives


def withheld(env_id: str, family: Family) -> tuple[str, ...]:
    """The primitives the negative control never draws: those the first planted part reads
    (``family``: ``env_id``'s, resolved by the caller)."""
    from derl_bench.reward import compile_reward
    from derl_bench.reward.planted import planted_parts

    parts = planted_parts(env_id, family)
    if not parts:
        raise ValueError(f"method control-negative withholds the first of the planted reward's "
                         f"parts, and {env_id}'s card names none (planted_parts)")
    first = next(iter(parts.values()))
    return tuple(sorted(compile_reward(first, env_primitives(env_id, family)).primitives))


def negative_control(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    domain = env_primitives(env_id, recipe.family)
    left_out = set(withheld(env_id, recipe.family))
    kept = [name for name in domain.names if name not in left_out]
    return RandomSearch(domain, recipe.seed, recipe.max_depth, primitives=kept)


def _check(recipe: Any) -> str | None:
    try:
        withheld(recipe.inner.env_id, recipe.family)
    except ValueError as err:
        return str(err)
    return None


METHOD = Method(
    name="control-negative",
    summary="random search without the first planted part's primitives (a control)",
    proposer=negative_control,
    settings=("max_depth",),
    check=_check,
    group=CONTROLS_GROUP,
)
