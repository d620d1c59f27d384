"""Population-batched GRPO: the runs of a reward-discovery generation, trained together.

The candidates of a generation train ``P`` policies from the same model, on the same recipe,
each on its own Meta-Reward. :func:`train_population` trains them as one stacked model
(:class:`~derl_bench.policies.population.Population`): every step samples, scores and updates
all ``P`` members at once, and each member computes exactly what its own run of the compact
trainer (:func:`derl_bench.grpo.trainer.train`) computes, up to float rounding:

1. its own problems: the reset seeds of its own ``seed`` and ``data_offset``;
2. its own samples: its own generator, seeded as its separate run seeds the global RNG, and
   drawn from only while its rows are running (same seeds, same samples);
3. its own compiled Meta-Reward and group-relative advantages;
4. its own update: the loss weights and KL reference of its run; gradients are clipped per
   member (a norm over the whole population would couple the runs); AdamW on the stacked
   tensors is AdamW on each member, since every one of its operations is elementwise. A
   stacked forward/backward pass holds ``micro_batch_size`` rows in all, as a separate run's
   does (:func:`member_rows`): micro-batches change memory, not the loss. Within a pass each
   member's distinct prompts run once and its completions attend to them
   (:func:`~derl_bench.policies.fast.prefixed_hidden`): the same log-probabilities for about
   half the tokens;
5. its own run directory: ``config.yaml``, ``metrics.jsonl``, TensorBoard, learning curve and
   checkpoints (an HF folder, and the member's own optimiser state).

Step times are shared: each member logs the population's time divided by ``P``.

Single-step envs on Qwen2/Llama-shaped models with the ``transformers`` backend and the compact
trainer train this way; anything else (:func:`population_support` says why) trains as separate
runs. For example, three rewards from the tiny model, resolved and compiled where they start::

    family = resolve_family(config.env_id)
    configs = [replace(config, meta_reward=expr, output_dir=f"runs/c{i}")
               for i, expr in enumerate(["outcome", "format_boxed", "g1"])]
    run = train_population(configs, [compile_run_reward(c, family) for c in configs], family)
    run.histories[0][-1]["reward/mean"], run.checkpoints[0]
"""

from __future__ import annotations

import copy
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from derl_bench.family import Family
from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.checkpoint import checkpoints_dir, quiet_transformers, save_checkpoint
from derl_bench.grpo.config import TINY_MODEL, TrainConfig
from derl_bench.grpo.loss import (
    LOGPROB_CHUNK,
    aggregate,
    chunked_logprobs,
    masked_mean,
    token_terms,
)
from derl_bench.grpo.runlog import RunLogger
from derl_bench.grpo.trainer import (
    diverged,
    initial_model_path,
    make_env,
    meta_reward_fn,
    record_config,
    step_metrics,
    step_seeds,
    update_settings,
)
from derl_bench.grpo.update import (
    UpdateSettings,
    make_optimizer,
    micro_batch_weights,
    nonfinite_weight,
)
from derl_bench.policies import LLMPolicy, load_model_and_tokenizer
from derl_bench.policies.backends import TransformersBackend
from derl_bench.policies.fast import prefixed_hidden
from derl_bench.policies.population import Population, StackedWeights, population_hidden
from derl_bench.policies.threads import configure_threads
from derl_bench.reward import MetaReward
from derl_bench.rollout import TrainBatch, collate, grade_single_step, single_step_prompts

MEMBER_FIELDS = frozenset({"meta_reward", "name", "output_dir", "seed", "data_offset",
                           "progress"})
"""Fields in which the members of one population may differ; every other field is shared."""


def population_support(config: TrainConfig, family: Family) -> str | None:
    """Why runs of ``config`` cannot train as a population (``None``: they can); ``family``:
    ``config.env_id``'s, resolved by the caller."""
    if config.trainer != "compact":
        return f"trainer {config.trainer!r} (only the compact trainer trains populations)"
    if config.backend != "transformers":
        return f"backend {config.backend!r} (populations sample with the lean sampler)"
    if config.env_actors:
        return "env_actors (a multi-turn setting)"
    if config.lora is not None:
        return "lora (a population stacks whole models; LoRA inner runs train separately)"
    if family.multi_turn:
        return f"{config.env_id} is multi-turn (populations train single-step envs)"
    if config.model != TINY_MODEL:
        from transformers import AutoConfig

        from derl_bench.policies.fast import supports_config

        try:
            model_config = AutoConfig.from_pretrained(config.model)
        except (OSError, ValueError) as err:
            return f"model {config.model!r} has no readable config ({err})"
        if not supports_config(model_config):
            return (f"model type {getattr(model_config, 'model_type', None)!r} (populations "
                    "run Qwen2/Llama-shaped decoders)")
    return None


def start_model(config: TrainConfig) -> tuple[str, int | None]:
    """What a run starts from: its model, and for the tiny model also the seed that builds it."""
    return config.model, config.seed if config.model == TINY_MODEL else None


def population_key(config: TrainConfig) -> tuple:
    """Runs with equal keys can train as one population: the same start model and the same
    recipe outside :data:`MEMBER_FIELDS`."""
    shared = sorted((k, repr(v)) for k, v in config.to_dict().items() if k not in MEMBER_FIELDS)
    return start_model(config), tuple(shared)


@dataclass
class PopulationRun:
    """What :func:`train_population` leaves: per member its logged steps and final model's
    path (as :func:`~derl_bench.grpo.dispatch.run_training` returns them), and the trained
    population itself."""

    histories: list[list[dict[str, float]]]
    checkpoints: list[Path]
    population: Population
    tokenizer: Any


def stack_batches(batches: Sequence[TrainBatch], pad_id: int,
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Members' batches as ``[P, N, T]`` ids, attention mask and loss mask, and ``[P, N]``
    advantages; shorter batches are padded with rows that carry no loss."""
    members, rows = len(batches), max(len(b) for b in batches)
    width = max(b.input_ids.shape[1] for b in batches)
    device = batches[0].input_ids.device
    ids = torch.full((members, rows, width), pad_id, dtype=torch.long, device=device)
    attention = torch.zeros((members, rows, width), dtype=torch.long, device=device)
    loss_mask = torch.zeros((members, rows, width), dtype=torch.float32, device=device)
    advantages = torch.zeros((members, rows), dtype=torch.float32, device=device)
    for m, b in enumerate(batches):
        n, t = b.input_ids.shape
        ids[m, :n, :t] = b.input_ids
        attention[m, :n, :t] = b.attention_mask
        loss_mask[m, :n, :t] = b.loss_mask
        advantages[m, :n] = b.advantages
    return ids, attention, loss_mask, advantages


def _shared_prompts(input_ids: torch.Tensor, loss_mask: torch.Tensor,
                    ) -> tuple[torch.Tensor, ...] | None:
    """Rows ``[P, N, T]`` of prompt + completion as each member's distinct prompts and every
    row's completion (the inputs of :func:`~derl_bench.policies.fast.prefixed_hidden`), with
    each row's completion length; ``None`` when a row is not a prompt followed by one
    completion, or when no member's rows share a prompt."""
    members, rows, width = input_ids.shape
    mask = loss_mask > 0
    lengths = mask.sum(-1)
    starts = mask.to(torch.uint8).argmax(-1)
    positions = torch.arange(width, device=mask.device)
    block = (positions >= starts[..., None]) & (positions < (starts + lengths)[..., None])
    if not torch.equal(block, mask) or bool(((starts < 1) & (lengths > 0)).any()):
        return None
    ids, starts_l, lengths_l = input_ids.tolist(), starts.tolist(), lengths.tolist()
    prompts: list[list[tuple[int, ...]]] = []
    owners: list[list[int]] = []
    for m in range(members):
        seen: dict[tuple[int, ...], int] = {}
        for r in range(rows):
            # A row with no completion (padding) reads nothing: any one-token prefix will do.
            prompt = tuple(ids[m][r][:starts_l[m][r] if lengths_l[m][r] else 1])
            seen.setdefault(prompt, len(seen))
        prompts.append(list(seen))
        owners.append([seen[tuple(ids[m][r][:starts_l[m][r] if lengths_l[m][r] else 1])]
                       for r in range(rows)])
    distinct = max(len(p) for p in prompts)
    if distinct == rows:
        return None
    padded = [p[min(i, len(p) - 1)] for p in prompts for i in range(distinct)]
    prefix_width = max(len(p) for p in padded)
    suffix_width = max(1, int(lengths.max()))
    prefix_ids = input_ids.new_zeros((len(padded), prefix_width))
    for i, prompt in enumerate(padded):
        prefix_ids[i, :len(prompt)] = torch.tensor(prompt, dtype=input_ids.dtype)
    prefix_lengths = torch.tensor([len(p) for p in padded], device=input_ids.device)
    owner = torch.tensor([m * distinct + o for m in range(members) for o in owners[m]],
                         device=input_ids.device)
    take = (starts.reshape(-1, 1) + torch.arange(suffix_width, device=mask.device)).clamp(
        max=width - 1)
    suffix_ids = input_ids.reshape(-1, width).gather(1, take)
    return prefix_ids, prefix_lengths, suffix_ids, owner, lengths.reshape(-1)


def population_token_logprobs(weights: StackedWeights, input_ids: torch.Tensor,
                              loss_mask: torch.Tensor, temperature: float = 1.0,
                              with_entropy: bool = False, chunk_size: int = LOGPROB_CHUNK,
                              recompute: bool = False,
                              ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`~derl_bench.grpo.loss.token_logprobs` of right-padded ``[P, N, T]`` rows, member
    ``m``'s rows under member ``m``: ``[P, N, T]``, 0 wherever ``loss_mask`` is 0.

    Rows that are a prompt followed by a completion run each member's distinct prompts once
    (a group's G rows share one: :func:`~derl_bench.policies.fast.prefixed_hidden`), then
    the completions. The output projection runs only on the positions the loss reads: each
    member's, gathered into a ``[P, M, hidden]`` block (``M`` the most any member has), and
    holds the logits of ``chunk_size`` positions in all at a time
    (:func:`~derl_bench.grpo.loss.chunked_logprobs`, ``chunk_size / P`` of each member's);
    ``recompute`` keeps only each decoder layer's input for the backward pass.
    """
    members = input_ids.shape[0]
    where = loss_mask[:, :, 1:] > 0
    shared = _shared_prompts(input_ids, loss_mask)
    if shared is None:
        hidden = population_hidden(weights, input_ids, recompute)[:, :, :-1]
        states, read = hidden.flatten(1, 2), where.flatten(1)
        targets = input_ids[:, :, 1:].flatten(1)
    else:
        prefix_ids, prefix_lengths, suffix_ids, owner, lengths = shared
        prefix_hidden, suffix_hidden = prefixed_hidden(weights, prefix_ids, prefix_lengths,
                                                       suffix_ids, owner, recompute)
        # Completion token j is predicted by the state before it: the prompt's last one for
        # j = 0, the completion's own j - 1 after that.
        last = prefix_hidden[owner, prefix_lengths[owner] - 1]
        predictors = torch.cat([last.unsqueeze(1), suffix_hidden[:, :-1]], dim=1)
        width = suffix_ids.shape[1]
        states = predictors.reshape(members, -1, predictors.shape[-1])
        read = (torch.arange(width, device=lengths.device) < lengths[:, None]).reshape(
            members, -1)
        targets = suffix_ids.reshape(members, -1)
    counts = read.sum(1)
    most = int(counts.max())
    # Each member's read positions first, in order (a stable sort of "not read"); both
    # layouts list a member's positions row by row, in the order of ``where``.
    order = torch.argsort((~read).to(torch.uint8), dim=1, stable=True)[:, :most]
    picked_states = states.gather(1, order.unsqueeze(-1).expand(-1, -1, states.shape[-1]))
    picked, ent = chunked_logprobs(weights.head, picked_states, targets.gather(1, order),
                                   temperature, with_entropy, max(1, chunk_size // members))
    kept = torch.arange(most, device=counts.device).unsqueeze(0) < counts.unsqueeze(1)
    zeros = picked.new_zeros(where.shape)
    lead = picked.new_zeros(where.shape[:2] + (1,))
    out = torch.cat([lead, zeros.masked_scatter(where, picked[kept])], dim=2)
    entropy = None
    if ent is not None:
        entropy = torch.cat([lead.detach(), zeros.detach().masked_scatter(where, ent[kept])], 2)
    return out, entropy


def population_logprobs(weights: StackedWeights, ids: torch.Tensor, attention: torch.Tensor,
                        loss_mask: torch.Tensor, micro_batch_size: int,
                        temperature: float = 1.0, chunk_size: int = LOGPROB_CHUNK,
                        ) -> torch.Tensor:
    """Detached log-probs of every row, padded to the batch width (as
    :func:`~derl_bench.grpo.update.batch_logprobs`, per member)."""
    out = torch.zeros_like(loss_mask)
    with torch.no_grad():
        for start in range(0, ids.shape[1], micro_batch_size):
            rows = slice(start, start + micro_batch_size)
            width = int(attention[:, rows].sum(-1).max())
            logp, _ = population_token_logprobs(weights, ids[:, rows, :width],
                                                loss_mask[:, rows, :width], temperature,
                                                chunk_size=chunk_size)
            out[:, rows, :width] = logp
    return out


def clip_grad_norms(params: Sequence[torch.Tensor], max_norm: float,
                    members: int) -> torch.Tensor:
    """``clip_grad_norm_`` applied to every member's gradients on its own; returns each
    member's norm before clipping ``(P,)``."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([g.reshape(members, -1).norm(dim=1) for g in grads], dim=1)
    total = norms.norm(dim=1)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
    return total


def member_rows(micro_batch_size: int, members: int) -> int:
    """Rows of each member in one stacked forward/backward pass: ``micro_batch_size`` rows in
    all, as a separate run holds (memory, and a CPU's caches, see rows, not members).

    >>> member_rows(64, 4), member_rows(16, 3), member_rows(2, 8)
    (16, 6, 1)
    """
    return max(1, -(-micro_batch_size // members))


def population_update(population: Population, optimizer: torch.optim.Optimizer,
                      batches: Sequence[TrainBatch], settings: UpdateSettings, pad_id: int,
                      reference: Population | None = None) -> list[dict[str, float]]:
    """:func:`~derl_bench.grpo.update.grpo_update` of every member on its own batch, in one
    pass; returns each member's statistics."""
    s = settings
    members = population.size
    ids, attention, loss_mask, advantages = stack_batches(batches, pad_id)
    rows_each = member_rows(s.micro_batch_size, members)
    use_kl = reference is not None and s.kl_coef > 0
    started = time.perf_counter()
    old_logp = (population_logprobs(population.weights, ids, attention, loss_mask, rows_each,
                                    s.temperature, s.logprob_chunk)
                if s.updates_per_batch > 1 else None)
    ref_logp = (population_logprobs(reference.weights, ids, attention, loss_mask, rows_each,
                                    s.temperature, s.logprob_chunk)
                if use_kl and reference is not None else None)
    reference_s = time.perf_counter() - started
    names = ("loss", "policy_loss", "kl", "clip_fraction", "entropy", "grad_norm")
    sums = {k: torch.zeros(members, device=ids.device) for k in names}
    for _ in range(s.updates_per_batch):
        optimizer.zero_grad(set_to_none=True)
        for start in range(0, ids.shape[1], rows_each):
            rows = slice(start, start + rows_each)
            width = int(attention[:, rows].sum(-1).max())
            mask = loss_mask[:, rows, :width]
            logp, entropy = population_token_logprobs(population.weights, ids[:, rows, :width],
                                                      mask, s.temperature, with_entropy=True,
                                                      chunk_size=s.logprob_chunk,
                                                      recompute=s.recompute_activations)
            terms = token_terms(
                logp, old_logp[:, rows, :width] if old_logp is not None else logp.detach(),
                advantages[:, rows],
                ref_logp=ref_logp[:, rows, :width] if ref_logp is not None else None,
                clip_eps=s.clip_eps, clip_eps_high=s.clip_eps_high,
                kl_coef=s.kl_coef if use_kl else 0.0)
            losses = aggregate(terms["loss"], mask, s.aggregation)
            weight = micro_batch_weights(mask, loss_mask, s.aggregation)
            (losses * weight).sum().backward()
            with torch.no_grad():
                share = weight / s.updates_per_batch
                sums["loss"] += losses.detach() * share
                for key, term in (("policy_loss", "policy"), ("kl", "kl"),
                                  ("clip_fraction", "clipped")):
                    sums[key] += masked_mean(terms[term].detach(), mask, (-2, -1)) * share
                assert entropy is not None
                sums["entropy"] += masked_mean(entropy, mask, (-2, -1)) * share
        norms = clip_grad_norms(population.parameters(), s.max_grad_norm, members)
        sums["grad_norm"] += norms / s.updates_per_batch
        optimizer.step()
    values = {k: v.tolist() for k, v in sums.items()}
    return [{**{k: float(values[k][m]) for k in names}, "reference_s": reference_s / members}
            for m in range(members)]


def member_optimizer_state(optimizer: torch.optim.Optimizer, index: int) -> dict[str, Any]:
    """Member ``index``'s share of the stacked optimiser's state: the ``state_dict`` an
    optimiser over that member's own model would have."""
    state = optimizer.state_dict()

    def share(value: Any) -> Any:
        if torch.is_tensor(value):
            return value[index].clone() if value.dim() > 0 else value.clone()
        return value

    return {"state": {i: {k: share(v) for k, v in entry.items()}
                      for i, entry in state["state"].items()},
            "param_groups": copy.deepcopy(state["param_groups"])}


def _check(configs: Sequence[TrainConfig], family: Family) -> None:
    keys = [population_key(c) for c in configs]
    if any(k != keys[0] for k in keys[1:]):
        differ = sorted({k for c in configs[1:] for k, v in c.to_dict().items()
                         if k not in MEMBER_FIELDS and configs[0].to_dict()[k] != v})
        raise ValueError("runs of one population must share their start model and recipe; "
                         f"these differ: {', '.join(differ) or 'seed (tiny model)'}")
    reason = population_support(configs[0], family)
    if reason is not None:
        raise ValueError(f"these runs cannot train as a population: {reason}")
    dirs = [c.run_dir.resolve() for c in configs]
    if len(set(dirs)) != len(dirs):
        raise ValueError("every run of a population needs its own output directory")


def _start_models(configs: Sequence[TrainConfig]) -> str:
    """Every run's start model where its separate run would have it; the shared path."""
    path = initial_model_path(configs[0])
    for config in configs[1:]:
        if config.model == TINY_MODEL and not (config.run_dir / "init-model").exists():
            shutil.copytree(path, config.run_dir / "init-model")
    return path


def train_population(configs: Sequence[TrainConfig], meta_rewards: Sequence[MetaReward],
                     family: Family) -> PopulationRun:
    """Train every run of ``configs`` (one start model, one recipe, their own rewards, seeds
    and run directories) as one population; see the module docstring. ``meta_rewards`` are
    the runs' Meta-Rewards (each its config's ``meta_reward``) and ``family`` their env's,
    compiled and resolved where the runs started."""
    if not configs:
        raise ValueError("a population needs at least one run")
    first = configs[0]
    _check(configs, family)
    first.check_machine()
    spec = family.spec
    members = len(configs)
    if len(meta_rewards) != members:
        raise ValueError(f"{members} runs but {len(meta_rewards)} Meta-Rewards")
    scores = [meta_reward_fn(reward) for reward in meta_rewards]
    for config in configs:
        record_config(config, resume=False)
    start_path = _start_models(configs)
    with quiet_transformers():
        model, tokenizer = load_model_and_tokenizer(start_path, first.device, first.dtype)
    configure_threads(model, first.num_threads)
    population = Population.replicate(model, members)
    reference = Population.shared(model, members) if first.kl_coef > 0 else None
    optimizer = make_optimizer(population, first.learning_rate, first.weight_decay)
    settings = update_settings(first)
    policy = LLMPolicy(model, tokenizer, family)  # prompts, decoding; sampling is the population's
    backend = cast(TransformersBackend, policy.backend)  # populations need it
    device = population.weights.embed.device
    env = make_env(first, family)
    loggers = [RunLogger(c.run_dir, 0, c.tensorboard) for c in configs]
    group = first.group_size
    try:
        for step in range(first.steps):
            # 1-2. Each member's problems and samples, as its own run draws them.
            t0 = time.perf_counter()
            seeds = [step_seeds(c, step) for c in configs]
            encoded: dict[tuple[int, ...], list[list[int]]] = {}
            for s in seeds:  # members with the same seed see the same problems
                if tuple(s) not in encoded:
                    encoded[tuple(s)] = single_step_prompts(env, policy, s, group)
            prompts = [encoded[tuple(s)] for s in seeds]
            generators = [torch.Generator(device=device).manual_seed(c.seed * 1_000_003 + step)
                          for c in configs]
            completions = population.sample(prompts, first.max_new_tokens, first.temperature,
                                            backend.eos_ids, backend.pad_id, first.top_p,
                                            generators)
            episodes = [grade_single_step(env, policy.generations(p, c), s, group)
                        for p, c, s in zip(prompts, completions, seeds, strict=True)]
            t_rollout = time.perf_counter() - t0

            # 3-4. Each member's Meta-Reward and advantages.
            rewards = [score(e) for score, e in zip(scores, episodes, strict=True)]
            advantages = [group_advantages(r, [e.group for e in eps],
                                           scale_by_std=first.scale_by_std)
                          for r, eps in zip(rewards, episodes, strict=True)]
            batches = [collate(eps, adv, tokenizer.pad_token_id).to(first.device)
                       for eps, adv in zip(episodes, advantages, strict=True)]

            # 5. Every member's update in one pass.
            t1 = time.perf_counter()
            stats = population_update(population, optimizer, batches, settings,
                                      tokenizer.pad_token_id, reference)
            t_update = time.perf_counter() - t1

            # 6. Log and checkpoint, member by member.
            done = step + 1
            for m, config in enumerate(configs):
                if not (math.isfinite(stats[m]["loss"]) and math.isfinite(stats[m]["grad_norm"])):
                    raise diverged(config, done, f"the loss is {stats[m]['loss']:.4g} and the "
                                                 f"gradient norm {stats[m]['grad_norm']:.4g}")
            save = done == first.steps or bool(first.save_every and done % first.save_every == 0)
            for m, config in enumerate(configs):
                metrics = step_metrics(episodes[m], rewards[m], advantages[m], spec, stats[m],
                                       batches[m], t_rollout / members, t_update / members,
                                       first.device)
                loggers[m].log(step, metrics)
                if save:
                    member = population.member(m)
                    broken = nonfinite_weight(member)
                    if broken is not None:
                        raise diverged(config, done, f"the weight {broken} is not finite")
                    save_checkpoint(config.run_dir, done, member, tokenizer,
                                    member_optimizer_state(optimizer, m)
                                    if config.save_optimizer_state else None,
                                    keep=config.keep_checkpoints)
                    loggers[m].plot()
    finally:
        for logger in loggers:
            logger.close()
        env.close()
    if first.steps == 0:
        for logger in loggers:
            logger.plot()
        paths = [Path(initial_model_path(c)) for c in configs]
    else:
        paths = [checkpoints_dir(c.run_dir) / f"step-{first.steps}" for c in configs]
    return PopulationRun([logger.history for logger in loggers], paths, population, tokenizer)


__all__ = ["MEMBER_FIELDS", "PopulationRun", "clip_grad_norms", "member_optimizer_state",
           "member_rows",
           "population_key", "population_logprobs", "population_support",
           "population_token_logprobs", "population_update", "stack_batches", "start_model",
           "train_population"]
