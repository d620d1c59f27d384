"""Re-scoring rewards on fresh inner seeds: the reward a method picks and the mechanism
endpoint, without the winner's curse.

A search's validation scores are single noisy runs, and it keeps the rewards whose one run
scored high: its best run is biased upward (outcome itself produced a 97% run on DigitsHack),
and a proposal that repeats an earlier reward keeps that reward's first, selected score. Training
a reward again on inner seeds no search slot used (:func:`rescore_seeds`, the same for every
method and search seed: common random numbers) gives it an unbiased score, the mean of its
fresh runs. Two uses, both on the proxy board (:mod:`derl_bench.experiments.proxy.run`) and in
``scripts/rescore_proposals.py``:

- **the pick** (:func:`top_rewards`, :func:`pick`): a method's ``k`` best distinct rewards by
  validation are re-scored, and the one with the best fresh mean is its final reward;
- **the mechanism** (:func:`fresh_endpoint`): the proposals of the late generations counted at
  their reward's fresh score, repeats included at that value.

    >>> cands = [{"generation": 0, "expr": "a", "status": "scored", "score": 0.9},
    ...          {"generation": 0, "expr": "b", "status": "scored", "score": 0.5},
    ...          {"generation": 1, "expr": "a", "status": "scored", "score": 0.9, "repeat": True},
    ...          {"generation": 1, "expr": "c", "status": "failed", "score": None}]
    >>> [r["expr"] for r in top_rewards(cands, 3)]
    ['a', 'b']
    >>> pick(top_rewards(cands, 3), {"a": 0.6, "b": 0.7})
    'b'
    >>> fresh_endpoint(cands, range(0, 2), {"a": 0.6, "b": 0.7})
    0.625
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

RESCORE_OFFSET = 5_000
"""Where the re-scoring's fresh seeds start (other experiments use lower offsets)."""

RESCORE_SEEDS = 3
"""Fresh seeds per re-scored reward, by default."""

PICK_RULES = ("rescore", "best-run")
"""How a method's final reward is picked: its best few re-scored on fresh seeds, or (the rule of
boards made before re-scoring) its single best validation run."""


def rescore_seeds(count: int = RESCORE_SEEDS) -> list[int]:
    """The inner seeds every reward is re-scored on.

    >>> rescore_seeds(2) == rescore_seeds(3)[:2]
    True
    """
    from derl_bench.meta.search import fresh_seeds

    return fresh_seeds(count, RESCORE_OFFSET)


def top_rewards(candidates: Iterable[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The ``k`` best distinct rewards of a search by validation score (a reward's first,
    non-repeated run; ties in proposal order): ``[{"expr", "validation"}]``."""
    best: dict[str, float] = {}
    for c in candidates:
        if c.get("status") == "scored" and not c.get("repeat") and c.get("score") is not None:
            best.setdefault(c["expr"], float(c["score"]))
            best[c["expr"]] = max(best[c["expr"]], float(c["score"]))
    ranked = sorted(best.items(), key=lambda item: -item[1])[:k]
    return [{"expr": expr, "validation": score} for expr, score in ranked]


def pick(top: Sequence[dict[str, Any]], fresh: dict[str, float]) -> str:
    """The reward of ``top`` (:func:`top_rewards`) with the best fresh mean; a tie goes to the
    one with the better validation score."""
    if not top:
        raise ValueError("nothing to pick from: no reward of the search was scored")
    return max(enumerate(top), key=lambda item: (fresh[item[1]["expr"]], -item[0]))[1]["expr"]


def late_rewards(candidates: Iterable[dict[str, Any]], generations: Iterable[int]) -> list[str]:
    """The distinct rewards scored in ``generations``, in proposal order."""
    wanted = set(generations)
    return list(dict.fromkeys(c["expr"] for c in candidates
                              if c["generation"] in wanted and c.get("status") == "scored"))


def fresh_endpoint(candidates: Sequence[dict[str, Any]], generations: Iterable[int],
                   fresh: dict[str, float]) -> float:
    """The mechanism endpoint with every scored proposal at its reward's fresh score (a repeat
    at its reward's, not at the first run's): per generation the mean over the proposals that
    ran (a failed run has no score; an invalid or constant one keeps its fixed score), as the
    meta loop's ``mean_score``; then the mean over ``generations``."""
    means = []
    for g in generations:
        ran = [c for c in candidates if c["generation"] == g and c.get("score") is not None]
        values = [fresh[c["expr"]] if c["status"] == "scored" else float(c["score"])
                  for c in ran]
        means.append(sum(values) / len(values) if values else 0.0)
    if not means:
        raise ValueError("no generation to average")
    return round(sum(means) / len(means), 6)


__all__ = ["PICK_RULES", "RESCORE_OFFSET", "RESCORE_SEEDS", "fresh_endpoint", "late_rewards",
           "pick", "rescore_seeds", "top_rewards"]
