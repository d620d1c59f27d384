"""Single-step math with TRL's ``GRPOTrainer``, rewarded by the Meta-Reward and the env's grading.

The dataset holds one row per problem the run will see (the same reset seeds as the compact
trainer, so both trainers train on the same problems in the same order); the reward function
replays each completion through the env (``reset(seed)`` + ``step(response)``), so grading and
primitives are exactly the env's, and scores the resulting primitives with the compiled
Meta-Reward. A second, zero-weight reward function logs the success rate (``outcome``).

The config maps onto TRL's: ``kl_coef`` -> ``beta``, ``clip_eps`` -> ``epsilon``,
``group_size`` -> ``num_generations``, ``aggregation: token`` -> ``loss_type: dapo``,
``scale_by_std`` -> ``scale_rewards: group | none``, ``updates_per_batch`` ->
``num_iterations``. TRL writes its own checkpoints (model, optimiser, scheduler, RNG) under
``<run>/trl/``; ``resume`` continues from the newest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from derl_bench.family import Family
from derl_bench.grpo.config import ConfigError, TrainConfig
from derl_bench.grpo.runlog import METRICS_FILE, plot_curve
from derl_bench.grpo.trainer import (
    ResumeError,
    initial_model_path,
    make_env,
    record_config,
    step_seeds,
)
from derl_bench.policies import load_model_and_tokenizer
from derl_bench.policies.lora import LoraSpec
from derl_bench.policies.prompts import problem_prompt
from derl_bench.reward import MetaReward

TRL_METRICS = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "rewards/success/mean": "success/mean",
    "kl": "kl",
    "entropy": "entropy",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "completions/mean_length": "length/completion_mean",
    "clip_ratio/region_mean": "clip_fraction",
    "frac_reward_zero_std": "advantage/zero_fraction",
}
"""TRL's log keys -> the compact trainer's metric names."""


def _replay_reward(config: TrainConfig, family: Family, reward: MetaReward,
                   ) -> tuple[Any, Any]:
    """Reward functions for TRL: the run's Meta-Reward, and the success rate (logged, weight
    0)."""
    env = make_env(config, family)

    def primitives(completions: Sequence[Any], reset_seed: Sequence[int]) -> list[dict]:
        out = []
        for completion, seed in zip(completions, reset_seed, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            env.reset(seed=int(seed))
            out.append(env.step(text)[-1]["primitives"])
        return out

    def meta_reward(prompts: Sequence[Any], completions: Sequence[Any],
                    reset_seed: Sequence[int], **_: Any) -> list[float]:
        steps = [[p] for p in primitives(completions, reset_seed)]
        return [float(r) for r in reward.episodic_from_steps(steps)]

    def success(prompts: Sequence[Any], completions: Sequence[Any],
                reset_seed: Sequence[int], **_: Any) -> list[float]:
        return [float(p.get("outcome", 0.0)) for p in primitives(completions, reset_seed)]

    return meta_reward, success


def _dataset(config: TrainConfig, family: Family) -> Any:
    from datasets import Dataset

    env = make_env(config, family)
    prompt = problem_prompt(family)  # as LLMPolicy asks
    rows = []
    for step in range(config.steps):
        for seed in step_seeds(config, step):
            question = env.reset(seed=seed)[0]
            rows.append({"prompt": prompt.messages(question), "reset_seed": seed})
    env.close()
    return Dataset.from_list(rows)


def trl_args(config: TrainConfig, trl_dir: Path, **overrides: Any) -> Any:
    """The run's settings as TRL's ``GRPOConfig`` (``overrides`` replace or add fields)."""
    from trl import GRPOConfig

    batch = config.prompts_per_step * config.group_size
    settings: dict[str, Any] = dict(
        output_dir=str(trl_dir),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=config.group_size,
        max_completion_length=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        lr_scheduler_type="constant",
        max_grad_norm=config.max_grad_norm,
        beta=config.kl_coef,
        epsilon=config.clip_eps,
        epsilon_high=config.clip_eps_high or config.clip_eps,
        num_iterations=config.updates_per_batch,
        loss_type="dapo" if config.aggregation == "token" else "grpo",
        scale_rewards="group" if config.scale_by_std else "none",
        reward_weights=[1.0, 0.0],
        max_steps=config.steps,
        logging_steps=1,
        save_strategy="steps",
        save_steps=config.save_every or config.steps,
        save_total_limit=config.keep_checkpoints,
        report_to=["tensorboard"] if config.tensorboard else [],
        seed=config.seed,
        use_cpu=config.device == "cpu",
        bf16=False,
        shuffle_dataset=False,
        disable_tqdm=not config.progress,
        use_vllm=config.backend == "vllm",
        vllm_mode="colocate",
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def trl_peft_config(config: TrainConfig) -> Any:
    """The recipe's LoRA adapter as peft's config for ``GRPOTrainer(peft_config=...)``, or None."""
    # TRL wraps the model with the adapter itself; its reference is then the adapter disabled.
    return LoraSpec.from_dict(config.lora).peft_config() if config.lora is not None else None


def train_trl(config: TrainConfig, reward: MetaReward, family: Family,
              resume: bool = False) -> list[dict[str, float]]:
    """Run single-step math GRPO with TRL; returns the per-step metrics (compact-trainer names).
    ``reward`` is the run's Meta-Reward and ``family`` its family, compiled and resolved where
    the run started (:class:`derl_bench.grpo.dispatch.TRLTrainer`)."""
    if family.multi_turn:
        raise ConfigError(f"train_trl handles single-step math envs, not {config.env_id!r}; "
                          "agents train with TRL through derl_bench.grpo.trl")
    config.check_machine()
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOTrainer

    trl_dir = config.run_dir / "trl"
    last = get_last_checkpoint(str(trl_dir)) if trl_dir.is_dir() else None
    if resume and last is None:
        raise ResumeError(f"--resume: no checkpoint under {trl_dir}")
    meta_reward, success = _replay_reward(config, family, reward)
    start_path = initial_model_path(config)
    _, tokenizer = load_model_and_tokenizer(start_path)
    # Only once the model has loaded: one that does not leaves no run to refuse a re-run.
    record_config(config, resume)
    trainer = GRPOTrainer(model=start_path, reward_funcs=[meta_reward, success],
                          args=trl_args(config, trl_dir), train_dataset=_dataset(config, family),
                          processing_class=tokenizer, peft_config=trl_peft_config(config))
    trainer.train(resume_from_checkpoint=last if resume else None)
    return finish_trl_run(trainer, config)


def finish_trl_run(trainer: Any, config: TrainConfig) -> list[dict[str, float]]:
    """Save the trained model as ``<run>/final-model`` and write the run's metrics and learning
    curve from TRL's log; returns the per-step metrics (compact-trainer names)."""
    trainer.save_model(str(config.run_dir / "final-model"))
    history = []
    for entry in trainer.state.log_history:
        if "reward" not in entry:
            continue
        row: dict[str, float] = {"step": int(entry["step"]) - 1}
        row.update({ours: float(entry[theirs]) for theirs, ours in TRL_METRICS.items()
                    if theirs in entry})
        history.append(row)
    (config.run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in history))
    plot_curve(history, config.run_dir / "learning_curve.png", title=config.run_dir.name)
    return history


__all__ = ["TRL_METRICS", "finish_trl_run", "train_trl", "trl_args", "trl_peft_config"]
