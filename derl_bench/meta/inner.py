"""Train one inner policy on a Meta-Reward and score it on the fixed validation set.

Validation is the same for every candidate of a run: the first ``validation_episodes`` items of
the validation split in manifest order, each once, decoded greedily (temperature 0), so two
candidates' scores differ only because their policies do. Every env validates on its
``validation`` split, which inner training never sees and which shares nothing with any eval
set: the math family's generated or upstream validation problems, ALFWorld's ``valid_train``
games, a held-out slice of ScienceWorld's training variations (see the env cards and
``docs/meta-loop.md``).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

import gymnasium as gym

from derl_bench.envs.items import eval_splits, split_items
from derl_bench.family import Family, FamilySpec
from derl_bench.grpo.checkpoint import quiet_transformers
from derl_bench.grpo.commands import CommandGRPOConfig, continues
from derl_bench.grpo.config import ConfigError, TrainConfig, config_from_dict
from derl_bench.grpo.dispatch import trainer_for
from derl_bench.grpo.population import PopulationRun, train_population
from derl_bench.grpo.trainer import make_env, success_rate
from derl_bench.meta.config import MetaConfig
from derl_bench.policies import LLMPolicy, SamplingConfig
from derl_bench.policies.backends import TransformersBackend
from derl_bench.reward import MetaReward, compile_reward, env_primitives
from derl_bench.rollout import (
    Episode,
    grade_single_step,
    rollout_multi_turn,
    rollout_single_step,
    single_step_prompts,
)


@dataclass
class InnerResult:
    """What one inner run produced."""

    score: float
    """Validation success rate of the trained policy."""
    train_reward: float
    """Mean Meta-Reward of the run's last step."""
    checkpoint: Path
    metrics: dict[str, float]
    """Further validation figures (``format`` where the env reports it)."""


def inner_config(meta: MetaConfig, expr: str, run_dir: Path, start_model: str | None,
                 data_offset: int = 0, seed: int | None = None) -> TrainConfig:
    """The inner run's TrainConfig: the meta recipe's ``inner`` with this candidate's reward.

    ``seed`` is the candidate's inner seed (its slot's, or the one ``fixed`` names: see
    :attr:`MetaConfig.inner_seeds`); ``None`` keeps the inner recipe's, which defaults to the
    run's."""
    # An inner run is scored, compared and warm-started from, never resumed: its checkpoints
    # need no optimiser state.
    changes: dict = {"meta_reward": expr, "name": run_dir.name, "output_dir": str(run_dir),
                     "progress": False, "data_offset": data_offset,
                     "save_optimizer_state": False}
    if start_model is not None:
        changes["model"] = start_model
    if seed is not None:
        changes["seed"] = seed
    return replace(meta.inner, resolved=meta.family, **changes)


def compile_inner_reward(meta: MetaConfig, expr: str) -> MetaReward:
    """``expr`` compiled for the inner runs of ``meta``: over the primitives its inner env
    emits, under the inner recipe's ``reward_semantics``. The loop compiles each candidate
    once, here, and hands the :class:`~derl_bench.reward.MetaReward` to its inner run."""
    env_id = meta.inner.env_id
    return compile_reward(expr, env_primitives(env_id, meta.family),
                          semantics=meta.inner.reward_semantics)


def validation_split(meta: MetaConfig) -> str:
    """The split inner policies are scored on (see :attr:`MetaConfig.validation_split`)."""
    return meta.validation_split or "validation"


def validation_config(meta: MetaConfig, config: TrainConfig) -> TrainConfig:
    """``config`` with the env on the validation split (what scoring plays)."""
    return config_from_dict({**config.to_dict(), "split": validation_split(meta)})


class EvalSplitOverlapError(ConfigError):
    """A meta run would select Meta-Rewards on items of an eval set."""


def check_validation_split(meta: MetaConfig) -> None:
    """Refuse a run whose validation split shares an item with any level's eval set of the env.

    Selecting rewards by their policies' score on eval items makes the eval score of the
    selected reward an optimistic estimate (the released DERL code scores its candidates on
    MATH's test split). The check compares item ids (:mod:`derl_bench.envs.items`), so it reads
    the cards and the split lists only: no model, no env, no rollout.
    """
    env_id, family = meta.inner.env_id, meta.family
    kwargs = validation_config(meta, meta.inner).env_make_kwargs()
    split, level = str(kwargs.pop("split")), kwargs.pop("level", None)
    try:
        chosen = set(split_items(family, env_id, split, level, **kwargs))
    except (ValueError, KeyError) as err:
        raise ConfigError(f"validation_split {split!r} of {env_id}: {err}") from None
    for eval_level, eval_kwargs in eval_splits(family, env_id, **kwargs).items():
        rest = dict(eval_kwargs)
        shared = chosen.intersection(split_items(
            family, env_id, rest.pop("split"), rest.pop("level", None), **{**kwargs, **rest}))
        if shared:
            where = ", ".join(f"{k}={v}" for k, v in eval_kwargs.items())
            raise EvalSplitOverlapError(
                f"validation_split {split!r} of {env_id} shares {len(shared)} of its "
                f"{len(chosen)} items with the {eval_level} eval set ({where}): selecting "
                "Meta-Rewards on eval items makes the reported eval score optimistic. Score "
                "candidates on a split disjoint from every eval set (the default, "
                "'validation').")


class FixedItem(gym.Wrapper):
    """An env whose every reset plays item ``index`` of its split (in manifest order), whatever
    the seed: one slot of a fixed validation set."""

    def __init__(self, env: gym.Env, index: int) -> None:
        super().__init__(env)
        self.index = index

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        return self.env.reset(seed=seed, options={**(options or {}), "index": self.index})


def validation_envs(meta: MetaConfig, config: TrainConfig) -> list[gym.Env]:
    """A multi-turn env's fixed validation set: one env per item, the first
    ``validation_episodes`` items of the validation split, each once."""
    scoring = validation_config(meta, config)
    return [FixedItem(make_env(scoring, meta.family), i)
            for i in range(meta.validation_episodes)]


def validation_score(model_path: str | Path, meta: MetaConfig, config: TrainConfig,
                     ) -> tuple[float, dict[str, float]]:
    """Success rate of the policy at ``model_path`` on the validation set (module docstring),
    and the mean of the ``format_boxed`` primitive where the env emits it."""
    family = meta.family
    spec = family.spec
    with quiet_transformers():
        policy = LLMPolicy.from_pretrained(
            model_path, family, device=config.device, dtype=config.dtype,
            sampling=SamplingConfig(config.max_new_tokens, meta.validation_temperature, 1.0,
                                    seed=meta.validation_seed),
            history_window=config.history_window)
    if not spec.multi_turn:
        env = _validation_env(meta, config, family)
        try:
            episodes = rollout_single_step(env, policy, list(range(meta.validation_episodes)), 1,
                                           by_index=True)
        finally:
            env.close()
    else:
        envs = validation_envs(meta, config)
        try:
            # Each env plays its own item; the seeds only seed the env's RNG.
            seeds = [meta.validation_seed + i for i in range(len(envs))]
            episodes = rollout_multi_turn(envs, policy, seeds, 1)
        finally:
            for env in envs:
                env.close()
    return validation_figures(episodes, spec)


def validation_figures(episodes: Sequence[Episode], spec: FamilySpec,
                       ) -> tuple[float, dict[str, float]]:
    """Success rate of validation ``episodes`` and the mean of the ``format_boxed`` primitive
    where the env emits it."""
    metrics: dict[str, float] = {}
    formats = [e.last("format_boxed") for e in episodes
               if e.steps and "format_boxed" in e.steps[-1].primitives]
    if formats:
        metrics["format"] = float(sum(formats) / len(formats))
    return success_rate(episodes, spec), metrics


def _validation_env(meta: MetaConfig, config: TrainConfig, family: Family) -> gym.Env:
    """A single-step env's validation split, checked to hold the validation set."""
    scoring = validation_config(meta, config)
    env = make_env(scoring, family)
    count = len(env.unwrapped.problems)
    if meta.validation_episodes > count:
        env.close()
        raise ValueError(f"validation_episodes={meta.validation_episodes} but the "
                         f"{scoring.split} split has {count} problems")
    return env


def train_and_score(meta: MetaConfig, reward: MetaReward, run_dir: Path,
                    start_model: str | None, data_offset: int = 0, seed: int | None = None,
                    ) -> InnerResult:
    """Train on ``reward`` (compiled by :func:`compile_inner_reward`) in ``run_dir`` and score
    the policy this run trained.

    Anything an earlier run left in ``run_dir`` is removed first, so a stale checkpoint can
    never be scored in place of this run's; except a command run's checkpoint written with
    exactly this run's settings (a search killed part-way through it): that run continues
    from it, to the weights and rows it would have reached unstopped.
    """
    config = inner_config(meta, reward.expr, run_dir, start_model, data_offset, seed)
    family = meta.family
    # The command policy draws its training games by seed from the games its base was not
    # taught on, so a warm start's data offset has nothing to continue: each run draws anew.
    run = config if meta.inner_commands is None else command_config(meta, config)
    if isinstance(run, CommandGRPOConfig):
        resume = continues(run)
    else:
        resume = False
        if run_dir.exists():
            shutil.rmtree(run_dir)
    trained = trainer_for(run).train(run, reward, family, resume=resume)
    steps = [row for row in trained.history if "reward/mean" in row]  # not validation rows
    last_reward = float(steps[-1]["reward/mean"]) if steps else float("nan")
    if trained.score is not None:  # the trainer played the validation games itself
        return InnerResult(trained.score, last_reward, trained.model, {})
    score, metrics = validation_score(trained.model, meta, config)
    return InnerResult(score, last_reward, trained.model, metrics)


def command_config(meta: MetaConfig, config: TrainConfig) -> CommandGRPOConfig:
    """The command policy's run for the inner run ``config`` (:attr:`MetaConfig.
    inner_commands`): its reward, seed, start model, level and folder, scored on
    ``validation_episodes`` validation games."""
    return CommandGRPOConfig(
        model=str(config.model), output_dir=str(config.run_dir),
        meta_reward=str(config.meta_reward), env_id=config.env_id,
        level=config.level or "L0", seed=config.seed,
        validation_games=meta.validation_episodes,
        **(meta.inner_commands or {}))


@dataclass(frozen=True)
class InnerSpec:
    """One inner run of a batch: what :func:`train_and_score` takes."""

    reward: MetaReward
    run_dir: Path
    start_model: str | None = None
    data_offset: int = 0
    seed: int | None = None


def population_validation(run: PopulationRun, meta: MetaConfig, config: TrainConfig,
                          ) -> list[tuple[float, dict[str, float]]]:
    """:func:`validation_score` of every member of a trained population, decoded together:
    the same validation problems, each member with the generator its own policy would use."""
    import torch

    family = meta.family
    spec = family.spec
    if spec.multi_turn:
        raise ValueError("population validation covers single-step envs")
    population = run.population
    policy = LLMPolicy(population.template, run.tokenizer, family)
    backend = cast(TransformersBackend, policy.backend)  # populations need it
    indices = list(range(meta.validation_episodes))
    env = _validation_env(meta, config, family)
    try:
        prompts = single_step_prompts(env, policy, indices, 1, by_index=True)
        device = population.weights.embed.device
        generators = [torch.Generator(device=device).manual_seed(meta.validation_seed)
                      for _ in range(population.size)]
        completions = population.sample([prompts] * population.size, config.max_new_tokens,
                                        meta.validation_temperature, backend.eos_ids,
                                        backend.pad_id, 1.0, generators)
        return [validation_figures(grade_single_step(env, policy.generations(prompts, c),
                                                     indices, 1, by_index=True), spec)
                for c in completions]
    finally:
        env.close()


def train_and_score_population(meta: MetaConfig, runs: Sequence[InnerSpec],
                               ) -> list[InnerResult]:
    """:func:`train_and_score` of every run in ``runs`` (one start model), trained and
    validated as one population (:mod:`derl_bench.grpo.population`)."""
    for spec in runs:
        if spec.run_dir.exists():
            shutil.rmtree(spec.run_dir)
    configs = [inner_config(meta, s.reward.expr, s.run_dir, s.start_model, s.data_offset,
                            s.seed) for s in runs]
    run = train_population(configs, [s.reward for s in runs], meta.family)
    figures = population_validation(run, meta, configs[0])
    return [InnerResult(score, float(history[-1]["reward/mean"]) if history else float("nan"),
                        checkpoint, metrics)
            for (score, metrics), history, checkpoint
            in zip(figures, run.histories, run.checkpoints, strict=True)]
