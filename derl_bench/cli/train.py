"""``derl-bench train RECIPE.yaml``: run GRPO from a recipe.

    derl-bench train baselines/gsm8k-outcome.yaml
    derl-bench train baselines/alfworld-average.yaml --output runs/alf steps=20 learning_rate=2e-6
    derl-bench train baselines/alfworld-average.yaml --output runs/alf --resume steps=40
    derl-bench train baselines/alfworld-commands-pilot.yaml model=runs/alfworld-weak-L0

The recipe's ``trainer`` (``compact``, ``trl`` or ``commands``) chooses the trainer
(:mod:`derl_bench.grpo.dispatch`); a command policy's run (``trainer: commands``) resumes
(``--resume``) from the checkpoint its ``save_every`` writes.

``KEY=VALUE`` overrides set any recipe field (values parsed as YAML). Exit status 2 means the
recipe, an override, the output folder, ``--resume`` or the data (a file that differs from the
data catalogue's checksum, or does not parse) was rejected; nothing was written in that case. A
run writes only into a folder that is new or empty, unless ``--resume`` continues the run there
or ``--overwrite`` replaces it (only a run, and only once the new run has passed its checks);
one command at a time holds a folder. A damaged data file met during the run (an ALFWorld
game, which the catalogue has no checksum for) stops it with exit status 1 and a message
naming the file. Training that diverges (a loss, gradient norm or weight not finite) stops the
run with exit status 2, without saving the step it diverged in.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from derl_bench.cli._runs import add_run_options, hold_run, require_recipe


def register(subparsers: Any) -> None:
    """Add ``train``."""
    parser = subparsers.add_parser(
        "train", help="train a policy with GRPO from a YAML recipe",
        description="Train an LLM policy with GRPO on a derl env, rewarded by a Meta-Reward.",
    )
    parser.add_argument("recipe", metavar="RECIPE.yaml", help="a recipe (see baselines/)")
    # A default makes the overrides optional in argparse's eyes too: without one, a missing
    # recipe is reported as "RECIPE.yaml, KEY=VALUE are required".
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="override recipe fields, e.g. steps=20 meta_reward='outcome'")
    parser.add_argument("--output", default=None, metavar="DIR",
                        help="run directory (default: runs/<recipe name>)")
    add_run_options(parser)
    parser.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    """Load the recipe, train with its trainer (:func:`~derl_bench.grpo.dispatch.trainer_for`),
    print where the results are; a rejected recipe, override, output folder, resume or data
    file raises before anything is written (exit 2). A damaged data file met during the run
    exits 1."""
    from derl_bench.data.read import DataFileError
    from derl_bench.family import resolve_family
    from derl_bench.grpo.config import TINY_MODEL
    from derl_bench.grpo.dispatch import load_recipe, trainer_for
    from derl_bench.grpo.rundir import clear_run_dir

    overrides = list(args.overrides)
    if args.output is not None:
        overrides.append(f"output_dir={args.output}")
    config = load_recipe(require_recipe(args), overrides)
    trainer = trainer_for(config)
    family = resolve_family(config.env_id)  # once, where the command starts
    trainer.check(config, family, resume=args.resume)
    # The run's one compile: a reward over primitives the env does not emit is rejected before
    # any model loads, and the compiled reward is handed down to the trainer.
    reward = trainer.compile(config, family)
    models = [m for m in [config.model] if m != TINY_MODEL]
    # The folder is held from its check to the run's last write.
    with hold_run(config.run_dir, models, args) as replace:
        if replace:
            clear_run_dir(config.run_dir)
        try:
            trained = trainer.train(config, reward, family, resume=args.resume, log=print)
        except DataFileError as err:  # met during the run: the message names the file
            print(f"error: {err}", file=sys.stderr)
            return 1
    if trained.score is not None:
        print(f"run: {config.run_dir}  steps: {config.steps}  "
              f"validation score: {trained.score:.4f}")
        return 0
    last = trained.history[-1] if trained.history else {}
    print(f"run: {config.run_dir}  steps: {len(trained.history)}  "
          f"reward: {last.get('reward/mean', float('nan')):.4f}  "
          f"success: {last.get('success/mean', float('nan')):.4f}")
    return 0
