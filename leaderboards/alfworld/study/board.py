"""The ALFWorld board's run-here rows of the command policy: the teacher-taught bases, GRPO from
them under each hand-made reward, their L0/L1/L2 records and the comparison of the rewards.

    python leaderboards/alfworld/study/board.py run --runs runs/alfworld-board \\
        --base-L0 runs/base-L0 --base-L2 runs/base-L2          # resumable, 2 workers
    python leaderboards/alfworld/study/board.py report --runs runs/alfworld-board

``run`` does each unit once (a unit whose records exist is skipped, so a stopped run goes on
where it was):

- the bases (``derl-bench model agent-base``, built beforehand): ``teacher-dagger`` on L0 and
  L1 from the L0 base, on L2 from the L2 base (trained on task types 1-4 only);
- for every reward and seed, a GRPO inner run from the L0 base on L0's training games
  (evaluated on L0 and L1) and one from the L2 base on L2's (evaluated on L2).

The recipe (``GRPO``), the rewards and the checkpoint rule are fixed here and stated in
the study's README.md before the runs: the final weights after the last step, no selection.
``--recipe baselines/<file>.yaml`` trains at a committed command recipe instead, which every
record then cites (``recipe_file``), and ``--tag T`` files such rows beside the first ones
(``teacher-dagger-T``, ``grpo-outcome-T``). Each record names its model by its parameters
(``command-lm-633k``).
Every record is a greedy evaluation of every game of the level's eval split. The run folders
(models) stay in ``--runs``; each run's ``metrics.jsonl`` and ``result.json`` are copied to
``leaderboards/alfworld/evidence/`` with the records.

``report`` prints each row's mean and standard deviation over seeds and the rewards' paired
differences on L0 and L2 (by seed), Holm-corrected together, with the MDE, and writes them to
``leaderboards/alfworld/evidence/comparison.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import multiprocessing
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
ENV_ID = "derl/ALFWorld-v0"
BOARD = REPO / "leaderboards" / "alfworld"
EVIDENCE = BOARD / "evidence"
QUICK = {"steps": 1, "games_per_step": 1, "group_size": 2, "pool": 2, "validation_games": 2,
         "envs": 4}
"""``--quick``: a rehearsal of every code path in minutes (into another ``--board``)."""

REWARDS = {
    "outcome": "success",
    "average": "(g1 + g2 + g3 + g4) / 4",
    "progress": "success + sum(goal_progress_delta)",
}
"""The hand-made rewards: outcome; the paper's average of g1..g4; success plus the goal
progress made over the episode (a bare step primitive would read the last step only)."""

GRPO = {"steps": 10, "games_per_step": 4, "group_size": 8, "learning_rate": 5e-5,
        "clip_eps": 0.2, "kl_coef": 0.0, "pool": 200, "validation_games": 32, "envs": 16,
        "num_threads": 1}
"""The inner recipe: 10 steps x 4 games x 8 samples (320 episodes), lr 5e-5, no KL."""

RECIPE_FILE: str | None = None
"""The ``baselines/`` recipe :data:`GRPO` was read from (:func:`use_recipe`), cited by every
record; ``None`` while GRPO is the recipe above."""
RUN_SET = ("name", "trainer", "env_id", "level", "model", "meta_reward", "seed", "output_dir")
"""A recipe's fields that each run sets for itself (its base, level, reward and seed)."""

TAG = ""
"""``--tag``: the rows of another base or recipe, filed beside the board's first ones: every
method is then named ``<method>-<tag>`` (``teacher-dagger-weak2l``, ``grpo-outcome-weak2l``;
``derl.py``'s ``derl-weak2l``)."""
BASE_CHECKPOINT = "final weights of the teacher-taught build (behaviour cloning, then DAgger)"
GRPO_CHECKPOINT = "final weights after the last GRPO step (no selection)"
LEVELS = {"L0": ("L0", "L1"), "L2": ("L2",)}
"""The base a run starts from -> the levels its policy is evaluated on."""


def named(method: str) -> str:
    """``method`` as the records name it (with :data:`TAG`)."""
    return f"{method}-{TAG}" if TAG else method


def model_name(model_dir: Path) -> str:
    """The board's name for the command model in ``model_dir``: its parameters, in thousands
    (``command-lm-633k`` for the four-layer model, ``command-lm-338k`` for two layers)."""
    from safetensors import safe_open

    with safe_open(str(Path(model_dir) / "model.safetensors"), "pt") as weights:
        count = sum(math.prod(weights.get_slice(k).get_shape()) for k in weights.keys())
    return f"command-lm-{count // 1000}k"


def _record(model_dir: Path, level: str, method: str, seed: int, checkpoint: str,
            meta_reward: str | None, recipe: dict[str, Any] | None) -> Path:
    """Evaluate ``model_dir`` on ``level``'s eval games and write its record."""
    from derl_bench.evaluation.commands import evaluate_commands
    from derl_bench.evaluation.record import command_record
    from derl_bench.files import write_json_atomic
    from derl_bench.leaderboard.validate import validate_file

    episodes: list[Any] = []
    result = evaluate_commands(model_dir, level, env=ENV_ID, num_threads=1,
                               episodes_out=episodes)
    record = command_record(result, episodes, method=method, model=model_name(model_dir),
                            model_dir=model_dir,
                            checkpoint=checkpoint, seed=seed, meta_reward=meta_reward,
                            recipe=recipe, level=level, env=ENV_ID)
    path = BOARD / f"{method}-s{seed}-{level}.json"
    write_json_atomic(path, record)
    problems = validate_file(path).problems
    if problems:
        path.unlink()
        raise ValueError(f"{path.name}: {problems}")
    print(f"{path.name}: success {result['success']:.3f} ({result['seconds']:.0f} s)",
          flush=True)
    return path


def _unit(kind: str, runs: str, base: str, base_level: str, reward: str | None,
          seed: int, board: str, quick: bool, recipe: str | None, tag: str) -> list[str]:
    """One unit in a worker process: a base's evaluation, or a GRPO run and its evaluation."""
    import torch

    global BOARD, EVIDENCE, TAG
    BOARD, EVIDENCE, TAG = Path(board), Path(board) / "evidence", tag
    if recipe:  # a spawned worker starts from the module's own recipe
        use_recipe(recipe)
    if quick:
        GRPO.update(QUICK)
    torch.set_num_threads(1)
    if kind == "base":
        done = []
        for level in LEVELS[base_level]:
            if not (BOARD / f"{named('teacher-dagger')}-s{seed}-{level}.json").exists():
                done.append(str(_record(Path(base), level, named("teacher-dagger"), seed,
                                        BASE_CHECKPOINT, None, _base_recipe(base))))
        return done
    from derl_bench.grpo.commands import CommandGRPOConfig

    assert reward is not None
    method = named(f"grpo-{reward}")
    name = f"{method}-s{seed}-{base_level}"
    run_dir = Path(runs) / name
    grpo = leg_grpo(base, base_level)
    config = CommandGRPOConfig(model=base, output_dir=str(run_dir), env_id=ENV_ID,
                               level=base_level, meta_reward=REWARDS[reward], seed=seed, **grpo)
    train_run(config, name)
    evidence = EVIDENCE / name
    evidence.mkdir(parents=True, exist_ok=True)
    for file in ("metrics.jsonl", "result.json"):
        shutil.copy(run_dir / file, evidence / file)
    recipe = cited({**grpo, "base": Path(base).name, "meta_reward": REWARDS[reward],
                    "level": base_level})
    return [str(_record(run_dir / "model", level, method, seed, GRPO_CHECKPOINT,
                        REWARDS[reward], recipe))
            for level in LEVELS[base_level]
            if not (BOARD / f"{method}-s{seed}-{level}.json").exists()]


def leg_grpo(base: str, base_level: str) -> dict[str, Any]:
    """:data:`GRPO` as a run from ``base`` on ``base_level``'s training games trains: the
    recipe's ``pool``, or every training game of the level that the base was not taught on
    where there are fewer. A recipe's pool is chosen for L0's training split (3,553 games);
    L2's, task types 1-4 only, has 2,207. Records cite the pool the run used."""
    from derl_bench.envs.items import split_items
    from derl_bench.family import resolve_family
    from derl_bench.grpo.commands import base_games

    total = len(split_items(resolve_family(ENV_ID), ENV_ID, "train", base_level))
    return {**GRPO, "pool": min(int(GRPO["pool"]), total - len(base_games(base, total)))}


def use_recipe(path: str) -> None:
    """Train every GRPO run at the command recipe in ``path`` (a ``baselines/`` file with
    ``trainer: commands``) instead of the one above; each run sets its own base, level, reward
    and seed. A recipe that is not a command policy's, or whose numbers its config refuses,
    stops the script before anything runs."""
    global RECIPE_FILE
    from derl_bench.grpo.commands import CommandGRPOConfig
    from derl_bench.grpo.config import ConfigError, read_recipe

    try:
        values = read_recipe(path)
    except ConfigError as err:
        raise SystemExit(str(err)) from None
    if values.get("trainer") != "commands":
        raise SystemExit(f"{path}: not a command policy's recipe (trainer: commands)")
    recipe = {k: v for k, v in values.items() if k not in RUN_SET}
    try:
        CommandGRPOConfig(model=str(values.get("model", "")), env_id=ENV_ID, **recipe)
    except (TypeError, ValueError) as err:
        raise SystemExit(f"{path}: {err}") from None
    GRPO.clear()
    GRPO.update(recipe)
    RECIPE_FILE = str(path)


def cited(recipe: dict[str, Any]) -> dict[str, Any]:
    """``recipe`` as a record gives it: with the ``baselines/`` file it was read from."""
    return {**recipe, "recipe_file": RECIPE_FILE} if RECIPE_FILE else recipe


def train_run(config: Any, name: str) -> None:
    """Train ``config`` (a command run) unless its folder holds its result; a run stopped
    part-way continues from its checkpoint when that was written with these settings, and
    anything else in the folder is removed first."""
    from derl_bench.grpo.commands import continues, train_commands

    if (config.run_dir / "result.json").exists():
        return
    resume = continues(config)
    train_commands(config, log=lambda m: print(f"{name}: {m}", flush=True), resume=resume)


def _base_recipe(base: str) -> dict[str, Any]:
    config = json.loads((Path(base) / "dagger.json").read_text())["config"]
    return {k: v for k, v in config.items() if k not in ("output", "data_root")}


def run(args: argparse.Namespace) -> int:
    global BOARD, EVIDENCE, TAG
    BOARD, EVIDENCE, TAG = Path(args.board), Path(args.board) / "evidence", args.tag
    extra = (str(BOARD), args.quick, args.recipe, TAG)
    units: list[tuple] = [("base", args.runs, args.base_L0, "L0", None, 0, *extra),
                          ("base", args.runs, args.base_L2, "L2", None, 0, *extra)]
    for seed in [] if args.only_bases else args.seeds:
        for reward in args.rewards:
            for level, base in (("L0", args.base_L0), ("L2", args.base_L2)):
                units.append(("grpo", args.runs, base, level, reward, seed, *extra))
    if args.levels:
        units = [u for u in units if u[3] in args.levels]
    todo = []
    for unit in units:
        kind, _, _, level, reward, seed = unit[:6]
        method = named("teacher-dagger" if kind == "base" else f"grpo-{reward}")
        if all((BOARD / f"{method}-s{seed}-{lv}.json").exists() for lv in LEVELS[level]):
            continue
        todo.append(unit)
    print(f"{len(todo)} of {len(units)} units to run", flush=True)
    context = multiprocessing.get_context("spawn")
    failed = 0
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        futures = {pool.submit(_unit, *unit): unit for unit in todo}
        for future in concurrent.futures.as_completed(futures):
            try:
                future.result()
            except Exception as err:  # one unit's failure must not lose the others
                failed += 1
                print(f"unit {futures[future]} failed: {err!r}", file=sys.stderr, flush=True)
    return 1 if failed else 0


def success(method: str, seed: int, level: str) -> float | None:
    """The success rate of a record on the board (``None`` when it is not there yet)."""
    path = BOARD / f"{method}-s{seed}-{level}.json"
    if not path.exists():
        return None
    return float(json.loads(path.read_text())["results"]["success_rate"]["mean"])


def compare(methods: dict[str, list[int]], pairs: list[tuple[str, str]], seeds: list[int],
            name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each method's mean and standard deviation over its seeds on L0/L1/L2, and the paired
    differences (by seed) of ``pairs`` on L0 and L2, Holm-corrected together, with the MDE
    uncorrected and under the correction; printed, and written to ``EVIDENCE / name``."""
    from derl_bench.experiments.stats import describe, holm, mean_sd, paired_difference

    rows: dict[str, Any] = {}
    for method, method_seeds in methods.items():
        rows[method] = {}
        for level in ("L0", "L1", "L2"):
            values = [v for s in method_seeds if (v := success(method, s, level)) is not None]
            if values:
                mean, sd = mean_sd(values)
                rows[method][level] = {"mean": mean, "sd": sd, "n": len(values)}
    comparisons = []
    for level in ("L0", "L2"):
        for a, b in pairs:
            xa = [success(a, s, level) for s in seeds]
            xb = [success(b, s, level) for s in seeds]
            if None in xa or None in xb:
                continue
            comparisons.append({"level": level, "a": a, "b": b,
                                **paired_difference(xa, xb)})  # type: ignore[arg-type]
    corrected = holm(comparisons) if comparisons else []
    out = {"rows": rows, "comparisons": corrected, "seeds": seeds, **(extra or {}),
           "note": "success rates (0-1) of greedy play on every eval game; differences are "
                   "a - b paired by seed, Holm-corrected together"}
    EVIDENCE.mkdir(parents=True, exist_ok=True)
    (EVIDENCE / name).write_text(json.dumps(out, indent=2) + "\n")
    for method, levels in rows.items():
        cells = [f"{lv} {v['mean'] * 100:.1f} ± {v['sd'] * 100:.1f} (n={v['n']})"
                 for lv, v in levels.items()]
        print(f"{method:18s} " + "; ".join(cells))
    for c in corrected:
        print(f"{c['level']} {c['a']} - {c['b']}: {describe(c)} (uncorrected MDE "
              f"{c['mde'] * 100:.1f})")
    return out


def report(args: argparse.Namespace) -> int:
    global BOARD, EVIDENCE, TAG
    BOARD, EVIDENCE, TAG = Path(args.board), Path(args.board) / "evidence", args.tag
    rewards = [named(f"grpo-{r}") for r in args.rewards]
    methods = {named("teacher-dagger"): [0], **{r: list(args.seeds) for r in rewards}}
    pairs = [(a, b) for i, a in enumerate(rewards) for b in rewards[i + 1:]]
    compare(methods, pairs, list(args.seeds), f"{named('comparison')}.json")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "report"):
        p = sub.add_parser(name)
        p.add_argument("--runs", default="runs/alfworld-board")
        p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
        p.add_argument("--rewards", nargs="+", default=list(REWARDS), choices=list(REWARDS))
        p.add_argument("--board", default=str(BOARD), help="where the records go")
        p.add_argument("--tag", default="", help="name every method <method>-<tag>: the rows "
                                                 "of another base or recipe")
        if name == "run":
            p.add_argument("--base-L0", dest="base_L0", default="runs/base-L0")
            p.add_argument("--base-L2", dest="base_L2", default="runs/base-L2")
            p.add_argument("--workers", type=int, default=2)
            p.add_argument("--levels", nargs="*", choices=("L0", "L2"),
                           help="only the units of these bases")
            p.add_argument("--only-bases", action="store_true",
                           help="only the bases' records (teacher-dagger)")
            p.add_argument("--quick", action="store_true",
                           help="a rehearsal: GRPO of 1 step x 1 game x 2 samples")
            p.add_argument("--recipe", help="a baselines/ command recipe to train every GRPO "
                                            "run at, instead of the 10-step recipe (GRPO)")
    args = parser.parse_args()
    return run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
