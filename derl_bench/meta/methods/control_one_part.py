"""``control-one-part``: a searcher better than random search by a stated margin, by
construction. Every proposal is the first part the task's card names for its planted reward
(``planted_parts``; on DigitsBalance, ``digit_recall``) plus a fresh random expression
(:class:`~derl_bench.meta.search.PartGiven`), so each draw pays that part as its own term and
the search only looks for what to add. On DigitsBalance random search finds the part on about
7 seeds in 10, so this control's margin over it is small (about 8 points predicted): it
measures whether a board sees a difference near its detection limit, where the planted
neighbourhood (``control-planted``) measures a large one."""

from __future__ import annotations

from typing import Any

from derl_bench.family import Family
from derl_bench.meta.methods.base import CONTROLS_GROUP, Method
from derl_bench.meta.search import PartGiven, Proposer
from derl_bench.reward.primitives import env_primitives


def given_part(env_id: str, family: Family) -> str:
    """The part every proposal pays: the first of the planted reward's parts (``family``:
    ``env_id``'s, resolved by the caller)."""
    from derl_bench.reward.planted import planted_parts

    parts = planted_parts(env_id, family)
    if not parts:
        raise ValueError(f"method control-one-part gives every proposal the first of the "
                         f"planted reward's parts, and {env_id}'s card names none "
                         f"(planted_parts)")
    return next(iter(parts.values()))


def one_part_given(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    return PartGiven(env_primitives(env_id, recipe.family), given_part(env_id, recipe.family),
                     recipe.seed, recipe.max_depth)


def _check(recipe: Any) -> str | None:
    try:
        given_part(recipe.inner.env_id, recipe.family)
    except ValueError as err:
        return str(err)
    return None


METHOD = Method(
    name="control-one-part",
    summary="random search with the first planted part in every draw (a control)",
    proposer=one_part_given,
    settings=("max_depth",),
    check=_check,
    group=CONTROLS_GROUP,
)
