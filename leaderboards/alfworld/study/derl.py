"""Reward discovery on ALFWorld with the command policy: ``derl``, ``derl-frozen`` and
``random`` from the teacher-taught base, with ALFWorld's own primitives, at the budget stated
in the study's README.md before the runs.

    python leaderboards/alfworld/study/derl.py run --runs runs/alfworld-derl \\
        --base-L0 runs/base-L0 --base-L2 runs/base-L2          # resumable
    python leaderboards/alfworld/study/derl.py report --runs runs/alfworld-derl

``run`` does, for every method and seed, each step once (a finished step is skipped, a
stopped search resumes from its last generation):

1. **search**: ``derl-bench meta``'s loop (:func:`derl_bench.meta.run_meta`) with
   ``inner_commands``: every candidate trains the command policy from the L0 base with the
   board's GRPO recipe (``board.py`` beside this script) and scores its greedy success on
   the first ``validation_games`` games of L0's validation split (``valid_train``, disjoint from
   every eval set);
2. **pick**: the candidate with the highest validation score (the first one on a tie);
3. **re-train** the picked reward on a fresh seed (``RETRAIN_SEED + seed``) from the L0 base
   (records on L0 and L1) and from the L2 base (L2), final weights, greedy on every eval game:
   the records ``<method>-s<seed>-<level>.json`` on the ALFWorld board (``--levels L0``:
   from the L0 base only).

At a committed command recipe instead of the board's 10-step one: ``--recipe
baselines/<file>.yaml`` (the search's inner runs and the re-training), ``--search-set KEY=VALUE``
(what only the search's inner runs change, e.g. ``steps=80``), ``--validation-games N`` and
the budget ``--generations G --population P``, and ``--tag T`` to file its rows beside the
board's first ones as ``<method>-T`` (``derl-weak2l-s0-L0.json``; board.py's ``--tag`` names
the same base's ``grpo-outcome-T`` rows it is compared with); the records cite the recipe file
and the search's settings.

``report`` prints each method's mean over seeds, what each picked, and the paired differences
(derl - derl-frozen, derl - random, each method - grpo-outcome) on L0 and L2, Holm-corrected
together, and writes ``leaderboards/alfworld/evidence/derl-comparison.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import board
from board import ENV_ID, GRPO, LEVELS, QUICK, _record, cited, compare, leg_grpo, named, train_run

BOARD = board.BOARD
EVIDENCE = BOARD / "evidence"
METHODS = ("derl", "derl-frozen", "random")
SEARCH = {"outer_steps": 3, "population": 4}
"""The budget of one search: 3 generations x 4 rewards = 12 inner runs."""
VALIDATION_GAMES = int(GRPO["validation_games"])
"""The validation games each candidate is scored on."""
SEARCH_SET: dict[str, Any] = {}
"""What only the search's inner runs change from the recipe (``--search-set``)."""
QUICK_SEARCH = {"outer_steps": 1, "population": 2}
"""``--quick``: a rehearsal of every code path in minutes (into another ``--board``)."""
RETRAIN_SEED = 100
"""The re-training seed of search seed ``s`` is ``RETRAIN_SEED + s``: a seed no search used
for its inner runs (slots 0-11)."""
RETRAIN_CHECKPOINT = ("final weights after the last GRPO step of the picked reward, re-trained "
                      "on a fresh seed (no selection)")


def search(method: str, seed: int, runs: Path, base_L0: str, workers: int) -> dict[str, Any]:
    """The search of ``method`` and ``seed`` (resumed where it stopped); returns its result."""
    from derl_bench.meta import MetaConfig, run_meta

    out = runs / f"{method}-s{seed}" / "search"
    result_file = out.parent / "search.json"
    if result_file.exists():
        return json.loads(result_file.read_text())
    recipe = {k: v for k, v in {**GRPO, **SEARCH_SET}.items() if k != "validation_games"}
    config = MetaConfig(
        name=f"{method}-s{seed}", method=method, seed=seed, **SEARCH,
        validation_episodes=VALIDATION_GAMES, eval_levels=[], progress=False,
        inner={"env_id": ENV_ID, "model": str(Path(base_L0).resolve()),
               "level": "L0", "tensorboard": False},
        inner_commands=recipe, executor="local" if workers == 1 else "ray", workers=workers,
        output_dir=str(out))
    resume = (out / "config.yaml").exists()
    result = run_meta(config, resume=resume)
    scored = [c for c in result.candidates if c.get("status") == "scored"]
    summary = {"method": method, "seed": seed, "budget": SEARCH,
               **cited({"search_set": SEARCH_SET, "validation_games": VALIDATION_GAMES}),
               "picked": result.best_expr, "picked_score": result.best_score,
               "candidates": [{k: c.get(k) for k in ("generation", "index", "expr", "status",
                                                     "score", "train_reward", "inner_seed",
                                                     "duplicate_of")}
                              for c in result.candidates],
               "scored": len(scored)}
    result_file.write_text(json.dumps(summary, indent=2) + "\n")
    EVIDENCE.joinpath(f"{named(method)}-s{seed}").mkdir(parents=True, exist_ok=True)
    shutil.copy(result_file, EVIDENCE / f"{named(method)}-s{seed}" / "search.json")
    return summary


def retrain(method: str, seed: int, expr: str, runs: Path, bases: dict[str, str]) -> None:
    """Train ``expr`` on a fresh seed from each base and write its records."""
    from derl_bench.grpo.commands import CommandGRPOConfig

    for base_level, base in bases.items():
        levels = [lv for lv in LEVELS[base_level]
                  if not (BOARD / f"{named(method)}-s{seed}-{lv}.json").exists()]
        if not levels:
            continue
        run_dir = runs / f"{method}-s{seed}" / f"retrain-{base_level}"
        grpo = leg_grpo(base, base_level)
        config = CommandGRPOConfig(model=base, output_dir=str(run_dir), env_id=ENV_ID,
                                   level=base_level, meta_reward=expr, seed=RETRAIN_SEED + seed,
                                   **grpo)
        train_run(config, f"{method}-s{seed} re-train {base_level}")
        evidence = EVIDENCE / f"{named(method)}-s{seed}" / f"retrain-{base_level}"
        evidence.mkdir(parents=True, exist_ok=True)
        for file in ("metrics.jsonl", "result.json"):
            shutil.copy(run_dir / file, evidence / file)
        recipe = cited({**grpo, "base": Path(base).name, "meta_reward": expr,
                        "level": base_level, "seed": RETRAIN_SEED + seed,
                        "search": {"method": method, "seed": seed, **SEARCH,
                                   "search_set": SEARCH_SET,
                                   "validation_games": VALIDATION_GAMES}})
        for level in levels:
            _record(run_dir / "model", level, named(method), seed, RETRAIN_CHECKPOINT, expr,
                    recipe)


def _use_board(folder: str, quick: bool, tag: str) -> None:
    """Write records and evidence under ``folder``, the methods named with ``tag`` (board.py's
    ``--tag``); ``quick``: the rehearsal's sizes."""
    global BOARD, EVIDENCE
    BOARD, EVIDENCE = Path(folder), Path(folder) / "evidence"
    board.BOARD, board.EVIDENCE, board.TAG = BOARD, EVIDENCE, tag
    if quick:
        GRPO.update(QUICK)
        SEARCH.update(QUICK_SEARCH)


def _use_search(args: argparse.Namespace) -> None:
    """The search's settings and budget ``run`` was given (``--quick`` keeps its own)."""
    global VALIDATION_GAMES
    from derl_bench.grpo.config import ConfigError, parse_overrides

    try:
        SEARCH_SET.update(parse_overrides(args.search_set))
    except ConfigError as err:
        raise SystemExit(f"--search-set: {err}") from None
    if not args.quick:
        SEARCH.update(outer_steps=args.generations, population=args.population)
    VALIDATION_GAMES = args.validation_games or int(GRPO.get("validation_games", 0))
    if VALIDATION_GAMES < 1:
        raise SystemExit("a search scores each candidate on validation games: give "
                         "--validation-games N (the recipe plays none)")


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    if args.recipe:
        board.use_recipe(args.recipe)
    _use_board(args.board, args.quick, args.tag)
    _use_search(args)
    runs = Path(args.runs)
    bases = {"L0": str(Path(args.base_L0).resolve()), "L2": str(Path(args.base_L2).resolve())}
    retrained = {level: bases[level] for level in args.levels}
    for seed in args.seeds:
        for method in args.methods:
            found = search(method, seed, runs, bases["L0"], args.workers)
            print(f"{method}-s{seed}: picked {found['picked']!r} (validation "
                  f"{found['picked_score']:.3f})", flush=True)
            if found["picked"] is None:
                print(f"{method}-s{seed}: no candidate scored; nothing to re-train",
                      file=sys.stderr)
                continue
            retrain(method, seed, found["picked"], runs, retrained)
    return 0


def report(args: argparse.Namespace) -> int:
    _use_board(args.board, False, args.tag)
    picks = {}
    for method in args.methods:
        for seed in args.seeds:
            found = EVIDENCE / f"{named(method)}-s{seed}" / "search.json"
            if found.exists():
                data = json.loads(found.read_text())
                picks[f"{named(method)}-s{seed}"] = {"picked": data["picked"],
                                                     "validation": data["picked_score"]}
    for name, pick in picks.items():
        print(f"{name:18s} picked {pick['picked']!r} (validation {pick['validation']:.3f})")
    methods = {named(m): list(args.seeds) for m in (*args.methods, "grpo-outcome")}
    pairs = [(named(a), named(b)) for a, b in (("derl", "derl-frozen"), ("derl", "random"),
                                               *((m, "grpo-outcome") for m in args.methods))]
    compare(methods, pairs, list(args.seeds), f"{named('derl-comparison')}.json",
            {"picks": picks, "budget": SEARCH})
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "report"):
        p = sub.add_parser(name)
        p.add_argument("--runs", default="runs/alfworld-derl")
        p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
        p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
        p.add_argument("--board", default=str(BOARD), help="where the records go")
        p.add_argument("--tag", default="", help="name every method <method>-<tag> (as "
                                                 "board.py --tag names its rows)")
        if name == "run":
            p.add_argument("--base-L0", dest="base_L0", default="runs/base-L0")
            p.add_argument("--base-L2", dest="base_L2", default="runs/base-L2")
            p.add_argument("--workers", type=int, default=2,
                           help="inner runs at once (Ray above 1)")
            p.add_argument("--quick", action="store_true",
                           help="a rehearsal: 1 generation of 2 rewards, GRPO of 1 step")
            p.add_argument("--recipe", help="a baselines/ command recipe for the search's "
                                            "inner runs and the re-training")
            p.add_argument("--search-set", nargs="*", default=[], metavar="KEY=VALUE",
                           help="what only the search's inner runs change from the recipe")
            p.add_argument("--generations", type=int, default=SEARCH["outer_steps"])
            p.add_argument("--population", type=int, default=SEARCH["population"])
            p.add_argument("--levels", nargs="+", choices=("L0", "L2"), default=["L0", "L2"],
                           help="the bases each pick is re-trained from (L0: records on L0 "
                                "and L1; L2: on L2)")
            p.add_argument("--validation-games", type=int,
                           help="validation games per candidate (default: the recipe's)")
    args = parser.parse_args()
    return run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
