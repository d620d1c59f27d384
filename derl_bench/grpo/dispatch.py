"""The trainers behind one interface, and the one place that chooses among them.

A recipe names its trainer (``trainer:``); :data:`TRAINERS` maps each name to a
:class:`Trainer`, which reads its own config from the recipe, refuses what it cannot run
before anything is written, compiles the run's Meta-Reward and trains:

- ``compact`` (the default): derl-bench's GRPO (:mod:`derl_bench.grpo.trainer`), every env,
  read as a :class:`~derl_bench.grpo.config.TrainConfig`;
- ``trl``: TRL's ``GRPOTrainer`` (:mod:`derl_bench.grpo.trl`): single-step math, each
  completion replayed through the env, or agents through TRL's ``environment_factory``; the
  same :class:`~derl_bench.grpo.config.TrainConfig`;
- ``commands``: GRPO of a command policy (:mod:`derl_bench.grpo.commands`), read as a
  :class:`~derl_bench.grpo.commands.CommandGRPOConfig`; it scores its own validation games.

The ``train`` command and reward discovery's inner runs both ask :func:`trainer_for`, so a
recipe's ``trainer`` is honoured everywhere or refused with a clear error, never silently
ignored. The caller resolves the run's family and compiles its Meta-Reward once, where the
run starts, and hands both down.

Every run first compares the data its env reads with the data catalogue's checksums
(:func:`check_data`): a file changed since its download is refused, named, before training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from derl_bench.family import Family, resolve_family
from derl_bench.grpo.commands import CommandGRPOConfig
from derl_bench.grpo.config import (
    ConfigError,
    TrainConfig,
    compile_run_reward,
    config_from_dict,
    parse_overrides,
    read_recipe,
)
from derl_bench.reward import MetaReward

RunConfig = TrainConfig | CommandGRPOConfig
"""What a trainer runs: the config its recipe is read into."""


@dataclass(frozen=True)
class Trained:
    """What a training run left."""

    history: list[dict[str, Any]]
    """Its per-step metrics (a command run's last row holds its validation score)."""
    model: Path
    """The model this very run wrote after its last step (never an older one in its folder)."""
    score: float | None = None
    """The trainer's own validation score, where its run plays validation games (``commands``);
    ``None`` where whoever needs a score plays them (reward discovery's inner runs)."""


class Trainer(Protocol):
    """A trainer: what :data:`TRAINERS` holds."""

    name: str
    """What a recipe's ``trainer:`` says to choose it."""

    def config(self, values: dict[str, Any]) -> RunConfig:
        """The run's config from a recipe's mapping; refused as a
        :class:`~derl_bench.grpo.config.ConfigError`."""
        ...

    def check(self, config: Any, family: Family, resume: bool = False) -> None:
        """Refuse (:class:`~derl_bench.grpo.config.ConfigError` and its kin) what the run
        cannot do, before anything is written: the machine, the data, the env's settings."""
        ...

    def compile(self, config: Any, family: Family) -> MetaReward:
        """The run's Meta-Reward, compiled against the primitives ``family`` declares."""
        ...

    def train(self, config: Any, reward: MetaReward, family: Family, resume: bool = False,
              log: Callable[[str], None] | None = None) -> Trained:
        """Train as ``config`` says, on ``reward``; ``resume`` continues the run in its
        folder; ``log`` takes progress lines where the trainer prints them."""
        ...


def check_data(config: TrainConfig, family: Family) -> None:
    """Refuse a run whose env would read data that differs from the data catalogue's checksums:
    :class:`~derl_bench.data.verify.DataChecksumError` names the file. Files are hashed once
    per process while they stay unchanged, so inner runs on the same data cost nothing more.
    ``family``: the env's, resolved where the run started."""
    from derl_bench.data.verify import check_data as check_against_catalogue
    from derl_bench.envs.items import data_files

    kwargs = config.env_make_kwargs()
    files = data_files(family, config.env_id, **kwargs)
    check_against_catalogue(files, root=kwargs.get("data_root"))


def check_env(config: TrainConfig, family: Family) -> None:
    """Make the run's env once, so that a bad level, split or env kwarg is refused (as a
    :class:`~derl_bench.grpo.config.ConfigError`) before anything is written."""
    from derl_bench.data.read import DataFileError
    from derl_bench.data.root import DataNotFoundError
    from derl_bench.grpo.trainer import make_env

    try:
        make_env(config, family).close()
    except (DataNotFoundError, DataFileError) as err:  # the message names the file
        raise ConfigError(str(err)) from None
    except (TypeError, ValueError, LookupError) as err:
        raise ConfigError(f"{config.env_id} cannot be made with "
                          f"{config.env_make_kwargs()}: {err}") from None


class _LLMTrainer:
    """What the trainers of a :class:`~derl_bench.grpo.config.TrainConfig` share."""

    name = ""

    def config(self, values: dict[str, Any]) -> RunConfig:
        return config_from_dict(values)

    def check(self, config: TrainConfig, family: Family, resume: bool = False) -> None:
        config.check_machine()
        check_data(config, family)
        check_env(config, family)

    def compile(self, config: TrainConfig, family: Family) -> MetaReward:
        return compile_run_reward(config, family)


class CompactTrainer(_LLMTrainer):
    """derl-bench's GRPO (:func:`derl_bench.grpo.trainer.train`)."""

    name = "compact"

    def train(self, config: TrainConfig, reward: MetaReward, family: Family,
              resume: bool = False, log: Callable[[str], None] | None = None) -> Trained:
        from derl_bench.grpo.checkpoint import checkpoints_dir
        from derl_bench.grpo.trainer import initial_model_path, meta_reward_fn, run_grpo
        from derl_bench.policies.loading import is_adapter_dir

        check_data(config, family)
        history = run_grpo(config, meta_reward_fn(reward), family, resume=resume)
        if config.steps == 0:
            return Trained(history, Path(initial_model_path(config)))
        path = checkpoints_dir(config.run_dir) / f"step-{config.steps}"
        # A LoRA run's checkpoint holds the adapter (``adapter_config.json``), not a whole model.
        if not ((path / "config.json").is_file() or is_adapter_dir(path)):
            raise RuntimeError(f"run {config.run_dir} did not leave its final checkpoint {path}")
        return Trained(history, path)


class TRLTrainer(_LLMTrainer):
    """TRL's ``GRPOTrainer`` (:mod:`derl_bench.grpo.trl`): math, or agents, as the family's
    episodes are single-step or multi-turn."""

    name = "trl"

    def train(self, config: TrainConfig, reward: MetaReward, family: Family,
              resume: bool = False, log: Callable[[str], None] | None = None) -> Trained:
        from derl_bench.grpo.trl import train_trl, train_trl_agent

        check_data(config, family)
        run = train_trl_agent if family.multi_turn else train_trl
        history = run(config, reward, family, resume=resume)
        return Trained(history, config.run_dir / "final-model")


class CommandTrainer:
    """GRPO of a command policy (:func:`derl_bench.grpo.commands.run_commands`)."""

    name = "commands"

    def config(self, values: dict[str, Any]) -> RunConfig:
        from derl_bench.grpo.commands import command_config_from_dict

        return command_config_from_dict(values)

    def check(self, config: CommandGRPOConfig, family: Family, resume: bool = False) -> None:
        from derl_bench.grpo.commands import check_command_data, check_pool, resume_problem
        from derl_bench.policies.command_model import command_parts

        if resume:
            problem = resume_problem(config)
            if problem:
                raise ConfigError(problem)
        command_parts(family)  # a card without a commands hook is refused, naming the hook
        check_command_data(config, family)  # and so are damaged games
        check_pool(config, family)  # and a pool larger than the games the base was not taught on

    def compile(self, config: CommandGRPOConfig, family: Family) -> MetaReward:
        from derl_bench.grpo.commands import command_reward

        return command_reward(config, family)

    def train(self, config: CommandGRPOConfig, reward: MetaReward, family: Family,
              resume: bool = False, log: Callable[[str], None] | None = None) -> Trained:
        from derl_bench.grpo.commands import run_commands

        history = run_commands(config, reward, family, log=log, resume=resume)
        return Trained(history, config.run_dir / "model", float(history[-1]["score"]))


TRAINERS: dict[str, Trainer] = {t.name: t for t in (CompactTrainer(), TRLTrainer(),
                                                     CommandTrainer())}
"""Every trainer, by the name a recipe's ``trainer:`` gives."""


def trainer_for(config: RunConfig | str) -> Trainer:
    """The trainer of ``config`` (or of a recipe's ``trainer:`` name); an unknown name is
    refused, listing the known ones.

    >>> trainer_for("compact").name, trainer_for(TrainConfig(env_id="derl/GSM8K-v0")).name
    ('compact', 'compact')
    """
    name = config if isinstance(config, str) else config.trainer
    if name not in TRAINERS:
        raise ConfigError(f"trainer must be one of {', '.join(TRAINERS)}, got {name!r}")
    return TRAINERS[name]


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Any training recipe with its ``KEY=VALUE`` overrides, read by its trainer
    (:func:`trainer_for`): a command policy's (``trainer: commands``) as a
    :class:`~derl_bench.grpo.commands.CommandGRPOConfig`, every other as a
    :class:`~derl_bench.grpo.config.TrainConfig`; refused as a
    :class:`~derl_bench.grpo.config.ConfigError`."""
    values = read_recipe(path)
    values.update(parse_overrides(overrides or []))
    return trainer_for(str(values.get("trainer", "compact"))).config(values)


def run_training(config: RunConfig, resume: bool = False) -> tuple[list[dict[str, float]], Path]:
    """Train as ``config`` says (its :func:`trainer_for`); returns the per-step metrics and
    the trained model's path, the checkpoint this very run wrote after its last step.

    A Python entry point, like the ``train`` command: the run's family is resolved and its
    Meta-Reward compiled here, once, and both are handed to the trainer. Data that differs
    from the catalogue is refused first (:func:`check_data`).
    """
    family = resolve_family(config.env_id)
    trainer = trainer_for(config)
    reward = trainer.compile(config, family)
    trained = trainer.train(config, reward, family, resume=resume)
    return trained.history, trained.model


__all__ = ["TRAINERS", "CommandTrainer", "CompactTrainer", "RunConfig", "TRLTrainer", "Trained",
           "Trainer", "check_data", "check_env", "load_recipe", "run_training", "trainer_for"]
