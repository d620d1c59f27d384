"""Black-box search over Meta-Rewards: the random-search and REvolve-style baselines.

A *proposer* writes a generation of Meta-Rewards and learns from their validation scores::

    proposals = proposer.propose(4)
    proposer.observe(proposals, scores)

:class:`RandomSearch` draws every expression from the grammar. :class:`IslandEvolution` keeps
several islands of scored expressions; children come from crossover (the second parent is the
island member that best combines a high score with a large edit distance from the first, the
REvolve recipe for keeping diversity) or from subtree mutation, and every ``migrate_every``
generations each island's best replaces the next island's worst.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from derl_bench.meta.evolve import crossover, mutate
from derl_bench.reward import PrimitiveSet, distance, random_expression

SEED_STRIDE = 100_000
"""Inner seeds of one run seed: ``seed * SEED_STRIDE`` onwards, one per candidate slot."""


def slot_seed(seed: int, slot: int) -> int:
    """The inner seed of candidate number ``slot`` (``generation * population + index``) of a
    search run with seed ``seed``: the same for every method (common random numbers).

    >>> slot_seed(2, 9)
    200009
    """
    return seed * SEED_STRIDE + slot


FRESH_BASE = 1_000_000_000
"""Fresh inner seeds start here: above every slot seed of run seeds below
``FRESH_BASE // SEED_STRIDE`` (10,000), so a re-score never repeats a search slot's noise."""


def fresh_seeds(count: int, offset: int = 0) -> list[int]:
    """``count`` inner seeds that no search slot uses (:data:`FRESH_BASE` onwards), for
    re-scoring a reward on noise independent of the run that found it.

    >>> fresh_seeds(3)
    [1000000000, 1000000001, 1000000002]
    """
    if count < 0 or offset < 0:
        raise ValueError("fresh_seeds needs count >= 0 and offset >= 0")
    return [FRESH_BASE + offset + i for i in range(count)]


@dataclass
class Proposal:
    """A Meta-Reward to try, and where it came from."""

    expr: str
    origin: str
    parents: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON and checkpoint safe)."""
        return {"expr": self.expr, "origin": self.origin, "parents": list(self.parents),
                "extra": dict(self.extra)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Proposal:
        return cls(data["expr"], data["origin"], tuple(data["parents"]), dict(data["extra"]))


def _as_random_state(state: Any) -> tuple:
    """``random.Random.setstate`` wants tuples where a round trip through storage gave lists."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


class Proposer(Protocol):
    """What the meta loop asks of every search method."""

    def propose(self, n: int) -> list[Proposal]:
        """The next generation: ``n`` Meta-Rewards."""
        ...

    def observe(self, proposals: Sequence[Proposal],
                scores: Sequence[float]) -> dict[str, float] | None:
        """Learn from the validation scores of the proposals that ran; statistics, if any."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to propose as this one would."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class LearningProposer(Proposer, Protocol):
    """A proposer that is a model trained by the scores (DERL's Meta-Optimizer)."""

    def observe(self, proposals: Sequence[Proposal], scores: Sequence[float],
                valid: Sequence[bool] | None = None) -> dict[str, float]:
        """One update; ``valid`` says which proposals are valid rewards."""
        ...

    def save(self, path: str | Path) -> None:
        """Write the trained model."""
        ...


class FixedReward:
    """A hand-made Meta-Reward at the search methods' budget: the same expression every time,
    each inner run with its own seed (its slot's, :func:`slot_seed`: the seed a search
    method's candidate in that slot trains with), so the best of ``n`` runs is chosen by
    validation exactly as a search method chooses its best candidate (a compute-matched
    baseline)."""

    def __init__(self, expr: str, seed: int = 0) -> None:
        self.expr = expr
        self.seed = seed
        self.drawn = 0

    def propose(self, n: int) -> list[Proposal]:
        proposals = [Proposal(self.expr, "fixed", extra={"inner_seed": slot_seed(self.seed, k)})
                     for k in range(self.drawn, self.drawn + n)]
        self.drawn += n
        return proposals

    def observe(self, proposals: Sequence[Proposal], scores: Sequence[float]) -> None:
        """A fixed reward learns nothing."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to propose as this one would."""
        return {"drawn": self.drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.drawn = int(state["drawn"])


class RandomSearch:
    """Uniform draws from the grammar (seeded), over every primitive of ``domain`` or over
    ``primitives`` only (an alias whose text reads another primitive is left out too)."""

    def __init__(self, domain: str | PrimitiveSet, seed: int = 0, max_depth: int = 3,
                 primitives: Sequence[str] | None = None) -> None:
        self.domain = domain
        self.rng = random.Random(seed)
        self.max_depth = max_depth
        self.primitives = None if primitives is None else tuple(primitives)

    def propose(self, n: int) -> list[Proposal]:
        return [Proposal(random_expression(self.rng, self.domain, max_depth=self.max_depth,
                                           primitives=self.primitives), "random")
                for _ in range(n)]

    def observe(self, proposals: Sequence[Proposal], scores: Sequence[float]) -> None:
        """Random search learns nothing."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to propose as this one would."""
        return {"rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(_as_random_state(state["rng"]))


class Neighbourhood(RandomSearch):
    """One-edit neighbours of one reward, ``centre``: each proposal replaces a random subtree
    of it with a fresh random expression (:func:`~derl_bench.meta.evolve.mutate`), so the
    search never strays more than one edit from ``centre``."""

    def __init__(self, domain: str | PrimitiveSet, centre: str, seed: int = 0,
                 max_depth: int = 3) -> None:
        super().__init__(domain, seed, max_depth)
        self.centre = centre

    def propose(self, n: int) -> list[Proposal]:
        return [Proposal(mutate(self.centre, self.domain, self.rng, max_depth=self.max_depth),
                         "neighbour", (self.centre,)) for _ in range(n)]


class PartGiven(RandomSearch):
    """Random search with one part given: each proposal is ``part + R``, ``R`` a fresh random
    expression, so every draw pays ``part`` as its own term and the search looks for what to
    add to it."""

    def __init__(self, domain: str | PrimitiveSet, part: str, seed: int = 0,
                 max_depth: int = 3) -> None:
        super().__init__(domain, seed, max_depth)
        self.part = part

    def propose(self, n: int) -> list[Proposal]:
        return [Proposal(f"{self.part} + "
                         f"({random_expression(self.rng, self.domain, max_depth=self.max_depth)})",
                         "part-given", (self.part,)) for _ in range(n)]


@dataclass
class Member:
    expr: str
    score: float


class IslandEvolution:
    """REvolve-style evolution of Meta-Rewards on ``islands`` islands."""

    def __init__(self, domain: str | PrimitiveSet, seed: int = 0, islands: int = 2,
                 island_size: int = 4, crossover_rate: float = 0.5, migrate_every: int = 2,
                 max_depth: int = 3) -> None:
        if islands < 1 or island_size < 1:
            raise ValueError("islands and island_size must be at least 1")
        self.domain = domain
        self.rng = random.Random(seed)
        self.islands: list[list[Member]] = [[] for _ in range(islands)]
        self.island_size = island_size
        self.crossover_rate = crossover_rate
        self.migrate_every = migrate_every
        self.max_depth = max_depth
        self.generation = 0

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to propose as this one would."""
        return {"rng": self.rng.getstate(), "generation": self.generation,
                "islands": [[(m.expr, m.score) for m in island] for island in self.islands]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(_as_random_state(state["rng"]))
        self.generation = int(state["generation"])
        self.islands = [[Member(expr, float(score)) for expr, score in island]
                         for island in state["islands"]]

    def _tournament(self, island: list[Member]) -> Member:
        a, b = self.rng.choice(island), self.rng.choice(island)
        return a if a.score >= b.score else b

    def _partner(self, island: list[Member], first: Member) -> Member:
        others = [m for m in island if m is not first] or island
        return max(others, key=lambda m: (m.score + 1e-3) * (
            distance(first.expr, m.expr, self.domain) + 1e-3))

    def propose(self, n: int) -> list[Proposal]:
        proposals = []
        for i in range(n):
            index = i % len(self.islands)
            island = self.islands[index]
            if len(island) < 2:
                proposals.append(Proposal(
                    random_expression(self.rng, self.domain, max_depth=self.max_depth),
                    "random", extra={"island": index}))
            elif self.rng.random() < self.crossover_rate:
                first = self._tournament(island)
                second = self._partner(island, first)
                proposals.append(Proposal(
                    crossover(first.expr, second.expr, self.domain, self.rng), "crossover",
                    (first.expr, second.expr), {"island": index}))
            else:
                parent = self._tournament(island)
                proposals.append(Proposal(
                    mutate(parent.expr, self.domain, self.rng, max_depth=self.max_depth),
                    "mutation", (parent.expr,), {"island": index}))
        return proposals

    def observe(self, proposals: Sequence[Proposal], scores: Sequence[float]) -> None:
        for proposal, score in zip(proposals, scores, strict=True):
            island = self.islands[proposal.extra.get("island", 0) % len(self.islands)]
            island.append(Member(proposal.expr, float(score)))
            island.sort(key=lambda m: -m.score)
            del island[self.island_size:]
        self.generation += 1
        if (self.migrate_every and self.generation % self.migrate_every == 0
                and len(self.islands) > 1):
            bests = [island[0] for island in self.islands if island]
            for i, best in enumerate(bests):
                target = self.islands[(i + 1) % len(self.islands)]
                if target and all(m.expr != best.expr for m in target):
                    target[-1] = Member(best.expr, best.score)
                    target.sort(key=lambda m: -m.score)
