"""Plan a task's board from its check-2 evidence: random search's hit rate at a budget, the
spread of the reward it picks, and the seeds a paired comparison needs.

    python scripts/plan_board.py leaderboards/digitsbalance/evidence/landscape.json \\
        --budget 32 --family 5

A board is stated before it runs (docs/tasks.md): its budget and seeds come from what the
checks measured, not from its own results. This reads the landscape's raw draws (``drawn``:
every behaviour class with how many draws fell in it, and the constant draws) and the scores
each class earned, and simulates the ``random`` method at ``--budget`` proposals per search seed
as the board runs it:

- every draw costs a slot; a constant draw is not trained, a repeat of a class spends no run;
- each trained class shows one noisy validation score (its mean over the landscape's seeds plus
  normal noise of the pooled per-seed SD of the confirmed rewards);
- the pick (``rescore``): the 3 best by validation, each re-scored as the mean of 3 fresh runs,
  the best re-scored; the primary endpoint is the picked reward's mean over 3 more runs.

It prints the chance that ``--budget`` draws hold at least one reward better than every
hand-made one (from the landscape's share, ``1 - (1 - p)^B``), the picked reward's mean and SD
over search seeds, and the MDE of a paired difference between two methods at each number of
seeds: two-sided, 80% power, at the 5% / ``--family`` level (Holm's first step over the
primary family), the two methods taken as independent with random search's spread (common
random numbers only narrow it). What a learning method's spread will be is not known before
its run; the plan assumes random search's. Seeded: the same evidence prints the same plan.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path
from typing import Any

from derl_bench.experiments.stats import mean_sd, t_quantile

PICK_TOP = 3
RESCORE_RUNS = 3
RETRAIN_RUNS = 3


def classes(landscape: dict[str, Any]) -> tuple[list[tuple[str, float, int]], int, float]:
    """The raw-draw population: (class, mean score over every seed it was trained on, draws),
    the number of constant draws, and the pooled per-seed SD of the confirmed rewards."""
    confirmed = {row["expr"]: row["scores"] for row in landscape["confirm"]}
    population = []
    for row in landscape["random"]:
        scores = list(row["scores"]) + list(confirmed.get(row["expr"], []))
        weight = int(landscape["drawn"]["weights"][row["expr"]])
        population.append((row["expr"], sum(scores) / len(scores), weight))
    pooled = [mean_sd(s)[1] ** 2 for s in confirmed.values() if len(s) > 1]
    return population, int(landscape["drawn"]["constant"]), math.sqrt(sum(pooled) / len(pooled))


def simulate(population: list[tuple[str, float, int]], constant: int, sd: float, budget: int,
             searches: int, seed: int = 0) -> list[float]:
    """The true score of the reward random search picks, one per simulated search seed."""
    rng = random.Random(seed)
    names = [None, *(name for name, _, _ in population)]
    weights = [constant, *(w for _, _, w in population)]
    true = {name: score for name, score, _ in population}
    picked = []
    for _ in range(searches):
        drawn = {n for n in rng.choices(names, weights=weights, k=budget) if n is not None}
        if not drawn:
            picked.append(min(true.values()))
            continue
        seen = sorted(drawn, key=lambda n: true[n] + rng.gauss(0.0, sd), reverse=True)
        rescored = {n: true[n] + rng.gauss(0.0, sd / math.sqrt(RESCORE_RUNS))
                    for n in seen[:PICK_TOP]}
        picked.append(true[max(rescored, key=rescored.__getitem__)])
    return picked


def mde(sd_difference: float, seeds: int, family: int, power: float = 0.8) -> float:
    """The MDE of a paired difference over ``seeds`` seeds at the 5% / ``family`` level."""
    return (t_quantile(1 - 0.025 / family, seeds - 1) + t_quantile(power, seeds - 1)) * \
        sd_difference / math.sqrt(seeds)


def plan(landscape: dict[str, Any], budget: int, family: int, searches: int = 20000,
         seed: int = 0) -> dict[str, Any]:
    """Every figure the script prints, as a dict."""
    population, constant, sd = classes(landscape)
    share = float(landscape["better_each_share"]["share"])
    picked = simulate(population, constant, sd, budget, searches, seed)
    mean, spread = mean_sd(picked)
    # per search seed: the picked reward's true score plus the retrain mean's noise
    per_seed = math.sqrt(spread ** 2 + sd ** 2 / RETRAIN_RUNS)
    difference = math.sqrt(2.0) * per_seed
    return {"budget": budget, "share": share, "hit_rate": 1 - (1 - share) ** budget,
            "run_sd": sd, "picked_mean": mean, "picked_sd": spread, "per_seed_sd": per_seed,
            "mde": {n: mde(difference, n, family) for n in range(3, 13)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("landscape", type=Path)
    parser.add_argument("--budget", type=int, default=32, help="proposals per search seed")
    parser.add_argument("--family", type=int, default=5,
                        help="comparisons in the primary Holm family (default 5)")
    parser.add_argument("--searches", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = plan(json.loads(args.landscape.read_text()), args.budget, args.family,
                 args.searches, args.seed)
    print(f"budget {found['budget']}: share of winning draws {100 * found['share']:.1f}%, "
          f"chance of at least one winner {100 * found['hit_rate']:.0f}%")
    print(f"one run's SD {100 * found['run_sd']:.1f} points; random search's picked reward "
          f"{100 * found['picked_mean']:.1f} ± {100 * found['picked_sd']:.1f} (SD over search "
          f"seeds); per seed with its re-training {100 * found['per_seed_sd']:.1f}")
    print("| seeds | MDE of a paired difference, points |")
    print("|---|---|")
    for n, value in found["mde"].items():
        print(f"| {n} | {100 * value:.1f} |")


if __name__ == "__main__":
    main()
