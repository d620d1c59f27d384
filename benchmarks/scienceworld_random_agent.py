"""Random-valid-action baseline on each level's eval set of ``derl/ScienceWorld-v0``.

For each level, sample ``--episodes`` (task, variation) pairs of the eval split with a fixed
seed; in each episode pick a uniformly random action from the simulator's valid actions at
every step until the episode ends or hits the 30-step cap. Prints the success rate, mean
score (0..100, failures counted as 0) and failure rate per level.

    python benchmarks/scienceworld_random_agent.py --episodes 100 --seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from gymnasium.wrappers import TimeLimit

from derl_bench.families.scienceworld import ScienceWorldEnv


def run_episode(env: TimeLimit, options: dict, rng: np.random.Generator) -> dict:
    env.reset(options=options)
    actions: list[str] = []
    info: dict = {}
    while True:
        valid = env.unwrapped.valid_actions()
        action = valid[int(rng.integers(len(valid)))]
        actions.append(action)
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return {**options, "actions": actions, "score": info["score"],
            "success": bool(info["success"]), "failed": bool(info["failed"])}


def evaluate(level: str, episodes: int, seed: int, max_steps: int) -> dict:
    env = TimeLimit(ScienceWorldEnv(level=level, split="eval"), max_steps)
    rng = np.random.default_rng(seed)
    pairs = env.unwrapped.pairs
    picks = rng.choice(len(pairs), size=min(episodes, len(pairs)), replace=False)
    rows = [run_episode(env, {"task": pairs[i][0], "variation": pairs[i][1]}, rng)
            for i in sorted(picks)]
    env.close()
    return {
        "level": level,
        "episodes": len(rows),
        "success_rate": float(np.mean([r["success"] for r in rows])),
        "mean_score": float(np.mean([max(0, r["score"]) for r in rows])),
        "failure_rate": float(np.mean([r["failed"] for r in rows])),
        "rows": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--levels", nargs="*", default=["L0", "L1", "L2"])
    parser.add_argument("--json", help="write per-episode results here")
    args = parser.parse_args()
    results = []
    for level in args.levels:
        start = time.perf_counter()
        result = evaluate(level, args.episodes, args.seed, args.max_steps)
        results.append(result)
        print(f"{level} eval: {result['episodes']} episodes, success {result['success_rate']:.1%}, "
              f"mean score {result['mean_score']:.1f}/100, failed {result['failure_rate']:.1%} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
