"""Diagnostics of an ALFWorld command policy against its teacher, with their numbers.

    python leaderboards/alfworld/study/diagnostics.py agreement runs/base-L0 --level L0
    python leaderboards/alfworld/study/diagnostics.py overfit runs/diag-overfit

``agreement``: the teacher plays every game of the level's eval split (its history forced:
every executed command is the teacher's), and at every state the student's most probable
command is compared with the teacher's: top-1 agreement overall and per command kind (go,
open, close, take, move, heat, cool, clean, use, examine, look, inventory), beside the
student's own greedy success on the same games. On games the student never trained on, the
agreement says how well the teacher's next command can be predicted from the state text by
this model.

``overfit``: a base built on 5 training games only (many updates, no DAgger), then played
greedily on those same 5 games: a student that cannot win the games it was taught on points
at the plumbing (masks, the prompt/command boundary, the loss), not at what it can learn.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

KINDS = ("go", "open", "close", "take", "move", "heat", "cool", "clean", "use", "examine",
         "look", "inventory")


def kind_of(command: str) -> str:
    word = command.split()[0] if command.split() else ""
    return word if word in KINDS else "other"


def agreement(model_dir: str, level: str, limit: int | None = None) -> dict[str, Any]:
    import gymnasium as gym
    import torch

    import derl_bench  # noqa: F401  (registers the envs)
    from derl_bench.families.alfworld.compact_state import CompactState
    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.policies.commands import CommandPolicy
    from derl_bench.rollout.commands import game_count, play
    from derl_bench.sft.dagger import labelled

    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer(model_dir)
    policy = CommandPolicy(model.eval(), tokenizer)
    envs = [gym.make("derl/ALFWorld-v0", level=level, split="eval", teacher=True)
            for _ in range(16)]
    try:
        count = game_count(envs[0])
        games = [{"index": i} for i in range(count if limit is None else min(limit, count))]
        episodes = play(envs, policy, games, CompactState, teacher_share=1.0)
    finally:
        for env in envs:
            env.close()
    from derl_bench.policies.commands import command_log_probs

    steps = labelled(episodes)
    right: dict[str, list[int]] = defaultdict(list)
    with torch.no_grad():
        for start in range(0, len(steps), 64):
            part = steps[start:start + 64]
            for lp, s in zip(command_log_probs(model, [s.ids for s in part], policy.end_id),
                             part, strict=True):
                right[kind_of(s.commands[s.label])].append(int(int(lp.argmax()) == s.label))
    total = [v for vs in right.values() for v in vs]
    return {"model": model_dir, "level": level, "games": len(games), "states": len(total),
            "top1_agreement": sum(total) / len(total),
            "by_kind": {k: {"states": len(v), "top1_agreement": sum(v) / len(v)}
                        for k, v in sorted(right.items())},
            "teacher_success": sum(e.won for e in episodes) / len(episodes)}


def overfit(output: str, games: int = 5, updates: int = 400) -> dict[str, Any]:
    import gymnasium as gym

    import derl_bench  # noqa: F401
    from derl_bench.families.alfworld.compact_state import CompactState
    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.policies.commands import CommandPolicy
    from derl_bench.rollout.commands import play
    from derl_bench.sft.dagger import DaggerConfig, run_dagger

    record = run_dagger(DaggerConfig(output=output, env_id="derl/ALFWorld-v0", pool=games,
                                     bc_games=games, rounds=0, bc_updates=updates,
                                     batch_size=16, detour_share=0.15, envs=games,
                                     num_threads=1))
    model, tokenizer = load_model_and_tokenizer(output)
    policy = CommandPolicy(model.eval(), tokenizer)
    envs = [gym.make("derl/ALFWorld-v0", level="L0", split="train") for _ in range(games)]
    try:
        episodes = play(envs, policy, [{"index": i} for i in record["pool"]], CompactState,
                        greedy=True)
    finally:
        for env in envs:
            env.close()
    return {"games": games, "updates": updates, "won": sum(e.won for e in episodes),
            "loss_last": record["bc"]["loss_last"],
            "task_types": [e.task_type for e in episodes],
            "steps": [e.length for e in episodes]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("agreement")
    a.add_argument("model")
    a.add_argument("--level", default="L0", choices=("L0", "L1", "L2"))
    a.add_argument("--limit", type=int, default=None)
    o = sub.add_parser("overfit")
    o.add_argument("output")
    o.add_argument("--games", type=int, default=5)
    o.add_argument("--updates", type=int, default=400)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args()
    result = (agreement(args.model, args.level, args.limit) if args.command == "agreement"
              else overfit(args.output, args.games, args.updates))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
