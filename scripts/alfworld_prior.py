"""Recompute ``derl_bench/families/alfworld/receptacle_prior.json``, the search teacher's prior.

For every game of ALFWorld's ``train`` split (the PDDL initial state of its ``game.tw-pddl``)
it counts how often an object of each type starts in a receptacle of each type, how many
receptacles of each type the games have, and what fraction of each type opens (some cabinets
are open shelves). Only the train
split is read: the eval games (valid_seen, valid_unseen) never shape the teacher. Usage::

    DERL_BENCH_DATA=/path/to/data python scripts/alfworld_prior.py          # rewrite the file
    DERL_BENCH_DATA=/path/to/data python scripts/alfworld_prior.py --check  # exit 1 if stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

from derl_bench.families.alfworld import games as games_mod
from derl_bench.families.alfworld.teacher import PRIOR_PATH

_ATOM = re.compile(
    r"\((inReceptacle|objectType|receptacleType|openable)\s+([^\s()]+)(?:\s+([^\s()]+))?\)")


def _type_name(pddl_type: str) -> str:
    """``CounterTopType`` -> ``countertop`` (the word the game's text uses)."""
    return pddl_type.removesuffix("Type").lower()


def count_game(problem: str) -> tuple[Counter[tuple[str, str]], Counter[str], Counter[str]]:
    """One game's (object type, receptacle type) pairs, receptacles and openable receptacles
    per type."""
    init = problem[problem.find("(:init"):problem.find("(:goal")]
    object_type: dict[str, str] = {}
    receptacle_type: dict[str, str] = {}
    placed: list[tuple[str, str]] = []
    openable: set[str] = set()
    for predicate, first, second in _ATOM.findall(init):
        if predicate == "objectType":
            object_type[first] = _type_name(second)
        elif predicate == "receptacleType":
            receptacle_type[first] = _type_name(second)
        elif predicate == "inReceptacle":
            placed.append((first, second))
        else:
            openable.add(first)
    pairs = Counter((object_type[o], receptacle_type[r]) for o, r in placed
                    if o in object_type and r in receptacle_type)
    return (pairs, Counter(receptacle_type.values()),
            Counter(receptacle_type[r] for r in openable if r in receptacle_type))


def compute(root: Path | None = None) -> dict[str, object]:
    """The prior over the data root's train games (see the module docstring)."""
    pairs: Counter[tuple[str, str]] = Counter()
    receptacles: Counter[str] = Counter()
    openable: Counter[str] = Counter()
    game_ids = games_mod.discover_games("train", root)
    for game_id in game_ids:
        with open(games_mod.game_path(game_id, root), encoding="utf-8") as fh:
            problem = json.load(fh)["pddl_problem"]
        game_pairs, game_receptacles, game_openable = count_game(problem)
        pairs.update(game_pairs)
        receptacles.update(game_receptacles)
        openable.update(game_openable)
    objects: dict[str, dict[str, int]] = defaultdict(dict)
    for (obj, recep), count in sorted(pairs.items()):
        objects[obj][recep] = count
    return {
        "source": "alfworld json_2.1.1 train split, PDDL initial states "
                  "(scripts/alfworld_prior.py)",
        "games": len(game_ids),
        "receptacles": dict(sorted(receptacles.items())),
        "openable": {r: round(openable[r] / receptacles[r], 4) for r in sorted(openable)},
        "objects": dict(sorted(objects.items())),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed file instead of writing it")
    parser.add_argument("--out", type=Path, default=PRIOR_PATH)
    args = parser.parse_args(argv)
    text = json.dumps(compute(), indent=1, sort_keys=False) + "\n"
    if args.check:
        same = args.out.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{args.out} is stale")
        return 0 if same else 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
