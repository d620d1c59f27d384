"""``derl-bench reward``: check a Meta-Reward, or evaluate it over logged primitives.

``--env ID`` checks the expression against the primitives that env declares (its card);
``--domain`` against a historical domain's merged list. Exit status 2 means the expression (or
the trajectory file) was rejected, an unknown primitive included; the typed error, its position
and close names are printed on stderr after ``error:``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from derl_bench.cli._errors import CommandError, require_input
from derl_bench.reward import (
    DOMAINS,
    SEMANTICS,
    compile_reward,
    pad_episodes,
)

TRAJECTORIES_MAX_BYTES = 256 * 2**20
"""The trajectory file is read whole; a log of per-step primitives this large is a mistake."""


def register(subparsers: Any) -> None:
    """Add ``reward check`` and ``reward eval``."""
    parser = subparsers.add_parser("reward", help="check or evaluate Meta-Reward expressions")
    sub = parser.add_subparsers(dest="reward_command", metavar="ACTION", required=True)

    check = sub.add_parser("check", help="print canonical form, hash, structure, primitives")
    _common(check)
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(func=run_check)

    evaluate = sub.add_parser("eval", help="evaluate over logged per-step primitives (JSONL)")
    _common(evaluate)
    evaluate.add_argument(
        "--trajectories",
        type=Path,
        required=True,
        help="JSONL: one episode per line, a list of per-step primitive dicts, or an object "
        "with that list under 'steps'",
    )
    evaluate.add_argument("--per-step", action="store_true", help="also print per-step rewards")
    evaluate.add_argument("--bound", type=float, default=None, help="clip outputs to ±BOUND")
    evaluate.set_defaults(func=run_eval)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("expr", metavar="EXPR", help="the Meta-Reward expression")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--env", metavar="ID",
                        help="an env id: its declared primitives and aliases")
    source.add_argument("--domain", choices=DOMAINS,
                        help="a domain: the merged primitives of its families")
    parser.add_argument(
        "--primitives",
        default=None,
        help="comma-separated known primitive names (default: the env's or the domain's)",
    )
    parser.add_argument("--semantics", choices=SEMANTICS, default="derl",
                        help="derl (default) or derl-official: the released DERL code's "
                        "arithmetic (docs/meta-reward.md)")


def _primitives(args: argparse.Namespace) -> list[str] | None:
    if args.primitives is None:
        return None
    return [p.strip() for p in args.primitives.split(",") if p.strip()]


def run_check(args: argparse.Namespace) -> int:
    """Print the analysis of one expression; a rejected one raises its
    :class:`~derl_bench.reward.MetaRewardError`."""
    reward = compile_reward(args.expr, args.env or args.domain, _primitives(args),
                            semantics=args.semantics)
    s = reward.structure
    report = {
        "canonical": reward.canonical,
        "hash": reward.hash,
        "structure": s.kind,
        "range": [_json_number(s.range[0]), _json_number(s.range[1])],
        "veto_factors": list(s.veto_factors),
        "primitives": list(reward.primitives),
        "aggregations": list(s.aggregations),
        "depth": s.depth,
    }
    if args.json:
        print(json.dumps(report))
        return 0
    for key, value in report.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        print(f"{key:13s} {shown}")
    return 0


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _read_episodes(path: Path) -> list[list[dict[str, Any]]]:
    episodes = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise CommandError(f"{path}:{number}: not JSON ({err.msg})") from None
            except RecursionError:  # the decoder recurses once per nested list or object
                raise CommandError(f"{path}:{number}: nested too deeply to read (an episode "
                                   "is a list of per-step dicts of numbers)") from None
            steps = record.get("steps") if isinstance(record, dict) else record
            if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
                raise CommandError(f"{path}:{number}: expected a list of per-step dicts")
            episodes.append(steps)
    return episodes


def run_eval(args: argparse.Namespace) -> int:
    """Print one JSON line per episode with its reward; a rejected expression or trajectory
    file raises before anything is printed."""
    require_input("--trajectories", args.trajectories, TRAJECTORIES_MAX_BYTES)
    reward = compile_reward(
        args.expr, args.env or args.domain, _primitives(args), bound=args.bound,
        semantics=args.semantics,
    )
    try:
        episodes = _read_episodes(args.trajectories)
    except UnicodeDecodeError as err:
        raise CommandError(f"{args.trajectories} is not UTF-8 text ({err.reason})") from None
    traj, lengths = pad_episodes(episodes, reward.primitives)
    values, invalid = reward.episodic(traj, lengths, return_invalid=True)
    steps = reward.per_step(traj, lengths) if args.per_step else None
    for i, value in enumerate(values):
        row: dict[str, Any] = {"episode": i, "reward": float(value), "steps": int(lengths[i])}
        if invalid[i]:
            row["invalid"] = True
        if steps is not None:
            row["per_step"] = [float(v) for v in steps[i, : lengths[i]]]
        print(json.dumps(row))
    return 0
