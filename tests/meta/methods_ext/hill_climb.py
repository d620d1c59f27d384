"""A reward-discovery method defined outside derl_bench: a greedy hill-climb.

The first generation draws its rewards from the grammar; every later one mutates the best
reward scored so far (the subtree mutation island evolution uses,
:func:`derl_bench.meta.evolve.mutate`). Found through ``DERL_BENCH_METHOD_PATH``
(``tests.meta.methods_ext.hill_climb:METHOD``) or an entry point of the group
``derl_bench.methods``; nothing in derl_bench names it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from derl_bench.meta.evolve import mutate
from derl_bench.meta.methods import Method
from derl_bench.meta.search import Proposal, Proposer
from derl_bench.reward import random_expression

GROUP = "RL, hill-climbed reward"


class HillClimb:
    """Mutations of the best reward so far (grammar draws until one is scored)."""

    def __init__(self, domain: str, seed: int = 0, max_depth: int = 3) -> None:
        self.domain = domain
        self.rng = random.Random(seed)
        self.max_depth = max_depth
        self.best: tuple[str, float] | None = None

    def propose(self, n: int) -> list[Proposal]:
        if self.best is None:
            return [Proposal(random_expression(self.rng, self.domain, max_depth=self.max_depth),
                             "random") for _ in range(n)]
        parent = self.best[0]
        return [Proposal(mutate(parent, self.domain, self.rng, max_depth=self.max_depth),
                         "mutation", (parent,)) for _ in range(n)]

    def observe(self, proposals: Sequence[Proposal], scores: Sequence[float]) -> None:
        for proposal, score in zip(proposals, scores, strict=True):
            if self.best is None or score > self.best[1]:
                self.best = (proposal.expr, float(score))

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "best": self.best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        best = state["best"]
        self.best = (str(best[0]), float(best[1])) if best is not None else None


def hill_climb(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    return HillClimb(env_id, recipe.seed, recipe.max_depth)


METHOD = Method(
    name="hill-climb",
    summary="greedy hill-climbing: mutations of the best reward so far",
    proposer=hill_climb,
    settings=("max_depth",),
    group=GROUP,
)
