"""Full ALFWorld acceptance run: walkthrough replays and random-admissible success rates.

    python benchmarks/alfworld_replay.py                  # everything below (about 10-20 min)
    python benchmarks/alfworld_replay.py --skip-random    # replays only
    python benchmarks/alfworld_replay.py --out runs/alfworld_replay.json

Replays the expert walkthrough of every game of valid_seen (140) and valid_unseen (134) and of a
seeded sample of train games (200), checking each wins exactly on its last command with
goal_progress 1.0 exactly at the win. Then plays a seeded uniformly random admissible agent on
the full L0/L1/L2 eval splits with the protocol's 30-step cap and reports the success rates.
Needs a data root (DERL_BENCH_DATA). CI runs a fixed sample of the same checks
(tests/envs/test_alfworld_replay.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from gymnasium.wrappers import TimeLimit

from derl_bench.families.alfworld import ALFWorldEnv, games


@dataclass
class ReplayResult:
    """The outcome of replaying one game's expert walkthrough."""

    game_id: str
    won: bool
    steps: int
    walkthrough_length: int
    progress: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def replay_walkthrough(env: ALFWorldEnv, game_id: str) -> ReplayResult:
    """Play ``game_id``'s walkthrough and check: every command is admissible, the game is won
    on the last command and not before, ``goal_progress`` is 1.0 exactly at the win and never
    above it."""
    env = env.unwrapped
    _, info = env.reset(options={"game": game_id})
    walkthrough = list(info["walkthrough"])
    result = ReplayResult(game_id, False, 0, len(walkthrough), [env.goal_progress()])
    terminated = truncated = False
    for i, command in enumerate(walkthrough):
        if command not in info["admissible_commands"]:
            result.problems.append(f"step {i + 1}: {command!r} is not admissible")
        _, reward, terminated, truncated, info = env.step(command)
        result.steps += 1
        progress = env.goal_progress()
        result.progress.append(progress)
        if progress > 1.0:
            result.problems.append(f"step {i + 1}: goal_progress {progress} > 1")
        if (progress == 1.0) != bool(info["won"]):
            result.problems.append(f"step {i + 1}: goal_progress {progress} but won={info['won']}")
        if terminated or truncated:
            break
    result.won = bool(terminated and info["won"])
    if not result.won:
        result.problems.append("walkthrough did not win" + (" (truncated)" if truncated else ""))
    elif result.steps != len(walkthrough):
        result.problems.append(f"won after {result.steps} of {len(walkthrough)} commands")
    return result


def random_admissible_episode(env: TimeLimit, game_id: str, seed: int) -> bool:
    """Play ``game_id`` with uniformly random admissible commands (seeded) until it is won or
    ``env``'s step cap ends it; return whether won."""
    rng = random.Random(seed)
    _, info = env.reset(options={"game": game_id})
    while True:
        _, _, terminated, truncated, info = env.step(rng.choice(info["admissible_commands"]))
        if terminated or truncated:
            return bool(terminated)


def replay_all(train_sample: int, seed: int) -> dict:
    env = ALFWorldEnv(level="L0", split="eval")
    train = games.discover_games("train")
    picked = {
        "valid_seen": games.discover_games("valid_seen"),
        "valid_unseen": games.discover_games("valid_unseen"),
        f"train_sample_{train_sample}_seed_{seed}": sorted(
            random.Random(seed).sample(train, train_sample)
        ),
    }
    report = {}
    try:
        for name, game_ids in picked.items():
            start = time.perf_counter()
            results = [replay_walkthrough(env, g) for g in game_ids]
            failures = [{"game": r.game_id, "problems": r.problems} for r in results if not r.ok]
            report[name] = {
                "games": len(results),
                "won": sum(r.won for r in results),
                "ok": sum(r.ok for r in results),
                "failures": failures,
                "seconds": round(time.perf_counter() - start, 1),
            }
            print(f"replay {name}: {report[name]['ok']}/{len(results)} ok "
                  f"({report[name]['seconds']} s)", flush=True)
    finally:
        env.close()
    return report


def random_agent(seed: int, max_steps: int) -> dict:
    report = {}
    for level in games.LEVELS:
        env = TimeLimit(ALFWorldEnv(level=level, split="eval"), max_steps)
        try:
            start = time.perf_counter()
            game_ids = games.level_games(level, "eval")
            wins = [random_admissible_episode(env, g, seed + i) for i, g in enumerate(game_ids)]
        finally:
            env.close()
        report[level] = {
            "games": len(wins),
            "won": sum(wins),
            "success_rate": round(sum(wins) / len(wins), 4),
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(f"random-admissible {level} eval: {sum(wins)}/{len(wins)} = "
              f"{report[level]['success_rate']:.3f}", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-sample", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--skip-replay", action="store_true")
    parser.add_argument("--skip-random", action="store_true")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)
    report: dict = {"seed": args.seed}
    if not args.skip_replay:
        report["replay"] = replay_all(args.train_sample, args.seed)
    if not args.skip_random:
        report["random_admissible"] = random_agent(args.seed, args.max_steps)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    failed = any(part["failures"] for part in report.get("replay", {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
