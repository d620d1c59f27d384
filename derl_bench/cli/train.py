"""``derl-bench train RECIPE.yaml``: run GRPO from a recipe.

    derl-bench train baselines/gsm8k-outcome.yaml
    derl-bench train baselines/alfworld-average.yaml --output runs/alf steps=20 learning_rate=2e-6
    derl-bench train baselines/alfworld-average.yaml --output runs/alf --resume steps=40

``KEY=VALUE`` overrides set any recipe field (values parsed as YAML). Exit status 2 means the
recipe, an override or ``--resume`` was rejected; nothing was written in that case.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

REJECTED = 2


class _IntermixedParser(argparse.ArgumentParser):
    """Accept ``KEY=VALUE`` overrides before and after options (``--output D steps=5``)."""

    _mixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._mixing:  # parse_known_intermixed_args calls back into this method
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


def register(subparsers: Any) -> None:
    """Add ``train``."""
    parser = subparsers.add_parser(
        "train", help="train a policy with GRPO from a YAML recipe",
        description="Train an LLM policy with GRPO on a derl env, rewarded by a Meta-Reward.",
    )
    parser.add_argument("recipe", metavar="RECIPE.yaml", help="a recipe (see baselines/)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="override recipe fields, e.g. steps=20 meta_reward='outcome'")
    parser.add_argument("--output", default=None, metavar="DIR",
                        help="run directory (default: runs/<recipe name>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in the output directory from its newest checkpoint")
    parser.__class__ = _IntermixedParser
    parser.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    """Load the recipe, train, print where the results are."""
    from derl_bench.family import family_spec
    from derl_bench.grpo.config import ConfigError, load_config
    from derl_bench.grpo.dispatch import run_training
    from derl_bench.grpo.trainer import ResumeError
    from derl_bench.reward import MetaRewardError, compile_reward

    overrides = list(args.overrides)
    if args.output is not None:
        overrides.append(f"output_dir={args.output}")
    try:
        config = load_config(args.recipe, overrides)
        # Reject a reward over primitives the env does not emit before any model loads.
        compile_reward(config.meta_reward, env=config.env_id, semantics=config.reward_semantics)
        if config.trainer == "trl" and family_spec(config.env_id).multi_turn:
            # TRL's multi-turn trainer sits on top of the pipeline (derl_bench.integrations),
            # so the train command, not grpo's dispatch, hands agent recipes to it.
            from derl_bench.integrations.trl import train_trl_agent

            history = train_trl_agent(config, resume=args.resume)
        else:
            history, _model = run_training(config, resume=args.resume)
    except (ConfigError, ResumeError, MetaRewardError) as err:
        print(f"derl-bench train: {err}", file=sys.stderr)
        return REJECTED
    last = history[-1] if history else {}
    print(f"run: {config.run_dir}  steps: {len(history)}  "
          f"reward: {last.get('reward/mean', float('nan')):.4f}  "
          f"success: {last.get('success/mean', float('nan')):.4f}")
    return 0
