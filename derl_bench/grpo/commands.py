"""GRPO for a command policy: multi-turn episodes, the Meta-Reward on their primitives,
``updates_per_batch`` clipped policy-gradient updates over every executed command.

The policy picks one admissible command per turn (:mod:`derl_bench.policies.commands`); its
probability of a command is exact under trie-constrained decoding, so the ratio of the update
is a ratio of command probabilities: the rollout's comes from the masked logits it drew from,
the update's from the same constrained softmax (equal up to float32 rounding). One step of an
inner run reads top to bottom:

1. draw ``games_per_step`` games of the training pool (games the base was not taught on,
   :func:`training_pool`) and play each ``group_size`` times,
   sampling token by token inside each state's trie (at ``temperature``: each token's masked
   logits divided by it), on ``envs`` envs in lockstep
   (:func:`derl_bench.rollout.commands.play`); with ``filter_groups`` (DAPO's dynamic
   sampling), more rounds of games until ``games_per_step`` groups have an advantage;
2. score every episode with the Meta-Reward (``episodic_from_steps`` over its primitives);
3. the advantage of an episode is its reward centred (and scaled) within its game's group;
   every command of the episode carries it;
4. the k3 KL of the sampling policy to the frozen base, estimated on a sample of the batch's
   commands and logged whatever ``kl_coef``;
5. ``updates_per_batch`` PPO-clipped updates, each over every command with an advantage
   (mean over commands, as DAPO's token-level mean; :func:`~derl_bench.grpo.loss.token_terms`,
   the LLM trainer's loss), minibatched, with the k3 KL to the base in the loss when
   ``kl_coef`` > 0. After the first the policy is no longer the sampler: the ratio and its
   clip act.

Every step's diagnostics go to ``metrics.jsonl`` as it ends (:func:`train_commands`); every
``validation_every`` steps the policy plays ``curve_games`` validation games greedily.

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
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from derl_bench.family import Family, resolve_family
from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.update import DivergedError
from derl_bench.reward import MetaReward

TRAINER = "commands"
"""The ``trainer`` of a command-policy recipe."""
KL_SAMPLE = 128
"""Commands of a batch on which the logged KL to the base is estimated."""


@dataclass
class CommandGRPOConfig:
    """One inner GRPO run of a command policy (see the module docstring). A recipe
    (``baselines/alfworld-commands-*.yaml``) selects it with ``trainer: commands`` and fills
    these fields by name (:func:`~derl_bench.grpo.dispatch.load_recipe`)."""

    model: str
    """The base: a command-model folder (``derl-bench model agent-base``)."""
    output_dir: str | None = None
    """Where the run writes (default ``runs/<name>``)."""
    meta_reward: str = "success"
    env_id: str = field(kw_only=True)
    """An agent env whose card has a ``commands`` hook (the state the policy reads); named
    by keyword."""
    name: str = "command-grpo"
    trainer: str = TRAINER
    """Always ``commands``: what selects this trainer in a recipe."""
    level: str = "L0"
    seed: int = 0
    steps: int = 12
    games_per_step: int = 4
    group_size: int = 8
    learning_rate: float = 5e-5
    updates_per_batch: int = 1
    """Optimiser steps on each batch, each over all its commands (gradients accumulated over
    ``minibatch`` chunks). Past the first the policy has moved from the one that sampled, so
    the importance ratio and its clip act."""
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    """Weight of the k3 KL to the base in the loss; the KL is logged whatever its weight."""
    temperature: float = 1.0
    """The rollouts' sampling temperature: each token of a command is drawn from its masked
    logits divided by it, and the policy the update trains is that tempered one (its ratio,
    KL and entropy are of the tempered command probabilities, the base's too). Below 1 the
    rollouts come nearer the greedy choices a greedy evaluation scores."""
    filter_groups: bool = False
    """Dynamic sampling (DAPO's): the batch keeps only the groups whose rewards differ (the
    others carry no advantage and train nothing), and a step draws ``games_per_step`` more
    games a round until ``games_per_step`` such groups are in it or ``max_draws`` rounds are
    played. As the policy wins more of its games, the update still sees as many groups that
    teach it something. Off: one round, every group kept."""
    max_draws: int = 4
    """The rounds of ``games_per_step`` games a step draws at most, with ``filter_groups``."""
    max_grad_norm: float = 1.0
    minibatch: int = 64
    """Commands per forward/backward of the update."""
    pool: int = 200
    """Training games drawn once per run (each loaded once); every step draws from these."""
    validation_games: int = 64
    """The final score: greedy success on the first this many games of the level's
    validation split."""
    validation_every: int = 0
    """Greedy success on the first ``curve_games`` validation games before the first step and
    after every this many steps (``validation/success`` in ``metrics.jsonl``); 0: never."""
    curve_games: int = 32
    save_every: int = 0
    """Write a checkpoint (``checkpoint/``: the weights, the optimiser and the game draws'
    generator) after every this many steps, the last one included; ``derl-bench train
    --resume`` continues from it, to the same step rows and weights as a run never stopped.
    0: none."""
    envs: int = 16
    num_threads: int = 2
    max_episode_steps: int = 30
    data_root: str | None = None

    def __post_init__(self) -> None:
        from derl_bench.settings import (
            COUNT,
            GROUP_TEMPERATURE,
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
                 "updates_per_batch": COUNT, "temperature": GROUP_TEMPERATURE,
                 "clip_eps": Rule(lambda v: POSITIVE.test(v) and v < 1, "in (0, 1)"),
                 "kl_coef": number_at_least(0), "max_grad_norm": MAX_GRAD_NORM,
                 "minibatch": COUNT, "pool": COUNT, "validation_games": at_least(0),
                 "validation_every": at_least(0), "curve_games": COUNT,
                 "save_every": at_least(0), "envs": COUNT, "num_threads": COUNT,
                 "max_episode_steps": COUNT, "max_draws": COUNT,
                 "filter_groups": Rule(lambda v: isinstance(v, bool), "true or false"),
                 "trainer": Rule(lambda v: v == TRAINER, f"{TRAINER!r}")}
        refuse((name, getattr(self, name), rule) for name, rule in rules.items())

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir or Path("runs") / self.name)


def command_config_from_dict(values: dict[str, Any]) -> CommandGRPOConfig:
    """A :class:`CommandGRPOConfig` from a recipe's mapping (``trainer: commands``), held to
    the rules of every recipe: unknown keys and wrongly typed or refused values raise
    :class:`~derl_bench.grpo.config.ConfigError`."""
    from derl_bench.grpo.config import fields_from_dict

    return fields_from_dict(CommandGRPOConfig, values)


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
        from derl_bench.grpo.config import ConfigError

        raise ConfigError(f"pool={config.pool} is larger than the {len(fresh)} training games "
                          f"its base ({config.model}) was not taught on ({len(taught)} of "
                          f"{total}); set pool={len(fresh)} or fewer")
    return fresh[:config.pool]


def check_pool(config: CommandGRPOConfig, family: Family) -> np.ndarray:
    """The run's :func:`training_pool` over its level's training split, read from the
    split's list before any env is made: a ``pool`` larger than the games its base was not
    taught on is refused (:class:`~derl_bench.grpo.config.ConfigError`) before anything is
    written."""
    from derl_bench.envs.items import split_items

    return training_pool(config, len(split_items(family, config.env_id, "train", config.level,
                                                 data_root=config.data_root)))


def make_envs(config: CommandGRPOConfig, family: Family, split: str, n: int) -> list[Any]:
    """``n`` envs of ``split`` behind ``family``'s think/action parser (its ``format_valid``)."""
    from derl_bench.rollout.commands import command_envs

    return command_envs(config.env_id, config.level, split, n, family=family,
                        max_episode_steps=config.max_episode_steps, data_root=config.data_root,
                        think_action=True)


def _greedy_success(envs: list[Any], policy: Any, games: int, state: Any) -> float:
    """Greedy success on the first ``games`` games of ``envs``' split (NaN for none)."""
    from derl_bench.rollout.commands import game_count, play

    count = min(games, game_count(envs[0]))
    episodes = play(envs, policy, [{"index": i} for i in range(count)], state, greedy=True,
                    respond=respond)
    return float(np.mean([e.won for e in episodes])) if episodes else math.nan


def _largest_change(model: Any, base: Any) -> float:
    """The largest absolute change of any weight since the base."""
    with torch.no_grad():
        return max(float((p - q).abs().max()) for p, q in zip(model.parameters(),
                                                              base.parameters(), strict=True))


def check_command_data(config: CommandGRPOConfig, family: Family) -> None:
    """Refuse a run whose training or validation games differ from the data catalogue: a
    :class:`~derl_bench.data.verify.DataChecksumError` names the damaged games. Hashed once per
    process while the files stay unchanged, so the command's check and the run's cost one."""
    from derl_bench.data.verify import check_data
    from derl_bench.envs.items import data_files

    for split in ("train", "validation"):
        check_data(data_files(family, config.env_id, level=config.level, split=split),
                   root=config.data_root)


CHECKPOINT = "checkpoint"
"""A command run's checkpoint folder: ``model/`` and ``state.pt``."""


def _save_model(folder: Path, model: Any, tokenizer: Any, views: tuple[Any, Any]) -> None:
    """The model, its tokenizer and the files that say which view it reads (``views``: the
    view's parts and the family's default,
    :func:`~derl_bench.policies.command_model.write_view_files`) into ``folder``."""
    from derl_bench.policies.command_model import write_view_files
    from derl_bench.progress import quiet_transformers

    with quiet_transformers():
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_view_files(folder, *views)


def _save_checkpoint(out: Path, model: Any, tokenizer: Any, views: tuple[Any, Any],
                     optimizer: Any, rng: np.random.Generator, step: int,
                     elapsed: float) -> None:
    """The run's state after ``step`` into ``out/checkpoint``, replacing the last one only
    once the new one is whole (a run stopped while writing keeps its previous checkpoint)."""
    import os
    import shutil

    final, fresh, old = out / CHECKPOINT, out / f"{CHECKPOINT}.new", out / f"{CHECKPOINT}.old"
    shutil.rmtree(fresh, ignore_errors=True)
    _save_model(fresh / "model", model, tokenizer, views)
    torch.save({"step": step, "optimizer": optimizer.state_dict(),
                "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                "elapsed_s": elapsed}, fresh / "state.pt")
    if final.exists():
        os.replace(final, old)
    os.replace(fresh, final)
    shutil.rmtree(old, ignore_errors=True)


RESUMABLE = frozenset({"steps", "output_dir"})
"""The settings a resumed command run may change: how long it runs, and where its folder is
(a run's folder copied or moved elsewhere continues as the same run)."""


def resume_problem(config: CommandGRPOConfig) -> str | None:
    """Why ``config``'s folder holds no command run that ``--resume`` can continue with
    ``config`` (only ``steps`` may differ from the run's own settings, and not fall below
    its checkpoint's step; the folder may have been moved or copied since), else None."""
    out = config.run_dir
    written = out / "config.yaml"
    if not (out / CHECKPOINT / "state.pt").is_file() or not written.is_file():
        return (f"{out} holds no checkpoint of a command run to resume from (a run writes one "
                f"every save_every steps; this one's recipe may have save_every: 0)")
    try:
        before = yaml.safe_load(written.read_text())
    except yaml.YAMLError as err:
        return f"{written} is not the run's settings: {err}"
    now = asdict(config)
    # A setting added since the run was written is absent from its config.yaml: the run
    # trained at its default.
    defaults = {f.name: f.default for f in fields(CommandGRPOConfig) if f.default is not MISSING}
    differ = sorted(k for k in set(before) | set(now)
                    if k not in RESUMABLE and before.get(k, defaults.get(k)) != now.get(k))
    if differ:
        return (f"--resume continues the run with its own settings; these differ from "
                f"{written}: {', '.join(differ)}")
    step = int(torch.load(out / CHECKPOINT / "state.pt", weights_only=False)["step"])
    if config.steps < step:
        return f"steps={config.steps}, but the checkpoint is of step {step}"
    return None


def continues(config: CommandGRPOConfig) -> bool:
    """Whether ``config``'s folder holds a checkpoint of this very run (:func:`resume_problem`
    finds none): then the run should go on from it; otherwise anything in the folder is
    removed, so that no stale file is read as this run's."""
    if resume_problem(config) is None:
        return True
    if config.run_dir.exists():
        import shutil

        shutil.rmtree(config.run_dir)
    return False


def command_reward(config: CommandGRPOConfig, family: Family) -> MetaReward:
    """``config.meta_reward`` compiled over the primitives of ``family`` (``config.env_id``'s,
    resolved by the caller), under DERL's semantics."""
    from derl_bench.reward import compile_reward
    from derl_bench.reward.primitives import env_primitives

    return compile_reward(config.meta_reward, env_primitives(config.env_id, family))


def train_commands(config: CommandGRPOConfig, log: Any = None,
                   resume: bool = False) -> list[dict[str, Any]]:
    """The inner GRPO run ``config`` describes, from Python (:func:`run_commands`): the env's
    family resolved and the Meta-Reward compiled here, once."""
    family = resolve_family(config.env_id)
    return run_commands(config, command_reward(config, family), family, log=log, resume=resume)


def run_commands(config: CommandGRPOConfig, reward: MetaReward, family: Family,
                 log: Any = None, resume: bool = False) -> list[dict[str, Any]]:
    """Run the inner GRPO run ``config`` describes; write the model, ``metrics.jsonl`` (a line
    per step, written as it ends) and ``result.json`` to its folder; return the per-step
    metrics (the last row holds the validation score). ``reward`` is ``config.meta_reward``
    compiled and ``family`` the env's family, both where the run started
    (:func:`train_commands`, the ``train`` command or a meta loop's inner run).

    Every step logs, with the LLM trainer's names: ``loss``, ``policy_loss``, ``grad_norm``,
    ``clip_fraction`` and ``ratio/mean`` (means over the update epochs, and each epoch's in
    ``epochs``), ``ratio/min`` and ``ratio/max`` (over the last epoch's commands), ``kl`` (k3
    estimate of KL(sampling policy || base) over the batch's commands, computed whatever
    ``kl_coef``), ``entropy`` (the sampled commands' mean negative log-probability: an unbiased
    estimate of the command distribution's entropy), ``groups_with_advantage``,
    ``weights/max_change`` (since the base) and, every ``validation_every`` steps,
    ``validation/success``. With ``resume`` the run continues from its folder's checkpoint
    (:func:`resume_problem` says when it cannot; ``steps`` may be raised); its rows past the
    checkpoint are dropped and played again, to the same values."""
    from derl_bench.files import write_text_atomic
    from derl_bench.grpo.loss import k3_kl, token_terms
    from derl_bench.grpo.rundir import RUN_MARKER, start_run_id
    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.policies.command_model import command_parts, model_view
    from derl_bench.policies.commands import CommandPolicy, chosen_log_probs, chosen_trie
    from derl_bench.rollout.commands import game_count, play

    # a card without a commands hook is refused, naming the hook (CardError), before any
    # write; the model reads the view it was built for, and so do its checkpoints and result
    default = command_parts(family)
    parts = default.view(model_view(config.model))
    state, views = parts.state, (parts, default)
    check_command_data(config, family)
    pool = check_pool(config, family)
    out = config.run_dir
    if resume:
        problem = resume_problem(config)
        if problem:
            raise ValueError(problem)
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    checkpoint = torch.load(out / CHECKPOINT / "state.pt", weights_only=False) if resume else {}
    model, tokenizer = load_model_and_tokenizer(str(out / CHECKPOINT / "model") if resume
                                                else config.model)
    # the envs too: a data root without the dataset is refused before the folder is a run
    envs = make_envs(config, family, "train", config.envs)
    val_envs = make_envs(config, family, "validation", config.envs)
    out.mkdir(parents=True, exist_ok=True)
    # The settings before anything else the run writes, as a recipe that runs the same run
    # again (and marks the folder as a run, which --overwrite may replace); but only once the
    # model has loaded, so that a model that does not load leaves no run to refuse a re-run.
    write_text_atomic(out / RUN_MARKER, yaml.safe_dump(asdict(config), sort_keys=False))
    start_run_id(out, resume=resume)
    model.eval()
    policy = CommandPolicy(model, tokenizer)
    # the KL's reference and the weight change's origin: the base, also on a resumed run
    base = (load_model_and_tokenizer(config.model)[0] if resume
            else copy.deepcopy(model)).eval().requires_grad_(False)
    vocab_size = model.get_output_embeddings().weight.shape[0]
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    done = 0
    if resume:
        optimizer.load_state_dict(checkpoint["optimizer"])
        rng.bit_generator.state = checkpoint["rng"]
        torch.set_rng_state(checkpoint["torch_rng"])
        done = int(checkpoint["step"])
    started = time.perf_counter() - float(checkpoint.get("elapsed_s", 0.0))
    metrics_file = out / "metrics.jsonl"
    # a resumed run keeps its rows up to the checkpoint; later ones are played again
    history: list[dict[str, Any]] = [
        row for row in (json.loads(line) for line in metrics_file.read_text().splitlines())
        if isinstance(row.get("step"), int) and row["step"] <= done] if resume else []
    metrics_file.write_text("".join(json.dumps(row) + "\n" for row in history))

    def record(row: dict[str, Any]) -> None:
        history.append(row)
        with metrics_file.open("a") as fh:
            fh.write(json.dumps(row) + "\n")

    try:
        if config.validation_every and not done:
            began = time.perf_counter()
            record({"step": 0, "validation/success": _greedy_success(
                val_envs, policy, config.curve_games, state),
                "time/validation_s": time.perf_counter() - began})
        for step in range(done + 1, config.steps + 1):
            # 1-3. Rollouts (each drawn game played group_size times), their rewards and
            # advantages within each game's group; with filter_groups, more rounds of games
            # until games_per_step groups have an advantage, and only those are kept.
            began = time.perf_counter()
            timing = dict.fromkeys(("reset_s", "step_s", "model_s"), 0.0)
            played: list[Any] = []  # every episode of the step, for its success and length
            played_rewards: list[np.ndarray] = []
            moving: list[int] = []
            episodes: list[Any] = []  # the batch: the kept groups' episodes
            advantages: list[float] = []
            drawn: set[int] = set()
            for draw in range(config.max_draws if config.filter_groups else 1):
                left = pool if draw == 0 else np.array([g for g in pool if int(g) not in drawn])
                if not len(left):
                    break
                picked = rng.choice(left, min(config.games_per_step, len(left)) if draw else
                                    config.games_per_step, replace=False)
                drawn.update(int(g) for g in picked)
                games = [{"index": int(g)} for g in picked for _ in range(config.group_size)]
                round_timing: dict[str, float] = {}
                round_episodes = play(envs, policy, games, state,
                                      seed=config.seed * 100_003 + step + 1_000_003 * draw,
                                      respond=respond, decode=True, timing=round_timing,
                                      temperature=config.temperature)
                for key in timing:
                    timing[key] += round_timing[key]
                rewards = reward.episodic_from_steps(
                    [e.primitive_steps() for e in round_episodes])
                groups = np.repeat(np.arange(len(picked)), config.group_size)
                round_advantages = group_advantages(rewards, groups)
                played += round_episodes
                played_rewards.append(rewards)
                for g in range(len(picked)):
                    members = groups == g
                    moves = bool(np.any(round_advantages[members] != 0))
                    moving.append(int(moves))
                    kept = len(episodes) // config.group_size
                    if not config.filter_groups or (moves and kept < config.games_per_step):
                        episodes += [e for e, m in zip(round_episodes, members, strict=True) if m]
                        advantages += round_advantages[members].tolist()
                if sum(moving) >= config.games_per_step:
                    break
            rollout_s = time.perf_counter() - began
            rewards = np.concatenate(played_rewards)
            every = [(s, float(a)) for e, a in zip(episodes, advantages, strict=True)
                     for s in e.steps]
            sampled = torch.tensor([s.log_prob for s, _ in every], dtype=torch.float64)
            # 4. The KL of the sampling policy to the base, logged whatever kl_coef: the k3
            # estimate on a seeded sample of the batch's commands (the base's forward pass
            # over all of them would cost a third of the update).
            began = time.perf_counter()
            picker = np.random.default_rng([config.seed, step, 0x6B6C])
            probe = sorted(picker.choice(len(every), min(KL_SAMPLE, len(every)), replace=False)
                           .tolist())
            # Its distinct rows in the update's order (minibatches of one prompt length).
            probe_rows, probe_where = unique_rows([every[i][0] for i in probe])
            with torch.no_grad():
                probe_ref = _log_probs(base, probe_rows, policy.end_id, config.minibatch,
                                       config.temperature)[probe_where]
            diagnostics = {"kl": float(k3_kl(sampled[probe], probe_ref).mean())
                           if probe else 0.0,
                           "entropy": float(-sampled.mean()) if len(every) else 0.0}
            # 5. updates_per_batch clipped updates over every command with an advantage. A
            # state and command that recur (group members on a common path) run forward once.
            trained = [i for i, (_, a) in enumerate(every) if a != 0.0]
            unique, inverse = unique_rows([every[i][0] for i in trained])
            adv_all = torch.tensor([every[i][1] for i in trained], dtype=torch.float64)
            old_all = sampled[trained]
            ref_all = None
            if config.kl_coef > 0 and trained:
                with torch.no_grad():
                    ref_all = _log_probs(base, unique, policy.end_id, config.minibatch,
                                         config.temperature)[inverse]
            reference_s = time.perf_counter() - began
            began = time.perf_counter()
            epochs: list[dict[str, float]] = []
            extremes = {"ratio/min": 1.0, "ratio/max": 1.0}
            if trained:
                # The chunks' trie masks are built once for every epoch.
                chunks = [(first, unique[first:first + config.minibatch])
                          for first in range(0, len(unique), config.minibatch)]
                tries = [chosen_trie([s.ids for s in part], [s.chosen for s in part],
                                     policy.end_id, vocab_size) for _, part in chunks]
                model.train()
                for _ in range(config.updates_per_batch):
                    optimizer.zero_grad(set_to_none=True)
                    sums = dict.fromkeys(("loss", "policy_loss", "kl_penalty", "clip_fraction",
                                          "ratio/mean"), 0.0)
                    low, high = math.inf, -math.inf
                    for (first, part), trie in zip(chunks, tries, strict=True):
                        logp = chosen_log_probs(model, [s.ids for s in part],
                                                [s.chosen for s in part], policy.end_id,
                                                trie=trie, temperature=config.temperature)
                        inside = (inverse >= first) & (inverse < first + len(part))
                        occurs = inside.nonzero()[:, 0]
                        terms = token_terms(logp[inverse[occurs] - first], old_all[occurs],
                                            adv_all[occurs],
                                            None if ref_all is None else ref_all[occurs],
                                            config.clip_eps, kl_coef=config.kl_coef)
                        loss = terms["loss"].sum() / len(trained)
                        loss.backward()
                        with torch.no_grad():
                            sums["loss"] += float(loss)
                            sums["policy_loss"] += float(terms["policy"].sum()) / len(trained)
                            sums["kl_penalty"] += float(terms["kl"].sum()) / len(trained)
                            sums["clip_fraction"] += float(terms["clipped"].sum()) / len(trained)
                            sums["ratio/mean"] += float(terms["ratio"].sum()) / len(trained)
                            low = min(low, float(terms["ratio"].min()))
                            high = max(high, float(terms["ratio"].max()))
                    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                                config.max_grad_norm))
                    if not (math.isfinite(sums["loss"]) and math.isfinite(norm)):
                        raise DivergedError(
                            f"training diverged in step {step} of {config.steps}: the loss is "
                            f"{sums['loss']:.4g} and the gradient norm {norm:.4g}; nothing was "
                            f"saved (the model is written after the last step; a smaller "
                            f"learning_rate than {config.learning_rate:g} keeps it finite)")
                    optimizer.step()
                    epochs.append({**sums, "grad_norm": norm})
                    extremes = {"ratio/min": low, "ratio/max": high}
                model.eval()
            update_s = time.perf_counter() - began
            means = {k: float(np.mean([e[k] for e in epochs])) if epochs else 0.0
                     for k in ("loss", "policy_loss", "grad_norm", "clip_fraction", "ratio/mean")}
            if not epochs:
                means["ratio/mean"] = 1.0
            row: dict[str, Any] = {
                "step": step, "reward/mean": float(np.mean(rewards)),
                "reward/std": float(np.std(rewards)),
                "success": float(np.mean([e.won for e in played])),
                "length/mean": float(np.mean([e.length for e in played])),
                "groups_with_advantage": float(np.mean(moving)),
                **({"groups/drawn": len(moving),
                    "groups/kept": len(episodes) // config.group_size}
                   if config.filter_groups else {}),
                "commands/trained": len(trained), "commands/distinct": len(unique),
                **means, **extremes, **diagnostics,
                "epochs": epochs, "weights/max_change": _largest_change(model, base),
                "time/rollout_s": rollout_s, "time/reference_s": reference_s,
                "time/update_s": update_s, "time/game_reset_s": timing["reset_s"],
                "time/env_step_s": timing["step_s"], "time/model_rollout_s": timing["model_s"]}
            if config.validation_every and step % config.validation_every == 0:
                began = time.perf_counter()
                row["validation/success"] = _greedy_success(val_envs, policy,
                                                            config.curve_games, state)
                row["time/validation_s"] = time.perf_counter() - began
            row["time/elapsed_s"] = time.perf_counter() - started
            record(row)
            if config.save_every and step % config.save_every == 0:
                _save_checkpoint(out, model, tokenizer, views, optimizer, rng, step,
                                 row["time/elapsed_s"])
            if log is not None:
                curve = (f", validation {row['validation/success']:.3f}"
                         if "validation/success" in row else "")
                log(f"step {step}: reward {row['reward/mean']:.3f}, success {row['success']:.3f}"
                    f", groups moving {row['groups_with_advantage']:.2f}, kl {row['kl']:.4f}, "
                    f"clip {row['clip_fraction']:.3f}{curve}, {rollout_s:.1f}+{update_s:.1f} s")
        # The inner run's score: greedy success on the level's validation games.
        count = min(config.validation_games, game_count(val_envs[0]))
        last = history[-1] if history else {}
        if (count and config.curve_games == config.validation_games
                and last.get("step") == config.steps and "validation/success" in last):
            score = last["validation/success"]  # the curve's last point: the same games
        else:
            score = _greedy_success(val_envs, policy, count, state) if count else math.nan
    finally:
        for env in [*envs, *val_envs]:
            env.close()
    _save_model(out / "model", model, tokenizer, views)
    # no validation game (validation_games: 0): null, since JSON has no NaN
    result = {"config": asdict(config), "score": None if math.isnan(score) else score,
              "validation_games": count, "seconds": time.perf_counter() - started}
    (out / "result.json").write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    history.append({"step": "validation", "score": score})
    return history


def unique_rows(steps: list[Any]) -> tuple[list[Any], torch.Tensor]:
    """The distinct (state, command) rows of ``steps``, and where each step's row is among
    them. Rows are ordered by prompt (its length, then its tokens), so that the rows of one
    state share a minibatch and its prompt runs once there, and a minibatch's prompts pad to
    about one length."""
    seen: dict[Any, int] = {}
    first: list[Any] = []
    inverse = []
    for s in steps:
        prompt, commands = s.ids
        key = (tuple(prompt), tuple(tuple(c) for c in commands), s.chosen)
        if key not in seen:
            seen[key] = len(first)
            first.append((key, s))
        inverse.append(seen[key])
    order = sorted(range(len(first)), key=lambda i: (len(first[i][0][0]), first[i][0]))
    position = torch.empty(len(first), dtype=torch.long)
    position[order] = torch.arange(len(first))
    return [first[i][1] for i in order], position[torch.tensor(inverse, dtype=torch.long)]


def _log_probs(model: Any, steps: list[Any], end_id: int, chunk: int,
               temperature: float = 1.0) -> torch.Tensor:
    """The log-probability of each step's chosen command under ``model`` (tempered as the
    rollouts drew, :func:`~derl_bench.policies.commands.chosen_log_probs`), ``chunk`` at a
    time."""
    from derl_bench.policies.commands import chosen_log_probs

    if not steps:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([chosen_log_probs(model, [s.ids for s in steps[i:i + chunk]],
                                       [s.chosen for s in steps[i:i + chunk]], end_id,
                                       temperature=temperature)
                      for i in range(0, len(steps), chunk)])


__all__ = ["CHECKPOINT", "TRAINER", "CommandGRPOConfig", "base_games", "command_config_from_dict",
           "command_reward", "continues", "make_envs", "respond", "resume_problem", "run_commands",
           "train_commands", "training_pool", "unique_rows"]
