"""The compact GRPO trainer: one loop, top to bottom, for math and agent envs alike.

Each step:

1. pick ``prompts_per_step`` reset seeds (a pure function of the run seed and the step, so a
   resumed run sees the same problems/games as an uninterrupted one);
2. roll out ``group_size`` episodes per seed (single-step for math, multi-turn for agents);
3. score every episode with the compiled Meta-Reward over its per-step primitives;
4. group-relative advantages, shared by all steps of an episode;
5. one or more optimiser updates of the clipped GRPO loss with k3 KL to the frozen reference;
6. log, checkpoint.

For example ``train(load_config("baselines/gsm8k-outcome.yaml"))`` (the ``train`` command).
"""

from __future__ import annotations

import copy
import random
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from derl_bench.family import Family, FamilySpec, resolve_family
from derl_bench.files import write_text_atomic
from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.checkpoint import (
    ResumeError,
    check_same_run,
    latest_checkpoint,
    open_checkpoint,
    quiet_transformers,
    save_checkpoint,
    set_rng_state,
)
from derl_bench.grpo.config import TINY_MODEL, ConfigError, TrainConfig, compile_run_reward
from derl_bench.grpo.rundir import start_run_id
from derl_bench.grpo.runlog import RunLogger
from derl_bench.grpo.update import (
    DivergedError,
    UpdateSettings,
    grpo_update,
    make_optimizer,
    nonfinite_weight,
)
from derl_bench.policies import (
    LLMPolicy,
    SamplingConfig,
    TinyModelSpec,
    init_tiny_model,
    load_model_and_tokenizer,
    make_backend,
)
from derl_bench.policies.decoder import FrozenBase, is_peft_model
from derl_bench.policies.lora import LoraSpec, adapter_spec, apply_lora
from derl_bench.policies.threads import configure_threads
from derl_bench.reward import MetaReward
from derl_bench.rollout import Episode, collate, rollout_multi_turn, rollout_single_step

RewardFn = Callable[[Sequence[Episode]], np.ndarray]
EnvFactory = Callable[[], Any]

CONFIG_FILE = "config.yaml"


RESUMABLE_CHANGES = frozenset({"steps", "output_dir", "save_every", "keep_checkpoints",
                               "tensorboard", "progress", "device", "backend",
                               "micro_batch_size", "num_threads", "save_optimizer_state"})
"""Fields a resumed run may change: none of them alters what the run learns."""


def _leaves(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``settings`` with every nested mapping spread into dotted names (``inner.steps``)."""
    leaves: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            leaves.update(_leaves(value, f"{prefix}{key}."))
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


def check_unchanged(saved: dict[str, Any], current: dict[str, Any],
                    may_change: Iterable[str] = ()) -> None:
    """Refuse to resume a run whose settings changed, outside ``may_change`` (top-level
    fields): raise :class:`ResumeError` naming every changed setting, old -> new, a setting
    inside a section by its dotted name rather than the whole section.

    >>> check_unchanged({"lr": 1, "device": "cpu"}, {"lr": 1, "device": "cuda"}, ["device"])
    >>> check_unchanged({"lr": 1, "inner": {"steps": 2, "seed": 0}},
    ...                 {"lr": 2, "inner": {"steps": 3, "seed": 0}})
    Traceback (most recent call last):
    ...
    derl_bench.grpo.checkpoint.ResumeError: ... settings: inner.steps: 2 -> 3, lr: 1 -> 2
    """
    free = set(may_change)
    old, new = _leaves(saved), _leaves(current)
    changed = sorted(k for k in new.keys() | old.keys()
                     if k.split(".")[0] not in free and old.get(k) != new.get(k))
    if changed:
        raise ResumeError("the run was started with different settings: " + ", ".join(
            f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed))


def saved_settings(path: Path) -> dict[str, Any]:
    """The settings a run recorded in ``path`` (its ``config.yaml``), for a resume to compare;
    :class:`ResumeError` naming the file when it is damaged."""
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ResumeError(f"{path} is damaged (not YAML: {type(err).__name__}); the run cannot "
                          "be checked and is not resumed") from None
    if not isinstance(saved, dict):
        raise ResumeError(f"{path} is damaged (it holds no settings); the run cannot be "
                          "checked and is not resumed")
    return saved


def check_recorded(config: TrainConfig) -> None:
    """Refuse to resume a run whose recorded ``config.yaml`` differs from ``config`` in a
    setting that alters what the run learns; writes nothing."""
    path = config.run_dir / CONFIG_FILE
    if path.exists():
        check_unchanged(saved_settings(path), config.to_dict(), RESUMABLE_CHANGES)


def record_config(config: TrainConfig, resume: bool) -> None:
    """Write ``config.yaml`` into the run directory, and the run's id (a new one unless
    resuming); on resume, refuse a changed run (:func:`check_recorded`)."""
    if resume:
        check_recorded(config)
    write_text_atomic(config.run_dir / CONFIG_FILE,
                      yaml.safe_dump(config.to_dict(), sort_keys=False))
    start_run_id(config.run_dir, resume)


TINY_DIR = "init-model"
"""Where a ``model: tiny`` run writes the tiny model it starts from, in its run directory."""


def initial_model_path(config: TrainConfig) -> str:
    """The model the run starts from (and the KL reference): a name, a path, or the tiny model
    written once under the run directory."""
    if config.model != TINY_MODEL:
        return config.model
    path = config.run_dir / TINY_DIR
    if not (path / "config.json").exists():
        with quiet_transformers():
            init_tiny_model(path, TinyModelSpec(seed=config.seed), overwrite=True)
    return str(path)


def prepare_lora(model: Any, config: TrainConfig, base_path: str) -> Any:
    """The model a run trains: ``model`` with a fresh adapter when the run asks for LoRA and
    ``model`` has none; an adapter checkpoint's own adapter when it has one (a resumed or
    warm-started LoRA run continues it; its settings must be the run's); an adapter merged into
    its base when the run trains every weight."""
    if config.lora is None:
        return model.merge_and_unload() if is_peft_model(model) else model
    spec = LoraSpec.from_dict(config.lora)
    if not is_peft_model(model):
        return apply_lora(model, spec, base_path)
    if adapter_spec(model) != spec:
        raise ConfigError(f"lora: the starting checkpoint's adapter is {adapter_spec(model)}, "
                          f"the run asks for {spec}")
    return model


def meta_reward_fn(reward: MetaReward) -> RewardFn:
    """Score episodes with the run's Meta-Reward, compiled where the run started, over their
    per-step primitives."""

    def score(episodes: Sequence[Episode]) -> np.ndarray:
        return np.asarray(reward.episodic_from_steps([e.primitive_steps for e in episodes]),
                          dtype=np.float64)

    return score


def make_env(config: TrainConfig, family: Family) -> Any:
    """The run's env; agent envs take whole ``<think>…<action>…`` responses, parsed by the
    card's action parser (``family``: the run's, resolved where it started)."""
    import gymnasium as gym

    from derl_bench.observers.think_action import ThinkActionWrapper, action_parser_for

    kwargs = config.env_make_kwargs()
    if family.spec.multi_turn:
        # an explicit cap among the env's kwargs wins over the config's
        kwargs.setdefault("max_episode_steps", config.max_episode_steps)
        return ThinkActionWrapper(gym.make(config.env_id, **kwargs), action_parser_for(family))
    return gym.make(config.env_id, **kwargs)


def step_seeds(config: TrainConfig, step: int) -> list[int]:
    """Reset seeds of a step's groups: fixed by the run seed and the step (counted from
    ``data_offset``) alone."""
    rng = np.random.default_rng([config.seed, step + config.data_offset])
    return [int(s) for s in rng.integers(0, 2**31 - 1, size=config.prompts_per_step)]


def success_rate(episodes: Sequence[Episode], spec: FamilySpec) -> float:
    """Fraction of episodes that solved their task (last step's value of the family's success
    primitive, else a positive env reward)."""
    name = spec.success_primitive
    wins = [
        e.last(name) if e.steps and name in e.steps[-1].primitives
        else float(any(s.reward > 0 for s in e.steps))
        for e in episodes
    ]
    return float(np.mean(wins)) if wins else 0.0


def update_settings(config: TrainConfig) -> UpdateSettings:
    """The update's share of the run's settings."""
    return UpdateSettings(
        clip_eps=config.clip_eps, clip_eps_high=config.clip_eps_high, kl_coef=config.kl_coef,
        aggregation=config.aggregation, updates_per_batch=config.updates_per_batch,
        micro_batch_size=config.micro_batch_size, max_grad_norm=config.max_grad_norm,
        temperature=config.temperature, logprob_chunk=config.logprob_chunk,
        recompute_activations=config.recompute_activations)


UPDATE_METRICS = ("loss", "policy_loss", "kl", "clip_fraction", "entropy")
"""The update's statistics logged as they are (see :func:`step_metrics`)."""


def step_metrics(episodes: Sequence[Episode], rewards: np.ndarray, advantages: np.ndarray,
                 spec: FamilySpec, update: Mapping[str, float], batch: Any, rollout_s: float,
                 update_s: float, device: str) -> dict[str, float]:
    """What a step logs: reward, success, advantages, the update's statistics (``update`` as
    :func:`~derl_bench.grpo.update.grpo_update` returns them), lengths, phase times, token
    counts and the device's memory peak."""
    lengths = [len(s.completion_ids) for e in episodes for s in e.steps]
    return {
        "reward/mean": float(np.mean(rewards)),
        "reward/std": float(np.std(rewards)),
        "success/mean": success_rate(episodes, spec),
        "advantage/zero_fraction": float(np.mean(advantages == 0)),
        **{k: float(update[k]) for k in UPDATE_METRICS},
        "grad_norm": float(update["grad_norm"]),
        "length/completion_mean": float(np.mean(lengths)),
        "length/episode_mean": float(np.mean([e.length for e in episodes])),
        "time/rollout_s": rollout_s,
        "time/update_s": update_s,
        "time/reference_s": float(update["reference_s"]),
        "tokens/trained": float(batch.attention_mask.sum()),
        "tokens/generated": float(sum(lengths)),
        **device_memory(device),
    }


def diverged(config: TrainConfig, step: int, what: str) -> DivergedError:
    """The error of a run that diverged in ``step`` (counted from 1, as its checkpoints are):
    ``what`` turned non-finite; it names the run's last checkpoint, whose weights were checked
    to be finite when it was saved, since nothing of the step was."""
    last = latest_checkpoint(config.run_dir)
    kept = (f"its last good checkpoint (finite weights) is {last}" if last is not None else
            "it had saved no checkpoint")
    return DivergedError(f"training diverged in step {step} of {config.steps}: {what}; the run "
                         f"stopped without saving that step, and {kept} (a smaller "
                         f"learning_rate than {config.learning_rate:g} keeps it finite)")


def device_memory(device: str) -> dict[str, float]:
    """``memory/device_peak_gib``: the most GPU memory torch's allocator has held so far on
    ``device`` (empty on a CPU, whose peak is the process's RSS)."""
    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return {}
    return {"memory/device_peak_gib": torch.cuda.max_memory_allocated(device) / 2**30}


def train(config: TrainConfig, resume: bool = False, env_factory: EnvFactory | None = None,
          reward_fn: RewardFn | None = None,
          family: str | FamilySpec | Family | None = None) -> list[dict[str, float]]:
    """Run GRPO as ``config`` says; returns the logged metrics of every step of the run.

    A Python entry point: the run's family is resolved here, once (``family``, a
    :class:`~derl_bench.family.Family` or a family's name, gives the prompt, parser and
    rollout, also for an env that is not a derl id; without it, ``config.env_id``'s), and
    ``config.meta_reward`` is compiled here (:func:`~derl_bench.grpo.config.compile_run_reward`).
    ``env_factory`` and ``reward_fn`` replace the env built from ``config.env_id`` and the
    compiled Meta-Reward (a multi-turn ``env_factory``'s envs must end their episodes
    themselves, e.g. inside a ``TimeLimit``). Both are handed to :func:`run_grpo`.
    """
    parts = resolve_family(family or config.env_id)
    # A bad expression fails before any write.
    score = reward_fn or meta_reward_fn(compile_run_reward(
        config, parts, None if env_factory is None else parts.spec.domain))
    return run_grpo(config, score, parts, resume=resume, env_factory=env_factory)


def run_grpo(config: TrainConfig, score: RewardFn, family: Family, resume: bool = False,
             env_factory: EnvFactory | None = None) -> list[dict[str, float]]:
    """The GRPO loop of :func:`train` (its steps 1-6 in the module docstring), handed what
    the run's entry resolved: ``score``, the run's Meta-Reward as a reward function, and
    ``family``, which gives the prompt, parser, rollout and (without ``env_factory``) the env.
    """
    run_dir = config.run_dir
    spec = family.spec
    config.check_machine()
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        raise ResumeError(f"--resume: no checkpoint under {run_dir / 'checkpoints'}")
    state = None
    if checkpoint is not None:
        state = open_checkpoint(run_dir, checkpoint)
        check_same_run(run_dir, checkpoint, state)
    if resume:
        check_recorded(config)  # a changed run is refused before its model loads
    built = config.model == TINY_MODEL and not (run_dir / TINY_DIR).exists()
    start_path = initial_model_path(config)

    # Model, frozen reference, optimiser (restored from the checkpoint on resume).
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    try:
        with quiet_transformers():
            model, tokenizer = load_model_and_tokenizer(checkpoint or start_path,
                                                        config.device, config.dtype)
            model = prepare_lora(model, config, start_path)
            reference = None
            if config.kl_coef > 0 and config.lora is not None:
                reference = FrozenBase(model)
            elif config.kl_coef > 0:
                reference = (copy.deepcopy(model) if checkpoint is None else
                             load_model_and_tokenizer(start_path, config.device,
                                                      config.dtype)[0])
                reference.eval().requires_grad_(False)
        # Before the run's first record: a model the backend cannot run (vLLM refuses its
        # architecture or tokenizer) leaves no run behind either.
        backend = make_backend(config.backend, model, tokenizer,
                               model_path=str(checkpoint or start_path))
    except BaseException:
        if built:  # the tiny model of a run that never started would make the folder no run's
            shutil.rmtree(run_dir / TINY_DIR, ignore_errors=True)
        raise
    # The folder becomes a run (config.yaml, run-id) only once its model has loaded: a model
    # that does not load leaves nothing that would refuse the next try.
    record_config(config, resume)
    configure_threads(model, config.num_threads)
    optimizer = make_optimizer(model, config.learning_rate, config.weight_decay)
    settings = update_settings(config)
    start_step = 0
    if checkpoint is not None and state is not None:
        if state["optimizer"] is None:
            raise ConfigError(f"{checkpoint} holds no optimiser state (save_optimizer_state: "
                              f"false, as a meta loop's inner runs) and cannot resume; start "
                              f"a new run from its weights with model={checkpoint}")
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        start_step = int(state["step"])
    model.train()

    sampling = SamplingConfig(config.max_new_tokens, config.temperature, config.top_p)
    policy = LLMPolicy(model, tokenizer, family, backend=backend,
                       sampling=sampling, history_window=config.history_window)
    factory = env_factory or (lambda: make_env(config, family))
    if config.env_actors and spec.multi_turn:
        from derl_bench.rollout.remote import RemoteEnv

        local_factory = factory

        def factory() -> Any:
            return RemoteEnv(local_factory)
    n_envs = config.prompts_per_step * config.group_size if spec.multi_turn else 1
    envs = [factory() for _ in range(n_envs)]
    logger = RunLogger(run_dir, start_step, config.tensorboard)
    pad_id = tokenizer.pad_token_id

    steps: Any = range(start_step, config.steps)  # a tqdm bar over it when config.progress
    if config.progress:
        from derl_bench.progress import progress_bar

        steps = progress_bar(steps, initial=start_step, total=config.steps, desc=config.name)
    try:
        for step in steps:
            # 1-2. Roll out G episodes per seed; sampling noise is fixed by (seed, step).
            t0 = time.perf_counter()
            torch.manual_seed(config.seed * 1_000_003 + step)
            seeds = step_seeds(config, step)
            if spec.multi_turn:
                episodes = rollout_multi_turn(envs, policy, seeds, config.group_size)
            else:
                episodes = rollout_single_step(envs[0], policy, seeds, config.group_size)
            t_rollout = time.perf_counter() - t0

            # 3-4. Meta-Reward per episode, group-relative advantage per episode.
            rewards = score(episodes)
            advantages = group_advantages(rewards, [e.group for e in episodes],
                                          scale_by_std=config.scale_by_std)
            batch = collate(episodes, advantages, pad_id).to(config.device)

            # 5. Clipped-ratio updates (one forward/backward per micro-batch).
            t1 = time.perf_counter()
            try:
                sums = grpo_update(model, optimizer, batch, settings, reference)
            except DivergedError as err:
                raise diverged(config, step + 1, str(err)) from None
            policy.sync()
            t_update = time.perf_counter() - t1

            # 6. Log and checkpoint.
            metrics = step_metrics(episodes, rewards, advantages, spec, sums, batch, t_rollout,
                                   t_update, config.device)
            logger.log(step, metrics)
            if config.progress:
                steps.set_postfix(reward=f"{metrics['reward/mean']:.3f}",
                                  success=f"{metrics['success/mean']:.2f}")
            done = step + 1
            if done == config.steps or (config.save_every and done % config.save_every == 0):
                broken = nonfinite_weight(model)  # a checkpoint holds finite weights only
                if broken is not None:
                    raise diverged(config, done, f"the weight {broken} is not finite")
                save_checkpoint(run_dir, done, model, tokenizer,
                                optimizer if config.save_optimizer_state else None,
                                keep=config.keep_checkpoints)
                logger.plot()
    finally:
        logger.close()
        for env in envs:
            env.close()
    if start_step >= config.steps:
        logger.plot()
    return logger.history


def load_run_model(run_dir: str | Path) -> tuple[Any, Any]:
    """The newest checkpoint's model and tokenizer."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint under {Path(run_dir) / 'checkpoints'}")
    return load_model_and_tokenizer(checkpoint)
