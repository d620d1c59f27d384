"""GRPO for a command policy: multi-turn episodes, the Meta-Reward on their primitives, one
clipped policy-gradient update over every executed command.

The policy picks one admissible command per turn (:mod:`derl_bench.policies.commands`); its
probability of a command is exact under trie-constrained decoding, so the ratio of the update
is a ratio of command probabilities, computed by the same function at rollout and update. One
step of an inner run reads top to bottom:

1. draw ``games_per_step`` games of the training pool (games the base was not taught on,
   :func:`training_pool`) and play each ``group_size`` times,
   sampling token by token inside each state's trie, on ``envs`` envs in lockstep
   (:func:`derl_bench.rollout.commands.play`);
2. score every episode with the Meta-Reward (``episodic_from_steps`` over its primitives);
3. the advantage of an episode is its reward centred (and scaled) within its game's group;
   every command of the episode carries it;
4. one PPO-clipped update over all commands of the batch (mean over commands, as DAPO's
   token-level mean), minibatched, with an exact KL to the frozen base over the admissible
   commands when ``kl_coef`` > 0.

At the end the policy plays ``validation_games`` games of the level's validation split
greedily: their success rate is the inner run's score (what reward discovery ranks). The
commands reach the env as ``<think></think><action>command</action>`` through
:class:`~derl_bench.observers.think_action.ThinkActionWrapper`, so ``format_valid`` is a real
primitive (1 on every step: the decoder always writes the tags), and
``action_admissible`` is 1 on every step (the decoder writes only admissible commands).

    history = train_commands(CommandGRPOConfig(model="runs/alfworld-base", output_dir="runs/g",
                                               env_id="derl/ALFWorld-v0", meta_reward="success"))
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl_bench.family import Family, resolve_family
from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.update import DivergedError
from derl_bench.reward import MetaReward
from derl_bench.reward.semantics import DERL


@dataclass
class CommandGRPOConfig:
    """One inner GRPO run of a command policy (see the module docstring)."""

    model: str
    """The base: a command-model folder (``derl-bench model agent-base``)."""
    output_dir: str
    meta_reward: str = "success"
    env_id: str = field(kw_only=True)
    """An agent env whose card has a ``commands`` hook (the state the policy reads); named
    by keyword."""
    level: str = "L0"
    seed: int = 0
    steps: int = 12
    games_per_step: int = 4
    group_size: int = 8
    learning_rate: float = 5e-5
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0
    minibatch: int = 64
    """Commands per forward/backward of the update."""
    pool: int = 200
    """Training games drawn once per run (each loaded once); every step draws from these."""
    validation_games: int = 64
    envs: int = 16
    num_threads: int = 2
    max_episode_steps: int = 30
    data_root: str | None = None

    def __post_init__(self) -> None:
        from derl_bench.settings import (
            COUNT,
            LEARNING_RATE,
            MAX_GRAD_NORM,
            POSITIVE,
            SEED,
            Rule,
            at_least,
            number_at_least,
            refuse,
        )

        rules = {"seed": SEED, "steps": at_least(0), "games_per_step": COUNT,
                 "group_size": at_least(2), "learning_rate": LEARNING_RATE,
                 "clip_eps": Rule(lambda v: POSITIVE.test(v) and v < 1, "in (0, 1)"),
                 "kl_coef": number_at_least(0), "max_grad_norm": MAX_GRAD_NORM,
                 "minibatch": COUNT, "pool": COUNT, "validation_games": at_least(0),
                 "envs": COUNT, "num_threads": COUNT, "max_episode_steps": COUNT}
        refuse((name, getattr(self, name), rule) for name, rule in rules.items())


def respond(command: str) -> str:
    """What the env behind the think/action parser receives for ``command``."""
    return f"<think></think><action>{command}</action>"


def base_games(model: str | Path, total: int) -> set[int]:
    """The training games a teacher-taught base (``dagger.json`` beside its weights) was
    built on: its record's ``pool``, or the pool its seed draws (the same permutation
    :func:`~derl_bench.sft.dagger.run_dagger` draws); empty for any other model."""
    record_file = Path(model) / "dagger.json"
    if not record_file.is_file():
        return set()
    record = json.loads(record_file.read_text())
    if "pool" in record:
        return {int(i) for i in record["pool"]}
    base = record["config"]
    if record.get("games_in_split") != total:
        return set()
    return {int(i) for i in np.random.default_rng(base["seed"]).permutation(total)[:base["pool"]]}


def training_pool(config: CommandGRPOConfig, total: int) -> np.ndarray:
    """The run's ``pool`` training games: drawn with the run's seed among the games its base
    was not taught on, so GRPO meets games the base has not memorised (on its own teaching
    games a base wins nearly every episode, and no group's rewards differ)."""
    taught = base_games(config.model, total)
    rng = np.random.default_rng([config.seed, 0x67727030])  # a stream of its own
    fresh = np.array([g for g in rng.permutation(total) if int(g) not in taught])
    if len(fresh) < config.pool:
        raise ValueError(f"only {len(fresh)} training games are left beside the base's "
                         f"{len(taught)}; pool {config.pool} is too large")
    return fresh[:config.pool]


def make_envs(config: CommandGRPOConfig, split: str, n: int) -> list[Any]:
    """``n`` envs of ``split`` behind the think/action parser (its ``format_valid``)."""
    from derl_bench.rollout.commands import command_envs

    return command_envs(config.env_id, config.level, split, n,
                        max_episode_steps=config.max_episode_steps, data_root=config.data_root,
                        think_action=True)


def train_commands(config: CommandGRPOConfig, log: Any = None,
                   reward: MetaReward | None = None,
                   family: Family | None = None) -> list[dict[str, Any]]:
    """Run the inner GRPO run ``config`` describes; write the model, ``metrics.jsonl`` and
    ``result.json`` to ``output_dir``; return the per-step metrics (the last row holds the
    validation score). ``reward`` is ``config.meta_reward`` compiled where the run started
    (else it is compiled here), and ``family`` the env's family, resolved there (else
    here)."""
    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.policies.command_model import command_parts
    from derl_bench.policies.commands import CommandPolicy, chosen_log_probs, command_log_probs
    from derl_bench.progress import quiet_transformers
    from derl_bench.reward import compile_reward
    from derl_bench.reward.primitives import primitive_set
    from derl_bench.rollout.commands import game_count, play

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    family = family or resolve_family(config.env_id)
    if reward is None:  # over the handed family's primitives: no second lookup by env id
        reward = compile_reward(config.meta_reward, primitive_set(config.env_id, family))
    elif (reward.expr, reward.domain, reward.semantics) != (config.meta_reward, config.env_id,
                                                            DERL):
        raise ValueError(f"the Meta-Reward handed to the run, {reward!r}, is not its "
                         f"config's: {config.meta_reward!r} over {config.env_id!r}")
    # a card without a commands hook is refused, naming the hook (CardError)
    state = command_parts(family).state
    model, tokenizer = load_model_and_tokenizer(config.model)
    model.eval()
    policy = CommandPolicy(model, tokenizer)
    reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    started = time.perf_counter()
    envs = make_envs(config, "train", config.envs)
    total = game_count(envs[0])
    pool = training_pool(config, total)
    history: list[dict[str, Any]] = []
    try:
        for step in range(1, config.steps + 1):
            # 1. Rollouts: each drawn game played group_size times.
            drawn = rng.choice(pool, config.games_per_step, replace=False)
            games = [{"index": int(g)} for g in drawn for _ in range(config.group_size)]
            began = time.perf_counter()
            timing: dict[str, float] = {}
            episodes = play(envs, policy, games, state, seed=config.seed * 100_003 + step,
                            respond=respond, decode=True, timing=timing)
            rollout_s = time.perf_counter() - began
            # 2-3. Rewards and group advantages.
            rewards = reward.episodic_from_steps([e.primitive_steps() for e in episodes])
            groups = np.repeat(np.arange(config.games_per_step), config.group_size)
            advantages = group_advantages(rewards, groups)
            moving = [int(np.any(advantages[groups == g] != 0))
                      for g in range(config.games_per_step)]
            # 4. One clipped update over every command executed.
            rows = [(s, float(a)) for e, a in zip(episodes, advantages, strict=True)
                    for s in e.steps if a != 0.0]
            began = time.perf_counter()
            stats = {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0}
            if rows:
                model.train()
                optimizer.zero_grad(set_to_none=True)
                for start in range(0, len(rows), config.minibatch):
                    part = rows[start:start + config.minibatch]
                    ids = [s.ids for s, _ in part]
                    chosen = chosen_log_probs(model, ids, [s.chosen for s, _ in part],
                                              policy.end_id)
                    old = torch.tensor([s.log_prob for s, _ in part], dtype=chosen.dtype)
                    adv = torch.tensor([a for _, a in part], dtype=chosen.dtype)
                    ratio = (chosen - old).exp()
                    clipped = ratio.clamp(1 - config.clip_eps, 1 + config.clip_eps)
                    loss = -torch.minimum(ratio * adv, clipped * adv).sum() / len(rows)
                    if reference is not None:  # the exact KL needs every command's
                        new = command_log_probs(model, ids, policy.end_id)
                        with torch.no_grad():
                            ref = command_log_probs(reference, ids, policy.end_id)
                        kl = sum(((lp.exp() * (lp - r)).sum() for lp, r in zip(new, ref,
                                                                                strict=True)),
                                 torch.zeros((), dtype=chosen.dtype))
                        loss = loss + config.kl_coef * kl / len(rows)
                        stats["kl"] += float(kl.detach()) / len(rows)
                    loss.backward()
                    stats["loss"] += float(loss.detach())
                    stats["clip_fraction"] += float(((ratio - clipped).abs() > 0).sum()) / len(rows)
                norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                            config.max_grad_norm))
                if not (math.isfinite(stats["loss"]) and math.isfinite(norm)):
                    raise DivergedError(
                        f"training diverged in step {step} of {config.steps}: the loss is "
                        f"{stats['loss']:.4g} and the gradient norm {norm:.4g}; nothing was "
                        f"saved (the model is written after the last step; a smaller "
                        f"learning_rate than {config.learning_rate:g} keeps it finite)")
                optimizer.step()
                model.eval()
            update_s = time.perf_counter() - began
            row = {"step": step, "reward/mean": float(np.mean(rewards)),
                   "success": float(np.mean([e.won for e in episodes])),
                   "length/mean": float(np.mean([e.length for e in episodes])),
                   "groups_with_advantage": float(np.mean(moving)),
                   "commands/trained": len(rows), **stats,
                   "time/rollout_s": rollout_s, "time/update_s": update_s,
                   "time/game_reset_s": timing["reset_s"], "time/env_step_s": timing["step_s"],
                   "time/model_rollout_s": timing["model_s"],
                   "time/elapsed_s": time.perf_counter() - started}
            history.append(row)
            if log is not None:
                log(f"step {step}: reward {row['reward/mean']:.3f}, success {row['success']:.3f}"
                    f", groups moving {row['groups_with_advantage']:.2f}, "
                    f"{rollout_s:.1f}+{update_s:.1f} s")
    finally:
        for env in envs:
            env.close()
    # The inner run's score: greedy success on the level's validation games.
    val_envs = make_envs(config, "validation", config.envs)
    try:
        count = game_count(val_envs[0])
        games = [{"index": i} for i in range(min(config.validation_games, count))]
        val = play(val_envs, policy, games, state, greedy=True, respond=respond)
    finally:
        for env in val_envs:
            env.close()
    score = float(np.mean([e.won for e in val])) if val else math.nan
    with quiet_transformers():
        model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    result = {"config": asdict(config), "score": score, "validation_games": len(val),
              "seconds": time.perf_counter() - started}
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    history.append({"step": "validation", "score": score})
    return history


__all__ = ["CommandGRPOConfig", "base_games", "make_envs", "respond", "train_commands",
           "training_pool"]
