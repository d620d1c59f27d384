"""``derl-bench proposer-check``: can a reward proposer learn? (docs/proposer-check.md)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from derl_bench.cli._errors import CommandError
from derl_bench.cli._runs import Distinct


def _run(args: argparse.Namespace) -> int:
    from derl_bench.experiments.proposer_check import (
        CheckConfig,
        check_proposers,
        run_check,
        small,
    )

    outer = {k: v for k, v in {
        "learning_rate": args.lr, "kl_coef": args.kl, "epochs": args.epochs,
        "reference_reset": args.reference_reset, "advantage": args.advantage,
        "temperature": args.temperature}.items() if v is not None}
    try:
        config = CheckConfig(output=args.output, env_id=args.env)
        if args.small:
            config = small(config)
        changes = {k: v for k, v in {
            "seeds": args.seeds, "generations": args.generations,
            "population": args.population, "rules": args.rules, "proposers": args.proposers,
            "cold_starts": args.cold_starts, "endpoint_from": args.endpoint_from,
            "workers": args.workers, "cache": args.cache}.items()
            if v is not None}
        config = replace(config, **changes, outer=replace(config.outer, **outer)
                         if outer else config.outer)
    except (TypeError, ValueError) as err:
        raise CommandError(f"{err} (proposers: {', '.join(check_proposers())})") from err
    from derl_bench.cli._runs import hold_output

    try:
        # Two checks writing one folder would mix their runs: one holds it at a time.
        with hold_output(config.output, args):
            run_check(config)
    except ValueError as err:
        raise CommandError(str(err)) from err
    print(f"table: {config.output}/summary.md  plot: {config.output}/curves.png")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``derl-bench proposer-check``."""
    parser = sub.add_parser(
        "proposer-check", help="test whether a reward proposer learns, with no inner training",
        description="Run reward proposers (DERL's Meta-Optimizer, its frozen copy, random "
        "search, island evolution) for G generations x P proposals against scoring rules with "
        "a known optimum, computed on a probe set of the env's primitive vectors; report each "
        "generation's scores and DERL's paired differences (docs/proposer-check.md).")
    parser.add_argument("--output", default="runs/proposer-check", help="output directory")
    parser.add_argument("--env", default="derl/Arithmetic-v0", help="env whose primitives the "
                        "proposals use (default derl/Arithmetic-v0)")
    parser.add_argument("--rules", nargs="+", default=None, metavar="RULE", action=Distinct,
                        help="rank:EXPR, pays:NAME, noisy-rank:EXPR, noisy-pays:NAME")
    parser.add_argument("--proposers", nargs="+", default=None, metavar="NAME",
                        action=Distinct,
                        help="a subset of: derl, derl-frozen, random, revolve")
    parser.add_argument("--cold-starts", nargs="+", default=None, choices=("paper", "generator"),
                        action=Distinct)
    parser.add_argument("--seeds", type=int, nargs="+", default=None, action=Distinct)
    parser.add_argument("--generations", type=int, default=None)
    parser.add_argument("--population", type=int, default=None)
    parser.add_argument("--endpoint-from", type=int, default=None,
                        help="first generation of the endpoint window")
    parser.add_argument("--lr", type=float, default=None, help="outer learning rate")
    parser.add_argument("--kl", type=float, default=None, help="outer KL coefficient")
    parser.add_argument("--epochs", type=int, default=None, help="optimiser passes per update")
    parser.add_argument("--reference-reset", action=argparse.BooleanOptionalAction,
                        default=None, help="reset the KL reference before every update")
    parser.add_argument("--advantage", choices=("grpo", "rloo"), default=None)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--cache", default=None, help="folder for the Meta-Optimizer's "
                        "cold starts (default OUTPUT/cache); checks sharing it fine-tune once")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes side by side (default 1; results do not depend on it)")
    parser.add_argument("--small", action="store_true",
                        help="the CI-sized check (numbers meaningless)")
    parser.set_defaults(func=_run)
