"""Which trainer runs a recipe: ``trainer: compact`` (every env) or ``trainer: trl``.

Every caller that trains from a :class:`~derl_bench.grpo.config.TrainConfig` — the ``train``
command, the inner runs of reward discovery — goes through :func:`run_training`, so a recipe's
``trainer`` is honoured everywhere or rejected with a clear error, never silently ignored.
The caller hands down the run's Meta-Reward, compiled once where the run started.
``trainer: trl`` for an agent env is the one such rejection here: TRL's multi-turn trainer
(:mod:`derl_bench.integrations.trl.agent`) is handed recipes by the ``train`` command only.

Every run first compares the data its env reads with the data catalogue's checksums
(:func:`check_data`): a file changed since its download is refused, named, before training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from derl_bench.family import Family, find_family, resolve
from derl_bench.grpo.config import TrainConfig, config_from_dict, parse_overrides, read_recipe
from derl_bench.reward import MetaReward

TRL_TRAINER = "derl_bench.integrations.trl.math:train_trl"
"""TRL's single-step trainer, ``trainer: trl``. It sits in a later stage
(:mod:`derl_bench.integrations.trl`, beside TRL's agent trainer), so it is named by its dotted
path, the way a card names its hooks, and imported when a recipe asks for it."""


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Any:
    """Any training recipe with its ``KEY=VALUE`` overrides: a command policy's
    (``trainer: commands``) as a :class:`~derl_bench.grpo.commands.CommandGRPOConfig`, every
    other as a :class:`TrainConfig`; either refused as a
    :class:`~derl_bench.grpo.config.ConfigError`."""
    from derl_bench.grpo.commands import TRAINER, command_config_from_dict

    values = read_recipe(path)
    values.update(parse_overrides(overrides or []))
    if values.get("trainer") == TRAINER:
        return command_config_from_dict(values)
    return config_from_dict(values)


def check_data(config: TrainConfig, family: Family | None = None) -> None:
    """Refuse a run whose env would read data that differs from the data catalogue's checksums:
    :class:`~derl_bench.data.verify.DataChecksumError` names the file. Files are hashed once
    per process while they stay unchanged, so inner runs on the same data cost nothing more."""
    from derl_bench.data.verify import check_data as check_against_catalogue
    from derl_bench.envs.items import data_files

    kwargs = config.env_make_kwargs()
    family = family or find_family(config.env_id)
    files = [] if family is None else data_files(family, config.env_id, **kwargs)
    check_against_catalogue(files, root=kwargs.get("data_root"))


def run_training(config: TrainConfig, resume: bool = False, reward: MetaReward | None = None,
                 family: Family | None = None) -> tuple[list[dict[str, float]], Path]:
    """Train as ``config`` says; returns the per-step metrics and the trained model's path.

    ``reward`` is the run's Meta-Reward, compiled where the run started
    (:func:`~derl_bench.grpo.config.compile_run_reward`); without it the trainer compiles
    ``config.meta_reward``; ``family`` is the run's family, resolved where it started (both
    trainers take it; else the trainer resolves ``config.env_id``'s). The path is the
    checkpoint this very run wrote after its last step (never an older one left in the run
    directory). Data that differs from the catalogue is
    refused first (:func:`check_data`).
    """
    check_data(config, family)
    if config.trainer == "trl":
        history = resolve(TRL_TRAINER)(config, resume=resume, reward=reward, family=family)
        return history, config.run_dir / "final-model"
    from derl_bench.grpo.checkpoint import checkpoints_dir
    from derl_bench.grpo.trainer import initial_model_path, train
    from derl_bench.policies.loading import is_adapter_dir

    history = train(config, resume=resume, reward=reward, family=family)
    if config.steps == 0:
        return history, Path(initial_model_path(config))
    path = checkpoints_dir(config.run_dir) / f"step-{config.steps}"
    # A LoRA run's checkpoint holds the adapter (``adapter_config.json``), not a whole model.
    if not ((path / "config.json").is_file() or is_adapter_dir(path)):
        raise RuntimeError(f"run {config.run_dir} did not leave its final checkpoint {path}")
    return history, path


__all__ = ["check_data", "load_recipe", "run_training"]
