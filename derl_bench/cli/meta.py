"""``derl-bench meta``: discover a Meta-Reward (DERL, DERL-pop, random search, REvolve, or any
method of the registry, :mod:`derl_bench.meta.methods`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from derl_bench.cli._runs import add_run_options, hold_run, require_recipe


def _run(args: argparse.Namespace) -> int:
    from derl_bench.grpo.config import ConfigError
    from derl_bench.meta import load_meta_config, run_meta

    overrides = list(args.overrides)
    if args.method:
        overrides.append(f"method={args.method}")
    if args.output:
        overrides.append(f"output_dir={args.output}")
    if args.executor:
        overrides.append(f"executor={args.executor}")
    if args.address:
        overrides.append(f"ray_address={args.address}")
    if args.workers is not None:  # 0 is refused by the config, not taken as unset
        overrides.append(f"workers={args.workers}")
    from derl_bench.evaluation.batched import headline_evaluator
    from derl_bench.evaluation.families import resolve_adapter
    from derl_bench.grpo.config import TINY_MODEL
    from derl_bench.grpo.rundir import clear_run_dir
    from derl_bench.meta.workers import ray_available

    config = load_meta_config(require_recipe(args), overrides)
    if config.executor == "ray" and not ray_available():  # refused before the folder
        raise ConfigError("executor: ray needs the ray package: pip install "
                          "'derl-bench[distributed]' (or executor: local)")
    config.check_machine()
    models = [m for m in (config.inner.model, config.optimizer.model) if m != TINY_MODEL]
    # The folder is held from its check to the run's last write.
    with hold_run(config.run_dir, models, args) as replace:
        if replace:
            clear_run_dir(config.run_dir)
        inner = config.inner
        evaluate = headline_evaluator(
            resolve_adapter(inner.env_id, config.family), config.eval_levels or [],
            limit=config.eval_limit, max_new_tokens=inner.max_new_tokens,
            model_label=inner.model,
            env_kwargs={k: v for k, v in inner.env_kwargs.items()
                        if k not in ("split", "level")})
        result = run_meta(config, evaluate=evaluate if config.eval_levels else None,
                          resume=args.resume)
    if result.best_expr is None:
        print("no candidate trained successfully; see candidates.jsonl", file=sys.stderr)
        return 1
    print(f"best Meta-Reward: {result.best_expr}  (validation success {result.best_score:.3f})")
    for level, figures in result.headline.get("best", {}).items():
        print(f"  {level} eval success: {figures['mean']:.3f} ± {figures['se']:.3f} "
              f"(n={figures['n']}; record {figures['record']})")
    print(f"zero-advantage generations: {result.zero_advantage_generations}")
    print(f"run directory: {config.run_dir}")
    return 0


class MethodChoices:
    """The registry's method names (:mod:`derl_bench.meta.methods`), read when a command line
    gives ``--method`` or asks for help: building the parser loads no method. A registry that
    cannot be read (a bad ``DERL_BENCH_METHOD_PATH``) lets any name through, so that the run's
    recipe check reports it as an error of the command (exit 2)."""

    def __contains__(self, name: object) -> bool:
        from derl_bench.meta.methods import MethodError, registry

        try:
            return name in registry()
        except MethodError:
            return True

    def __iter__(self) -> Iterator[str]:
        from derl_bench.meta.methods import BUILT_IN, MethodError, method_names

        try:
            return iter(method_names())
        except MethodError:
            return iter(m.name for m in BUILT_IN)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``derl-bench meta RECIPE``."""
    parser = sub.add_parser(
        "meta", help="discover a Meta-Reward with DERL or a search baseline",
        description="Run reward discovery from a meta recipe (see baselines/*meta*.yaml): "
        "propose Meta-Rewards, train an inner GRPO policy on each, score it on validation "
        "episodes, and learn from the scores.")
    parser.add_argument("recipe", help="YAML meta recipe")
    # A default keeps argparse from naming the optional overrides when the recipe is missing.
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="recipe overrides, e.g. outer_steps=3 inner.steps=2")
    parser.add_argument("--method", choices=MethodChoices(),
                        help="override the recipe's method (those of derl_bench.meta.methods, "
                        "with any that DERL_BENCH_METHOD_PATH or an installed package adds)")
    parser.add_argument("--output", help="run directory (default runs/<name>)")
    parser.add_argument("--executor", choices=("auto", "ray", "local"),
                        help="where inner runs execute (default: the recipe's, auto = Ray when "
                        "installed)")
    parser.add_argument("--address",
                        help="Ray cluster to join: auto, or ray://host:10001 (default: start "
                        "a local Ray instance)")
    parser.add_argument("--workers", type=int,
                        help="most inner runs in flight at once (default: as many as fit)")
    add_run_options(parser)
    parser.set_defaults(func=_run)
