"""``derl-bench train RECIPE.yaml``: run GRPO from a recipe.

    derl-bench train baselines/gsm8k-outcome.yaml
    derl-bench train baselines/alfworld-average.yaml --output runs/alf steps=20 learning_rate=2e-6
    derl-bench train baselines/alfworld-average.yaml --output runs/alf --resume steps=40
    derl-bench train baselines/alfworld-commands-pilot.yaml model=runs/alfworld-weak-L0

A recipe with ``trainer: commands`` trains a command policy (:mod:`derl_bench.grpo.commands`)
from a base folder; such a run resumes (``--resume``) from the checkpoint its ``save_every``
writes.

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


def check_env(config: Any) -> None:
    """Make the run's env once, so that a bad level, split or env kwarg is refused (as a
    :class:`~derl_bench.grpo.config.ConfigError`) before anything is written."""
    from derl_bench.data.read import DataFileError
    from derl_bench.data.root import DataNotFoundError
    from derl_bench.grpo.config import ConfigError
    from derl_bench.grpo.trainer import make_env

    try:
        make_env(config).close()
    except (DataNotFoundError, DataFileError) as err:  # the message names the file
        raise ConfigError(str(err)) from None
    except (TypeError, ValueError, LookupError) as err:
        raise ConfigError(f"{config.env_id} cannot be made with "
                          f"{config.env_make_kwargs()}: {err}") from None


def run_command_policy(config: Any, args: argparse.Namespace) -> int:
    """``trainer: commands``: GRPO of a command policy (:mod:`derl_bench.grpo.commands`) as
    its recipe, ``config``, says; refused (exit 2, nothing written) like any recipe."""
    from derl_bench.data.read import DataFileError
    from derl_bench.family import resolve_family
    from derl_bench.grpo.commands import (
        check_command_data,
        check_pool,
        resume_problem,
        train_commands,
    )
    from derl_bench.grpo.config import ConfigError
    from derl_bench.grpo.rundir import clear_run_dir
    from derl_bench.policies.command_model import command_parts
    from derl_bench.reward import compile_reward
    from derl_bench.reward.primitives import primitive_set

    if args.resume:
        problem = resume_problem(config)
        if problem:
            raise ConfigError(problem)
    family = resolve_family(config.env_id)  # once, where the command starts
    command_parts(family)  # a card without a commands hook is refused before the folder is held
    check_command_data(config, family)  # and so are damaged games
    check_pool(config, family)  # and a pool larger than the games the base was not taught on
    reward = compile_reward(config.meta_reward, primitive_set(config.env_id, family))
    with hold_run(config.run_dir, [config.model], args) as replace:
        if replace:
            clear_run_dir(config.run_dir)
        try:
            history = train_commands(config, log=print, reward=reward, family=family,
                                     resume=args.resume)
        except DataFileError as err:  # met during the run: the message names the file
            print(f"error: {err}", file=sys.stderr)
            return 1
    print(f"run: {config.run_dir}  steps: {config.steps}  "
          f"validation score: {history[-1]['score']:.4f}")
    return 0


def run_train(args: argparse.Namespace) -> int:
    """Load the recipe, train, print where the results are; a rejected recipe, override,
    output folder, resume or data file raises before anything is written (exit 2). A damaged
    data file met during the run exits 1."""
    from derl_bench.data.read import DataFileError
    from derl_bench.family import resolve_family
    from derl_bench.grpo.commands import CommandGRPOConfig
    from derl_bench.grpo.config import TINY_MODEL, compile_run_reward
    from derl_bench.grpo.dispatch import check_data, load_recipe, run_training
    from derl_bench.grpo.rundir import clear_run_dir

    overrides = list(args.overrides)
    if args.output is not None:
        overrides.append(f"output_dir={args.output}")
    config = load_recipe(require_recipe(args), overrides)
    if isinstance(config, CommandGRPOConfig):
        return run_command_policy(config, args)
    config.check_machine()
    # The run's one compile: a reward over primitives the env does not emit is rejected before
    # any model loads, and the compiled reward is handed down to the trainer.
    reward = compile_run_reward(config)
    models = [m for m in [config.model] if m != TINY_MODEL]
    # The folder is held from its check to the run's last write.
    with hold_run(config.run_dir, models, args) as replace:
        check_data(config)
        check_env(config)
        if replace:
            clear_run_dir(config.run_dir)
        family = resolve_family(config.env_id)  # once, where the command starts
        try:
            if config.trainer == "trl" and family.spec.multi_turn:
                # TRL's multi-turn trainer sits on top of the pipeline
                # (derl_bench.integrations), so the train command, not grpo's dispatch, hands
                # agent recipes to it.
                from derl_bench.integrations.trl import train_trl_agent

                history = train_trl_agent(config, resume=args.resume, reward=reward,
                                          family=family)
            else:
                history, _model = run_training(config, resume=args.resume, reward=reward,
                                               family=family)
        except DataFileError as err:  # met during the run: the message names the file
            print(f"error: {err}", file=sys.stderr)
            return 1
    last = history[-1] if history else {}
    print(f"run: {config.run_dir}  steps: {len(history)}  "
          f"reward: {last.get('reward/mean', float('nan')):.4f}  "
          f"success: {last.get('success/mean', float('nan')):.4f}")
    return 0
