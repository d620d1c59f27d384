"""The pilot of command-policy GRPO on ALFWorld: does a recipe lift its base, and at what
learning rate? Each arm is ``baselines/alfworld-commands-pilot.yaml`` at one learning rate,
run from one base at seeds 0-2 by ``derl-bench train``; the endpoint is the greedy success on
the first 64 games of L0's validation split, before the first step and every 10 steps.

    python leaderboards/alfworld/study/pilot.py run --base runs/alfworld-weak-L0 --runs runs/pilot
    python leaderboards/alfworld/study/pilot.py report --runs runs/pilot
    python leaderboards/alfworld/study/pilot.py pool --base runs/alfworld-weak-L0 --runs runs/pilot

``run`` skips a run whose ``result.json`` exists and starts a half-written one again; two
runs at a time, one torch thread each. ``report`` prints each arm's curve (mean and the
t-interval over seeds, against episodes trained), the change from the base at the last point
(paired by seed, Holm-corrected over the arms) and the diagnostics that say what limits it,
and writes them with every run's ``metrics.jsonl`` to ``--evidence``. ``pool`` plays the
first 64 games of each seed's training pool greedily with the base and with each arm's final
model (``pool.json``). ``score`` plays all 200 validation games with the base and each final
model at RLVMR's validation temperature (0.4), the training temperature (1.0) and greedily
(``scores.json``), for the third pilot's endpoint:

    python leaderboards/alfworld/study/pilot.py score --base runs/alfworld-weak-L0 \
        --runs runs/pilot-long --arms long-lr2e-4 \
        --evidence leaderboards/alfworld/evidence/pilot-long
``loops`` counts the episodes that come back to a state and choose the same command in it
(greedy, such an episode goes round until the cap), greedy and at temperature 1.0, for the
base and each final model (``loops.json``). ``paired`` compares two models' greedy outcomes
game by game from the logs ``derl-bench evaluate --commands ... --trajectories`` wrote
(McNemar's exact test per level, Holm over the levels; ``paired.json``). ``lift`` takes each
base's final models minus the base from their eval records, ``<group>-base-<level>.json``
and ``<group>-s<seed>-<level>.json`` as ``evaluate --output`` writes them (t-intervals over
the seeds, Holm over the groups at ``--level``, every other level beside; ``lift.json``), for
the seventh pilot's endpoint. A base built again (another machine builds other weights) pairs
with its own runs: ``builds.json`` in the evidence folder names them by group and build
(``{"weak": {"build3": [13, 14]}}``), each build's evaluation is
``<group>-base-<build>-<level>.json``, and each run is taken minus its own build's base; the
runs no build lists pair with ``<group>-base-<level>.json``. ``tails`` counts, from the same
logs, the lost episodes whose last commands repeat in a short cycle (``tails.json``).
``lift --groups FOLDER:GROUP ...`` reads a group from another pilot's folder, so that the
lifts of several pilots are Holm-corrected together (``lift.json`` in ``--evidence``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[3]
BASELINES = REPO / "baselines"
EVIDENCE = REPO / "leaderboards" / "alfworld" / "evidence" / "pilot"
ARMS = {"lr1e-4": ("alfworld-commands-pilot.yaml", 1e-4),
        "lr3e-4": ("alfworld-commands-pilot.yaml", 3e-4),
        "long-lr2e-4": ("alfworld-commands-pilot-long.yaml", 2e-4)}
"""Each arm: a recipe in ``baselines/`` at a learning rate (stated before its runs). The first
pilot is ``lr1e-4`` and ``lr3e-4``; the second, ``long-lr2e-4``, is reported on its own
(``--arms long-lr2e-4 --evidence .../pilot-long``)."""
SEEDS = (0, 1, 2)
WINDOW = 10
"""Steps whose diagnostics are averaged at the start and at the end of a run."""
DIAGNOSTICS = ("kl", "clip_fraction", "grad_norm", "entropy", "weights/max_change",
               "groups_with_advantage", "success", "length/mean", "commands/trained")


def _one(base: str, runs: Path, arm: str, seed: int, overrides: list[str]) -> str:
    out = runs / f"{arm}-s{seed}"
    if (out / "result.json").is_file():
        return f"{out.name}: done before"
    # a run stopped half way continues from its checkpoint (save_every), else starts again
    resume = (out / "checkpoint" / "state.pt").is_file()
    if out.exists() and not resume:
        shutil.rmtree(out)
    recipe, rate = ARMS[arm]
    command = [sys.executable, "-m", "derl_bench", "train", str(BASELINES / recipe),
               "--output", str(out), f"model={base}", f"seed={seed}", f"learning_rate={rate}",
               *overrides, *(["--resume"] if resume else [])]
    log = runs / f"{arm}-s{seed}.log"
    with log.open("a" if resume else "w") as fh:
        status = subprocess.call(command, stdout=fh, stderr=subprocess.STDOUT)
    return f"{out.name}: exit {status} ({log})"


def run(args: argparse.Namespace) -> int:
    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    units = [(arm, seed) for seed in args.seeds for arm in args.arms]
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        for line in pool.map(lambda u: _one(args.base, runs, *u, args.set), units):
            print(line, flush=True)
    return 0


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def report(args: argparse.Namespace) -> int:
    from derl_bench.experiments.stats import holm, paired_difference

    runs, evidence = Path(args.runs), Path(args.evidence)
    evidence.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"arms": {}, "seeds": list(args.seeds)}
    pairs: dict[str, tuple[list[float], list[float]]] = {}
    for arm in args.arms:
        curves, diag, episodes = [], {k: [] for k in DIAGNOSTICS}, 0
        for seed in args.seeds:
            run_dir = runs / f"{arm}-s{seed}"
            if not (run_dir / "result.json").is_file():
                continue
            rows = _rows(run_dir)
            config = yaml.safe_load((run_dir / "config.yaml").read_text())
            episodes = config["games_per_step"] * config["group_size"]
            target = evidence / run_dir.name
            target.mkdir(exist_ok=True)
            for name in ("metrics.jsonl", "result.json", "config.yaml"):
                shutil.copy(run_dir / name, target / name)
            curves.append({r["step"]: r["validation/success"] for r in rows
                           if "validation/success" in r})
            trained = [r for r in rows if "reward/mean" in r]
            for key in DIAGNOSTICS:
                diag[key].append([r[key] for r in trained])
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        points = []
        for step in steps:
            values = np.array([c[step] for c in curves]) * 100
            points.append({"step": step, "episodes": step * episodes, "mean": float(values.mean()),
                           "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                           "per_seed": values.tolist()})
        if steps:  # a run without the in-run curve (validation_every=0) is scored by `score`
            pairs[arm] = ([c[steps[-1]] * 100 for c in curves], [c[0] * 100 for c in curves])
        summary["arms"][arm] = {
            "recipe": ARMS[arm][0], "learning_rate": ARMS[arm][1], "runs": len(curves),
            "curve": points,
            # means over the first and the last WINDOW steps, then over seeds
            "diagnostics": {k: {"first": float(np.mean([np.mean(v[:WINDOW]) for v in vs])),
                                "last": float(np.mean([np.mean(v[-WINDOW:]) for v in vs])),
                                "mean": float(np.mean([np.mean(v) for v in vs]))}
                            for k, vs in diag.items()},
            "seconds_per_step": float(np.mean([
                _rows(runs / f"{arm}-s{s}")[-1]["time/elapsed_s"] / len(diag["kl"][0])
                for s in args.seeds if (runs / f"{arm}-s{s}" / "result.json").is_file()]))}
    arms = list(pairs)
    corrected = holm([paired_difference(*pairs[arm]) for arm in arms]) if arms else []
    summary["last_minus_base"] = dict(zip(arms, corrected, strict=True))
    for arm, body in summary["arms"].items():
        print(f"{arm} (lr {body['learning_rate']:g}, {body['runs']} seeds): " + ", ".join(
            f"{p['step']}: {p['mean']:.1f} ± {p['sd']:.1f}" for p in body["curve"]))
        d = body["diagnostics"]
        print(f"   steps 1-{WINDOW} -> last {WINDOW}: " + ", ".join(
            f"{k} {d[k]['first']:.3g} -> {d[k]['last']:.3g}"
                                for k in DIAGNOSTICS) + f"; {body['seconds_per_step']:.1f} s/step")
    for arm, d in summary["last_minus_base"].items():
        interval = ("no test" if d["holm_low"] is None
                    else f"Holm 95% [{d['holm_low']:+.1f}, {d['holm_high']:+.1f}]")
        print(f"{arm}: last - base {d['mean']:+.1f} points, {interval}, MDE {d['mde']:.1f}")
    (evidence / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def _episodes(model: str, split: str, games: Callable[[int], list[dict[str, Any]]],
              seed: int = 0, temperature: float = 0.0) -> list[Any]:
    """``model``'s episodes on the games (reset options) ``games`` chooses from the number of
    games in L0's ``split``: greedy at temperature 0, else one seeded draw (seed ``seed``) per
    game at ``temperature``."""
    import torch

    from derl_bench.family import resolve_family
    from derl_bench.grpo.commands import CommandGRPOConfig, make_envs, respond
    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.policies.command_model import command_parts, model_view
    from derl_bench.policies.commands import CommandPolicy
    from derl_bench.rollout.commands import game_count, play

    torch.set_num_threads(1)
    net, tokenizer = load_model_and_tokenizer(model)
    config = CommandGRPOConfig(model=model, env_id="derl/ALFWorld-v0", envs=16)
    family = resolve_family(config.env_id)
    envs = make_envs(config, family, split, config.envs)
    sampled = {"temperature": temperature} if temperature else {"greedy": True}
    try:
        episodes = play(envs, CommandPolicy(net.eval(), tokenizer), games(game_count(envs[0])),
                        command_parts(family).view(model_view(model))
                        .state, seed=seed,
                        respond=respond, **sampled)
    finally:
        for env in envs:
            env.close()
    return episodes


def _success(model: str, split: str, games: Callable[[int], list[dict[str, Any]]],
             seed: int = 0, temperature: float = 0.0) -> float:
    """Success of ``model`` on ``games`` of L0's ``split`` (see :func:`_episodes`)."""
    return float(np.mean([e.won for e in _episodes(model, split, games, seed, temperature)]))


def _cycles(model: str, games: int, temperature: float) -> dict[str, Any]:
    """How ``model``'s episodes on the first ``games`` validation games repeat themselves: an
    episode *cycles* when a state (the policy's whole view, token for token) comes back with
    the same command chosen in it. Greedy, a repeated state repeats its choice, so such an
    episode goes round until the cap; sampled, it is only a revisit."""
    episodes = _episodes(model, "validation", lambda total: [{"index": i} for i in
                                                             range(min(games, total))],
                         0, temperature)

    def first_repeat(episode: Any) -> int | None:
        seen: set[tuple[Any, ...]] = set()
        for t, step in enumerate(episode.steps):
            key = (tuple(step.ids[0]), step.commands[step.chosen])
            if key in seen:
                return t
            seen.add(key)
        return None

    repeats = [first_repeat(e) for e in episodes]
    lost = [r for e, r in zip(episodes, repeats, strict=True) if not e.won]
    return {"games": len(episodes), "won": sum(e.won for e in episodes),
            "cycled": sum(r is not None for r in repeats),
            "lost": len(lost), "lost_cycled": sum(r is not None for r in lost),
            "won_cycled": sum(r is not None for e, r in zip(episodes, repeats, strict=True)
                              if e.won),
            "first_repeat_step_of_lost": (float(np.mean([r for r in lost if r is not None]))
                                          if any(r is not None for r in lost) else None)}


def loops(args: argparse.Namespace) -> int:
    """:func:`_cycles` for the base and each seed's final model, greedy and at temperature
    1.0, on the first ``--games`` validation games (``loops.json`` in ``--evidence``)."""
    runs, evidence = Path(args.runs), Path(args.evidence)
    models = {"base": args.base} | {
        f"{arm}-s{seed}": str(runs / f"{arm}-s{seed}" / "model") for arm in args.arms
        for seed in args.seeds if (runs / f"{arm}-s{seed}" / "result.json").is_file()}
    units = [(name, t) for name in models for t in (0.0, 1.0)]
    table: dict[str, dict[str, Any]] = {}
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        futures = {pool.submit(_cycles, models[n], args.games, t): (n, t) for n, t in units}
        for future in concurrent.futures.as_completed(futures):
            name, t = futures[future]
            row = table.setdefault(name, {})[f"{t:g}"] = future.result()
            print(f"{name} at temperature {t:g}: won {row['won']} of {row['games']}; "
                  f"{row['lost_cycled']} of {row['lost']} lost episodes cycled "
                  f"({row['won_cycled']} won ones did)", flush=True)
    evidence.mkdir(parents=True, exist_ok=True)
    (evidence / "loops.json").write_text(json.dumps(
        {"games": args.games, "models": dict(sorted(table.items()))}, indent=2) + "\n")
    return 0


def _greedy_on_pool(model: str, seed: int, games: int) -> float:
    """Greedy success of ``model`` on the first ``games`` games of seed ``seed``'s training
    pool (the games its GRPO run drew its batches from)."""
    from derl_bench.grpo.commands import CommandGRPOConfig, training_pool

    config = CommandGRPOConfig(model=model, env_id="derl/ALFWorld-v0", seed=seed)
    return _success(model, "train", lambda total: [
        {"index": int(g)} for g in training_pool(config, total)[:games]])


def pool_check(args: argparse.Namespace) -> int:
    """Greedy success on each seed's training pool: the base against each arm's final model
    (does GRPO change greedy choices on the games it trained on?)."""
    runs, evidence = Path(args.runs), Path(args.evidence)
    units = [(args.base, seed) for seed in args.seeds] + [
        (str(runs / f"{arm}-s{seed}" / "model"), seed) for arm in args.arms
        for seed in args.seeds]
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        values = list(pool.map(_greedy_on_pool, [m for m, _ in units], [s for _, s in units],
                               [args.games] * len(units)))
    table = {"games": args.games, "base": {}, "arms": {arm: {} for arm in args.arms}}
    for (model, seed), value in zip(units, values, strict=True):
        arm = Path(model).parent.name.rsplit("-s", 1)[0]
        target = table["base"] if model == args.base else table["arms"][arm]
        target[str(seed)] = value
        print(f"{model} (pool of seed {seed}): {value * 100:.1f}%", flush=True)
    (evidence / "pool.json").write_text(json.dumps(table, indent=2) + "\n")
    return 0


def _validation_success(model: str, temperature: float, draw: int) -> float:
    """Success of ``model`` on all 200 games of L0's validation split: greedy at temperature
    0, else one seeded draw (seed ``draw``) per game at ``temperature``."""
    return _success(model, "validation", lambda total: [{"index": i} for i in range(total)],
                    draw, temperature)


SCORED = {0.4: 2, 1.0: 1, 0.0: 1}
"""The third pilot's temperatures and draws per game: RLVMR's validation temperature (0.4,
its endpoint), the training temperature (1.0) and greedy (0), each on all 200 validation
games. The base plays twice as many draws: its error is common to every seed's difference,
so the interval over seeds does not hold it. ``score --scored`` sets others (the fourth
pilot's: ``1:2 0:1``)."""


def _scored(items: list[str]) -> dict[float, int]:
    """``TEMPERATURE:DRAWS`` items, e.g. ``1:2 0:1``; greedy (0) plays one draw whatever."""
    table: dict[float, int] = {}
    for item in items:
        t, _, n = item.partition(":")
        try:
            temperature, draws = float(t), int(n)
        except ValueError:
            raise SystemExit(f"--scored {item!r}: expected TEMPERATURE:DRAWS, e.g. 1:2") from None
        if temperature < 0 or draws < 1:
            raise SystemExit(f"--scored {item!r}: a temperature >= 0 and at least one draw")
        table[temperature] = draws if temperature else 1
    return table


def _draws(scored: dict[float, int], name: str, temperature: float) -> int:
    return scored[temperature] * (2 if name == "base" and temperature else 1)


def score(args: argparse.Namespace) -> int:
    """Re-score the base and each seed's final model at :data:`SCORED`'s temperatures; each
    value is kept in ``--runs``/scores.json as it finishes, so a stopped run resumes."""
    from derl_bench.experiments.stats import paired_difference

    runs, evidence = Path(args.runs), Path(args.evidence)
    scored = _scored(args.scored) if args.scored else SCORED
    cache_path = runs / "scores.json"
    cache: dict[str, float] = (json.loads(cache_path.read_text()) if cache_path.is_file()
                               else {})
    models = {"base": args.base} | {
        f"{arm}-s{seed}": str(runs / f"{arm}-s{seed}" / "model") for arm in args.arms
        for seed in args.seeds if (runs / f"{arm}-s{seed}" / "result.json").is_file()}
    units = [(name, t, d) for name in models for t in scored
             for d in range(_draws(scored, name, t)) if f"{name}|{t:g}|{d}" not in cache]
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        futures = {pool.submit(_validation_success, models[n], t, d): (n, t, d)
                   for n, t, d in units}
        for future in concurrent.futures.as_completed(futures):
            name, t, d = futures[future]
            cache[f"{name}|{t:g}|{d}"] = future.result()
            cache_path.write_text(json.dumps(cache, indent=2, sort_keys=True) + "\n")
            print(f"{name} at temperature {t:g}, draw {d}: {future.result() * 100:.1f}%",
                  flush=True)
    table: dict[str, Any] = {"games": 200, "draws": {f"{t:g}": n for t, n in scored.items()},
                             "base_draws": {f"{t:g}": _draws(scored, "base", t) for t in scored},
                             "models": {}, "last_minus_base": {}}
    for name in models:
        table["models"][name] = {f"{t:g}": float(np.mean(
            [cache[f"{name}|{t:g}|{d}"] for d in range(_draws(scored, name, t))])) * 100
            for t in scored}
    for arm in args.arms:
        seeds = [s for s in args.seeds if f"{arm}-s{s}" in models]
        if not seeds:
            continue
        for t in scored:
            final = [table["models"][f"{arm}-s{s}"][f"{t:g}"] for s in seeds]
            base = [table["models"]["base"][f"{t:g}"]] * len(seeds)
            d = paired_difference(final, base)
            table["last_minus_base"].setdefault(arm, {})[f"{t:g}"] = d
            interval = ("no test" if d["n"] < 2
                        else f"95% [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}]")
            print(f"{arm} at temperature {t:g} ({len(seeds)} seeds): base "
                  f"{base[0]:.1f}, final " + ", ".join(f"{v:.1f}" for v in final)
                  + f"; final - base {d['mean']:+.1f} points, {interval}, MDE {d['mde']:.1f}")
    evidence.mkdir(parents=True, exist_ok=True)
    (evidence / "scores.json").write_text(json.dumps(table, indent=2) + "\n")
    return 0


def paired(args: argparse.Namespace) -> int:
    """Two models' greedy outcomes on the same eval games, paired by game: each level's
    ``evaluate --commands --trajectories`` logs ``<name>-<level>.jsonl`` in ``--evidence`` for
    ``--names`` A and B, McNemar's exact test per level, Holm over the levels
    (``paired.json``)."""
    from derl_bench.experiments.stats import holm_p, mcnemar_exact

    evidence = Path(args.evidence)
    a, b = args.names
    rows: dict[str, dict[str, Any]] = {}
    for level in args.levels:
        won = {}
        for name in (a, b):
            lines = [json.loads(line) for line in
                     (evidence / f"{name}-{level}.jsonl").read_text().splitlines()]
            won[name] = {line["index"]: bool(line["success"]) for line in lines}
        if won[a].keys() != won[b].keys():
            raise SystemExit(f"{level}: the two logs are not of the same games")
        games = sorted(won[a])
        test = mcnemar_exact([won[b][g] for g in games], [won[a][g] for g in games])
        rows[level] = {"games": len(games), a: sum(won[a].values()), b: sum(won[b].values()),
                       f"only {b}": test["only_a"], f"only {a}": test["only_b"],
                       "p": test["p"]}
    for level, p in zip(rows, holm_p([r["p"] for r in rows.values()]), strict=True):
        rows[level]["p_holm"] = p
        r = rows[level]
        print(f"{level}: {b} won {r[b]} of {r['games']}, {a} {r[a]}; won by {b} only "
              f"{r[f'only {b}']}, by {a} only {r[f'only {a}']}; McNemar p {r['p']:.3g}, "
              f"Holm {p:.3g}")
    (evidence / "paired.json").write_text(json.dumps(
        {"reference": a, "other": b, "levels": rows}, indent=2) + "\n")
    return 0


def _record_success(path: Path) -> float:
    """An eval record's success, % of its games."""
    results = json.loads(path.read_text())["results"]
    return 100 * results["successes"] / results["n"]


def lift(args: argparse.Namespace) -> int:
    """Each group's final models minus its base (see the module docstring): at ``--level`` the
    groups' differences are Holm-corrected together; the other levels' are reported beside,
    uncorrected."""
    from derl_bench.experiments.stats import describe, holm, paired_difference

    evidence = Path(args.evidence)
    out: dict[str, Any] = {"level": args.level, "groups": {}}
    tested = []
    for spec in args.groups:
        # FOLDER:GROUP reads a group from another folder (another pilot's), so that groups of
        # several pilots are corrected together; lift.json goes to --evidence.
        folder, _, group = spec.rpartition(":")
        where = Path(folder) if folder else evidence
        if group in out["groups"]:
            raise SystemExit(f"{group}: named twice in --groups")
        listed = where / "builds.json"
        builds = json.loads(listed.read_text()) if listed.is_file() else {}
        build_of = {int(seed): build for build, seeds in builds.get(group, {}).items()
                    for seed in seeds}
        body: dict[str, Any] = {}
        for level in [args.level, *[lv for lv in args.beside if lv != args.level]]:
            finals = {int(p.name[len(group) + 2:-len(f"-{level}.json")]): p
                      for p in where.glob(f"{group}-s*-{level}.json")}
            seeds = sorted(finals)
            base_files = {seed: where / (f"{group}-base-{build_of[seed]}-{level}.json"
                                         if seed in build_of else f"{group}-base-{level}.json")
                          for seed in seeds}
            missing = sorted({f.name for f in base_files.values() if not f.is_file()})
            if missing or not finals:
                raise SystemExit(f"{group} {level}: needs {', '.join(missing) or 'its base'} "
                                 f"and at least one {group}-s<seed>-{level}.json in {where}")
            bases = [_record_success(base_files[seed]) for seed in seeds]
            scores = [_record_success(finals[seed]) for seed in seeds]
            difference = paired_difference(scores, bases)
            by_build = {build_of.get(seed, "first"): base
                        for seed, base in zip(seeds, bases, strict=True)}
            body[level] = {"base": bases[0] if len(by_build) == 1 else by_build,
                           "bases": bases, "seeds": seeds, "finals": scores,
                           "final_minus_base": difference}
            if level == args.level:
                tested.append(difference)
        out["groups"][group] = body
    for group, corrected in zip(list(out["groups"]), holm(tested), strict=True):
        out["groups"][group][args.level]["final_minus_base"] = corrected
    for group, body in out["groups"].items():
        for level, row in body.items():
            base = (f"{row['base']:.1f}" if not isinstance(row["base"], dict) else
                    ", ".join(f"{build} {v:.1f}" for build, v in row["base"].items()))
            print(f"{group} {level}: base {base}, finals "
                  + ", ".join(f"{v:.1f}" for v in row["finals"])
                  + f"; final - base {describe(row['final_minus_base'], scale=1.0)}")
    evidence.mkdir(parents=True, exist_ok=True)
    (evidence / "lift.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


def ends_in_a_cycle(commands: Sequence[str], window: int = 12, longest: int = 6) -> bool:
    """Whether an episode's last ``window`` commands repeat with a period of at most
    ``longest``: what a greedy episode that came back to a state it chose from before looks
    like in its commands alone.

    >>> ends_in_a_cycle(["look"] + ["go to a", "go to b"] * 6)
    True
    >>> ends_in_a_cycle([f"go to {i}" for i in range(12)])
    False
    """
    tail = list(commands[-window:])
    return len(tail) == window and any(
        all(tail[i] == tail[i + p] for i in range(window - p)) for p in range(1, longest + 1))


def tails(args: argparse.Namespace) -> int:
    """For each named eval log (``<name>-<level>.jsonl``, as ``evaluate --trajectories``
    writes it), how many lost episodes end in a cycle (:func:`ends_in_a_cycle`), per level
    (``tails.json``)."""
    evidence = Path(args.evidence)
    table: dict[str, dict[str, dict[str, int]]] = {}
    for name in args.names:
        for level in args.levels:
            log = evidence / f"{name}-{level}.jsonl"
            if not log.is_file():
                raise SystemExit(f"{name} {level}: no {log}")
            lost = [e for e in map(json.loads, log.read_text().splitlines())
                    if not e["success"]]
            cycled = sum(ends_in_a_cycle(e["actions"]) for e in lost)
            table.setdefault(name, {})[level] = {"lost": len(lost), "cycled": cycled}
            print(f"{name} {level}: {cycled} of {len(lost)} lost episodes end in a cycle")
    (evidence / "tails.json").write_text(json.dumps(table, indent=2) + "\n")
    return 0


REWARDS = {"outcome": "success",
           "average": "(g1 + g2 + g3 + g4) / 4",
           "progress": "success + sum(goal_progress_delta)",
           "exploration": "success + 0.1 * sum(new_location)"}
"""The reward comparison's rewards (stated before its runs); each is compared with ``outcome``."""


def rewards(args: argparse.Namespace) -> int:
    """Each reward's final models minus outcome's, paired by seed, from the eval records
    ``<reward>-s<seed>-<level>.json``: at ``--level`` Holm-corrected over the rewards, the other
    levels beside, uncorrected; only the seeds every reward has are compared. ``--runs`` (a
    folder with a ``<reward>/`` run folder per reward) adds each reward's learning curve: batch
    success per ``WINDOW`` steps, mean over its seeds (``rewards.json``)."""
    from derl_bench.experiments.stats import describe, holm, paired_difference

    evidence = Path(args.evidence)
    names = list(args.rewards)
    if names[0] != "outcome" or len(names) < 2:
        raise SystemExit("--rewards: outcome first, then at least one reward to compare")
    out: dict[str, Any] = {"level": args.level, "rewards": {}, "comparisons": {}}
    tested: list[dict[str, Any]] = []
    for level in [args.level, *[lv for lv in args.beside if lv != args.level]]:
        scores = {name: {int(p.name[len(name) + 2:-len(f"-{level}.json")]): _record_success(p)
                         for p in evidence.glob(f"{name}-s*-{level}.json")} for name in names}
        seeds = sorted(set.intersection(*(set(s) for s in scores.values())))
        if len(seeds) < 2:
            raise SystemExit(f"{level}: every reward needs records of at least two common "
                             f"seeds in {evidence}")
        for name in names:
            row = out["rewards"].setdefault(name, {"expr": REWARDS.get(name)})
            row[level] = {"seeds": seeds, "finals": [scores[name][s] for s in seeds],
                          "mean": float(np.mean([scores[name][s] for s in seeds]))}
        for name in names[1:]:
            difference = paired_difference([scores[name][s] for s in seeds],
                                           [scores["outcome"][s] for s in seeds])
            out["comparisons"].setdefault(name, {})[level] = difference
            if level == args.level:
                tested.append(difference)
    for name, corrected in zip(names[1:], holm(tested), strict=True):
        out["comparisons"][name][args.level] = corrected
    if args.runs:
        for name in names:
            curves = [[r["success"] for r in _rows(run_dir) if "reward/mean" in r]
                      for run_dir in sorted(Path(args.runs, name).glob("*-s*"))
                      if (run_dir / "result.json").is_file()]
            if curves:
                length = min(map(len, curves))
                mean = np.mean([c[:length] for c in curves], axis=0)
                out["rewards"][name]["curve"] = [
                    {"steps": f"{lo + 1}-{lo + WINDOW}",
                     "success": float(mean[lo:lo + WINDOW].mean())}
                    for lo in range(0, length - WINDOW + 1, WINDOW)]
    for name, row in out["rewards"].items():
        print(f"{name}: " + "; ".join(f"{lv} {row[lv]['mean']:.1f}" for lv in row
                                      if lv.startswith("L")))
    for name, levels in out["comparisons"].items():
        for level, d in levels.items():
            print(f"{name} - outcome, {level}: {describe(d, scale=1.0)}")
    (evidence / "rewards.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run")
    r.add_argument("--base", required=True)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="recipe overrides every run of the arm gets (e.g. validation_every=0)")
    rep = sub.add_parser("report")
    check = sub.add_parser("pool", help="greedy success on each seed's training pool")
    cycles = sub.add_parser("loops", help="how often episodes come back to a state and "
                            "choose the same command in it (greedy and at temperature 1)")
    cycles.add_argument("--base", required=True)
    cycles.add_argument("--games", type=int, default=200)
    cycles.add_argument("--workers", type=int, default=2)
    rescore = sub.add_parser("score", help="the base and final models at RLVMR's validation "
                             "temperature, the training temperature and greedy")
    rescore.add_argument("--base", required=True)
    rescore.add_argument("--workers", type=int, default=2)
    rescore.add_argument("--scored", nargs="+", metavar="TEMPERATURE:DRAWS",
                         help="temperatures and draws per final model (the base plays twice "
                         "as many); default: 0.4:2 1:1 0:1")
    check.add_argument("--base", required=True)
    check.add_argument("--games", type=int, default=64)
    check.add_argument("--workers", type=int, default=2)
    pair = sub.add_parser("paired", help="two models' greedy outcomes paired by game "
                          "(McNemar per level, Holm over levels) from evaluate's logs")
    pair.add_argument("--names", nargs=2, required=True, metavar=("REFERENCE", "OTHER"))
    pair.add_argument("--levels", nargs="+", default=["L0", "L1"])
    ends = sub.add_parser("tails", help="how many lost episodes of each eval log end in a "
                          "cycle of commands")
    ends.add_argument("--names", nargs="+", required=True)
    ends.add_argument("--levels", nargs="+", default=["L0", "L1"])
    gain = sub.add_parser("lift", help="each base's final models minus the base from their "
                          "eval records (Holm over the bases at --level)")
    gain.add_argument("--groups", nargs="+", required=True,
                      help="GROUP (in --evidence) or FOLDER:GROUP (another pilot's)")
    versus = sub.add_parser("rewards", help="each reward's final models minus outcome's from "
                            "their eval records (Holm over the rewards at --level)")
    versus.add_argument("--rewards", nargs="+", default=list(REWARDS))
    versus.add_argument("--runs", default=None, help="the runs, <reward>/<arm>-s<seed>/ each")
    for p in (gain, versus):
        p.add_argument("--level", default="L0", help="the tested level")
        p.add_argument("--beside", nargs="*", default=["L1"], help="levels reported beside")
    for p in (rep, check, rescore, cycles, pair, gain, ends, versus):
        p.add_argument("--evidence", default=str(EVIDENCE))
    for p in (r, rep, check, rescore, cycles):
        p.add_argument("--runs", default="runs/pilot")
        p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
        p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    args = parser.parse_args()
    return {"run": run, "report": report, "pool": pool_check, "score": score,
            "loops": loops, "paired": paired, "lift": lift, "tails": tails,
            "rewards": rewards}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
