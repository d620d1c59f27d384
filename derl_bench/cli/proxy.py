"""``derl-bench proxy``: the proxy benchmark, every reward-design method on one CPU-scale task
(``derl/Arithmetic-v0`` or a reward-discovery task of docs/tasks.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from derl_bench.cli._errors import CommandError, require_output_folder
from derl_bench.cli._runs import Distinct, at_least_one, folder_owner, hold_output, key_value


def _run(args: argparse.Namespace) -> int:
    require_output_folder("--output", args.output)
    if args.records:
        require_output_folder("--records", args.records)
    # Every mode writes under --output, from its first check to its last write.
    with hold_output(args.output, args):
        owner = folder_owner(args.output)
        if owner:  # its files would end up beside another command's, mixed with them
            raise CommandError(f"--output: {args.output} holds {owner}; proxy writes a folder "
                               "of its own: choose an empty or a proxy folder")
        return _proxy(args)


def _check_records(records: Path, env_id: str) -> None:
    """Refuse a ``--records`` folder that is not ``env_id``'s board folder or a folder of its
    own, before any work: what ``leaderboard validate`` would reject only afterwards."""
    from derl_bench.family import board_folder
    from derl_bench.leaderboard.validate import records_folder_problem

    problem = records_folder_problem(records, env_id)
    if problem:
        raise CommandError(f"--records: {problem}")
    benchmark = board_folder(env_id)
    owner = folder_owner(records, benchmark)
    if owner:
        raise CommandError(f"--records: {records} holds {owner}; records of {env_id} go into "
                           f"its board folder (leaderboards/{benchmark}) or a new folder")


def _proxy(args: argparse.Namespace) -> int:
    from derl_bench.experiments.proxy import ProxyConfig, proxy_methods, run_proxy, small

    try:
        # the config resolves the task's family once; every mode below reads it from there
        config = ProxyConfig(output=args.output, workers=args.workers, env_id=args.env,
                             pick=args.pick)
        if config.family.multi_turn:
            raise ValueError("the proxy benchmark runs single-step tasks")
    except (ValueError, KeyError) as err:
        reason = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise CommandError(f"--env {args.env}: {reason}") from err
    if args.records:
        _check_records(Path(args.records), config.env_id)
    if args.small:
        config = small(config)
    if args.optimizer:
        from derl_bench.grpo.config import parse_overrides

        for key, value in parse_overrides(args.optimizer).items():
            if key.startswith("inner."):
                config.optimizer_recipe.setdefault("inner", {})[key[len("inner."):]] = value
            else:
                config.optimizer_recipe[key] = value
    if args.modes:
        from derl_bench.experiments.modes import modes_markdown, run_modes

        try:
            figures = run_modes(config, trained=not args.small)
        except ValueError as err:
            raise CommandError(str(err)) from err
        if args.records:
            _copy(Path(config.output), Path(args.records) / "evidence", ("modes.json", "modes.md"))
        print(modes_markdown(figures))
        return 0
    if args.planted:
        from derl_bench.experiments.planted import PlantedConfig, run_planted

        try:
            stated: dict[str, int] = {} if args.confirm_offset is None else {
                "confirm_offset": args.confirm_offset}
            if args.small:
                stated.update(pilot_seeds=2, seeds=2, max_seeds=2)
            elif args.confirm_seeds is not None:
                stated.update(seeds=args.confirm_seeds,
                              max_seeds=max(args.confirm_seeds, PlantedConfig.max_seeds))
            check = PlantedConfig(proxy=config, **stated)
            found = run_planted(check)
        except ValueError as err:
            raise CommandError(str(err)) from err
        if args.records:
            _copy(check.output, Path(args.records) / "evidence", ("planted.json", "planted.md"))
        print(f"planted reward check: {check.output / 'planted.md'}; "
              f"{'passes' if found['passes'] else 'fails'}")
        return 0
    if args.screen:
        from derl_bench.experiments.screen import ScreenConfig, run_screen

        try:
            screen = ScreenConfig(proxy=config, draws=50, episodes=16) if args.small \
                else ScreenConfig(proxy=config)
            run_screen(screen)
        except ValueError as err:
            raise CommandError(str(err)) from err
        if args.records:
            _copy(screen.output, Path(args.records) / "evidence", ("screen.json", "screen.md"))
        print((screen.output / "screen.md").read_text())
        return 0
    if args.climb:
        from derl_bench.experiments.climb import ClimbConfig, run_climb

        try:
            climb = ClimbConfig(proxy=config)
            if args.small:
                climb = ClimbConfig(proxy=config, neighbours=2, seeds=climb.seeds[:1])
            found = run_climb(climb)
        except ValueError as err:
            raise CommandError(str(err)) from err
        if args.records:
            _copy(climb.output, Path(args.records) / "evidence", ("climb.json", "climb.md"))
        print(f"climbability: {climb.output / 'climb.md'}; "
              f"{'passes' if found['passes'] else 'fails'}")
        return 0
    if args.upward:
        from derl_bench.experiments.climb import UpwardConfig, run_upward

        try:
            upward = UpwardConfig(proxy=config, evidence=args.upward, draws=args.draws)
            if args.small:
                upward = UpwardConfig(proxy=config, evidence=args.upward, draws=args.draws,
                                      seeds=upward.seeds[:1], max_starts=2)
            run_upward(upward)
        except ValueError as err:
            raise CommandError(str(err)) from err
        if args.records:
            _copy(upward.output, Path(args.records) / "evidence", ("upward.json", "upward.md"))
        print((upward.output / "upward.md").read_text())
        return 0
    if args.landscape:
        from derl_bench.experiments.landscape import LandscapeConfig, run_landscape
        from derl_bench.experiments.proxy import EVIDENCE

        landscape = LandscapeConfig(proxy=config, rewards=args.rewards,
                                    confirm_top=args.confirm_top)
        if args.small:
            landscape = LandscapeConfig(proxy=config, rewards=4, seeds=landscape.seeds[:1],
                                        confirm_top=1, confirm_seeds=landscape.confirm_seeds[:1])
        found = run_landscape(landscape)
        if args.records:
            _copy(landscape.output, Path(args.records) / EVIDENCE,
                  ("landscape.json", "landscape.md", "landscape.png"))
        print(f"landscape: {landscape.output / 'landscape.md'}; measurably better than the "
              f"best hand-made reward: {found['measurably_better'] or 'none'}")
        return 0
    if args.seeds:
        config.seeds = args.seeds
    if args.generations is not None:
        if args.generations < 1:
            raise CommandError("--generations must be at least 1")
        config.outer_steps = args.generations
        config.endpoint_from = args.generations // 2
    if args.methods:
        known = proxy_methods()
        unknown = [m for m in args.methods if m not in known]
        if unknown:
            raise CommandError(f"unknown methods {unknown}; known: {', '.join(known)}")
        config.methods = args.methods
    result = run_proxy(config, records=Path(args.records) if args.records else None)
    print(json.dumps(result["summary"], indent=2))
    print(f"results: {Path(config.output) / 'results.json'}  curves: "
          f"{Path(config.output) / 'curves.png'}  ({result['wall_time_s']:.0f} s)")
    return 0


def _copy(source: Path, records: Path, names: tuple[str, ...]) -> None:
    import shutil

    records.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(source / name, records / name)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``derl-bench proxy``."""
    parser = sub.add_parser(
        "proxy", help="run every reward-design method on a CPU-scale task",
        description="The proxy benchmark (docs/proxy.md): DERL, its frozen control, random "
        "search, island evolution and the best hand-made reward on derl/Arithmetic-v0 or a "
        "reward-discovery task (docs/tasks.md) at the official code's budget (20 generations "
        "x 8, seeds 0-4); the pre-stated endpoints paired by seed, per-generation evidence, "
        "L0/L1/L2 eval success.")
    parser.add_argument("--env", default="derl/Arithmetic-v0",
                        help="the task (default derl/Arithmetic-v0; derl/DigitsSparse-v0, "
                        "derl/DigitsHack-v0, derl/DigitsGate-v0, derl/DigitsTrap-v0, "
                        "derl/DigitsRecall-v0, derl/DigitsRecallSparse-v0, "
                        "derl/DigitsBalance-v0: "
                        "docs/tasks.md)")
    parser.add_argument("--output", default="runs/proxy", help="output directory")
    parser.add_argument("--records", default=None, metavar="DIR",
                        help="also copy the result records here (e.g. leaderboards/arithmetic)")
    parser.add_argument("--workers", type=at_least_one, default=2,
                        help="runs side by side (default 2)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, action=Distinct,
                        help="seeds (default 0 1 2 3 4)")
    parser.add_argument("--generations", type=int, default=None, metavar="N",
                        help="generations per search (default 20; the mechanism endpoint then "
                        "averages generations N/2 to N-1)")
    parser.add_argument("--methods", nargs="+", default=None, action=Distinct,
                        help="a subset of: the hand-made rewards (outcome, 'outcome + format', "
                        "average), the search methods (random, revolve, derl, derl-pop, "
                        "derl-frozen and any from DERL_BENCH_METHOD_PATH or an installed "
                        "package), the controls (control-negative, control-planted, "
                        "control-one-part: searchers worse and better than random by "
                        "construction), outcome-pop, "
                        "random-pop")
    parser.add_argument("--optimizer", nargs="+", type=key_value, default=None,
                        metavar="KEY=VALUE",
                        help="meta recipe fields for DERL's methods, e.g. protocol=derl-official "
                        "inner.reward_semantics=derl")
    parser.add_argument("--pick", choices=("rescore", "best-run"), default="rescore",
                        help="how each method's final reward is picked: its 3 best re-scored "
                        "on 3 fresh seeds (rescore, the default) or its single best validation "
                        "run (best-run, the rule of boards made before)")
    parser.add_argument("--landscape", action="store_true",
                        help="score 200 random rewards and the hand-made ones (2 seeds each) "
                        "instead, and confirm the best on fresh seeds: does the proxy have a "
                        "reward to discover? (derl_bench.experiments.landscape)")
    parser.add_argument("--rewards", type=int, default=200, metavar="N",
                        help="--landscape: how many random rewards to draw (default 200)")
    parser.add_argument("--confirm-top", type=int, default=5, metavar="N",
                        help="--landscape: how many of the best random rewards are trained "
                        "again on fresh seeds (default 5)")
    parser.add_argument("--planted", action="store_true",
                        help="instead, prove the task: its card's planted reward against every "
                        "hand-made reward, a pilot then a confirmation on fresh seeds "
                        "(derl_bench.experiments.planted)")
    parser.add_argument("--confirm-seeds", type=int, default=None, metavar="N",
                        help="--planted: the confirmation's smallest size (default 8; the pilot "
                        "may plan more)")
    parser.add_argument("--confirm-offset", type=int, default=None, metavar="K",
                        help="--planted: the confirmation's seeds start at fresh seed K "
                        "(default 1000; 8000 for a further confirmation on seeds none saw)")
    parser.add_argument("--screen", action="store_true",
                        help="instead, screen 2000 random draws on the base policy's own "
                        "samples, no inner run: which pay right answers, dense progress or a "
                        "trap? (derl_bench.experiments.screen)")
    parser.add_argument("--climb", action="store_true",
                        help="instead, train 40 one-edit neighbours of the card's planted reward "
                        "beside the hand-made ones: can a search climb to it? "
                        "(derl_bench.experiments.climb)")
    parser.add_argument("--upward", nargs="+", type=Path, metavar="RUNS_JSON",
                        help="instead, from the picks in these boards' runs.json that pay only "
                        "the planted reward's first part, draw one-edit neighbours and train "
                        "those that pay every part: how many step up? "
                        "(derl_bench.experiments.climb)")
    parser.add_argument("--draws", type=int, default=100, metavar="N",
                        help="--upward: one-edit neighbours drawn from each pick (default 100)")
    parser.add_argument("--modes", action="store_true",
                        help="instead, measure the base policy's share of each demonstration "
                        "mode on the validation problems (derl_bench.experiments.modes)")
    parser.add_argument("--small", action="store_true",
                        help="the CI-sized run: the whole pipeline in about a minute, numbers "
                        "meaningless")
    parser.set_defaults(func=_run)
