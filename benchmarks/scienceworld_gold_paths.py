"""Replay the simulator's gold paths through ``derl/ScienceWorld-v0`` (the acceptance run).

For every one of the 30 tasks, take the first ``--per-split`` variations of each of the
simulator's train, dev and test sets, reset the env to that (task, variation), ask it for the
gold path and replay it with no step cap; every episode must end in success (completed with
score 100). Prints one line per task and a summary; exits 1 if any episode fails.

    python benchmarks/scienceworld_gold_paths.py --per-split 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from derl_bench.families.scienceworld import ScienceWorldEnv
from derl_bench.families.scienceworld.splits import simulator_variations


def replay(env: ScienceWorldEnv, task: str, variation: int) -> dict[str, object]:
    env.reset(options={"task": task, "variation": variation})
    gold = env.gold_path()
    info: dict[str, object] = {}
    steps = 0
    for steps, action in enumerate(gold, start=1):  # noqa: B007 - steps is read after the loop
        _, _, terminated, _, info = env.step(action)
        if terminated:
            break
    return {"task": task, "variation": variation, "gold_len": len(gold), "steps": steps,
            "score": info.get("score"), "success": bool(info.get("success"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-split", type=int, default=3)
    parser.add_argument("--tasks", nargs="*", help="only these tasks (default: all 30)")
    parser.add_argument("--json", help="write every episode's result here")
    args = parser.parse_args()

    env = ScienceWorldEnv()  # the bare env has no step cap
    start = time.perf_counter()
    variations = simulator_variations(env.simulator)
    results = []
    for task in sorted(args.tasks or variations):
        rows = [replay(env, task, v) for part in ("train", "dev", "test")
                for v in variations[task][part][: args.per_split]]
        results.extend(rows)
        ok = sum(r["success"] for r in rows)
        failed = [(r["variation"], r["score"]) for r in rows if not r["success"]]
        print(f"{task:50s} {ok}/{len(rows)} success" + (f"  FAILED {failed}" if failed else ""),
              flush=True)
    env.close()
    ok = sum(r["success"] for r in results)
    tasks_ok = len({r["task"] for r in results if r["success"]})
    print(f"gold paths: {ok}/{len(results)} episodes succeed, {tasks_ok} tasks with a success, "
          f"{time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
