"""How well the searching teacher (``derl_bench/families/alfworld/teacher.py``) plays ALFWorld.

Plays every game of the L0 and L1 eval splits (valid_seen, valid_unseen) through
``gymnasium.make("derl/ALFWorld-v0", ..., teacher=True)`` under the card's 30-step cap, once
with the teacher alone and once DAgger-style: at each step, with probability ``--detour``
(seeded), a random admissible command runs instead of the teacher's, and the teacher labels
the state that follows. Prints wins per level and task type and the mean steps of won games,
and writes them as JSON. Usage::

    DERL_BENCH_DATA=/path/to/data python leaderboards/alfworld/study/teacher.py [--out teacher.json]
        [--levels L0 L1] [--detour 0.2] [--seed 0] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import gymnasium as gym

import derl_bench  # noqa: F401  (registers the envs)


def play(env: gym.Env[str, str], index: int, detour: float, rng: random.Random) -> dict[str, Any]:
    """One game: the teacher's commands, each replaced by a random admissible one with
    probability ``detour``."""
    _, info = env.reset(options={"index": index})
    steps, won, labels_ok = 0, False, True
    done = False
    while not done:
        label = info["teacher_action"]
        labels_ok &= label in info["admissible_commands"]
        command = rng.choice(info["admissible_commands"]) if rng.random() < detour else label
        _, _, terminated, truncated, info = env.step(command)
        steps += 1
        won = bool(info["won"])
        done = terminated or truncated
    return {"game": info["game_id"], "task_type": info["task_type"], "won": won,
            "steps": steps, "labels_admissible": labels_ok}


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        by_type[r["task_type"]].append(r)

    def block(rows: list[dict[str, Any]]) -> dict[str, Any]:
        won = [r["steps"] for r in rows if r["won"]]
        return {"games": len(rows), "wins": len(won),
                "win_rate": round(len(won) / len(rows), 4) if rows else 0.0,
                "mean_steps_won": round(sum(won) / len(won), 2) if won else None}

    return {**block(results), "by_type": {t: block(rows) for t, rows in sorted(by_type.items())},
            "labels_admissible": all(r["labels_admissible"] for r in results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", nargs="+", default=["L0", "L1"])
    parser.add_argument("--detour", type=float, default=0.2,
                        help="probability of a random admissible command per step (DAgger run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="only the first N games")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--failures", action="store_true", help="list the games lost")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"max_episode_steps": 30, "detour": args.detour, "seed": args.seed}
    start = time.perf_counter()
    for level in args.levels:
        env = gym.make("derl/ALFWorld-v0", level=level, split="eval", teacher=True)
        count = len(env.unwrapped.game_ids)
        indices = range(count if args.limit is None else min(count, args.limit))
        runs = {"teacher": 0.0, "detour": args.detour}
        report[level] = {}
        try:
            for name, detour in runs.items():
                rng = random.Random(f"{args.seed}-{level}")
                results = [play(env, i, detour, rng) for i in indices]
                summary = summarise(results)
                report[level][name] = summary
                print(f"{level} {name:8s} wins {summary['wins']}/{summary['games']} "
                      f"({summary['win_rate']:.1%}), mean steps when won "
                      f"{summary['mean_steps_won']}")
                for task, row in summary["by_type"].items():
                    print(f"    {task:32s} {row['wins']:3d}/{row['games']:3d}  "
                          f"steps {row['mean_steps_won']}")
                if args.failures:
                    for r in results:
                        if not r["won"]:
                            print("    lost", r["game"])
        finally:
            env.close()
    report["seconds"] = round(time.perf_counter() - start, 1)
    print(f"{report['seconds']} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
