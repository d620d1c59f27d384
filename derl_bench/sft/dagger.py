"""An agent base from a searching teacher: behaviour cloning, then DAgger.

The student is a small causal LM that picks one of the admissible commands from a compact
state of what it has read (:mod:`derl_bench.policies.commands`; the state tracker and the
tokenizer are the env's card's ``commands`` hook,
:class:`~derl_bench.policies.command_model.CommandParts`). Its labels come from the env's
searching teacher (``teacher=True``, ``info["teacher_action"]``; ALFWorld's decides from what
the agent has seen, so its next command can be inferred from the state; the planner's
walkthrough, which goes straight to hidden objects, cannot).

1. **Behaviour cloning.** The teacher plays ``bc_games`` of a ``pool`` of training games
   drawn once (each game is translated and loaded once, then replayed); with probability
   ``detour_share`` a step executes a random admissible command instead (the label stays the
   teacher's), so the data holds the states just off the teacher's path that a learner
   reaches.
2. **DAgger** (Ross et al., 2011). Each of ``rounds`` rounds plays ``round_games`` games of
   the pool in which the teacher executes a share ``teacher_share * teacher_decay**k`` of the
   steps and the student (sampling) the rest; the teacher labels every state reached. The
   states join the data set and training goes on over all of it.

The loss is the negative log-probability of the teacher's command under the student's
constrained distribution over the admissible commands (the same exact distribution GRPO
trains). Everything is seeded: the games drawn, the detours, the student's samples, the
initial weights and the minibatches, with a fixed thread count, so the same command writes the
same weights::

    run_dagger(DaggerConfig(output="runs/alfworld-base", env_id="derl/ALFWorld-v0", level="L0",
                            seed=0))
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl_bench.family import Family, resolve_family
from derl_bench.rollout.commands import CommandEpisode, CommandStep


@dataclass
class DaggerConfig:
    """A teacher-taught agent base (see the module docstring)."""

    output: str
    env_id: str
    """An agent env whose card has a ``commands`` hook and whose env takes ``teacher=True``."""
    level: str = "L0"
    """Whose training split the games come from (L2 trains on task types 1-4 only)."""
    seed: int = 0
    pool: int = 400
    """Training games drawn once (each translated and loaded once); every phase plays these."""
    bc_games: int = 400
    detour_share: float = 0.15
    rounds: int = 3
    round_games: int = 160
    teacher_share: float = 0.5
    """The teacher's share of the executed steps in the first DAgger round."""
    teacher_decay: float = 0.5
    bc_updates: int = 1500
    round_updates: int = 600
    batch_size: int = 32
    learning_rate: float = 1e-3
    envs: int = 16
    """Envs played in lockstep (one batched forward per turn)."""
    num_threads: int = 2
    max_episode_steps: int = 30
    model: dict[str, Any] = field(default_factory=dict)
    """Fields of :class:`~derl_bench.policies.command_model.CommandModelSpec`."""
    data_root: str | None = None
    view: str | None = None
    """The view of the game the student reads: one the card's ``commands`` hook offers
    (:meth:`~derl_bench.policies.command_model.CommandParts.view`; None: its default). The
    model folder records it, so training and evaluation read the same view."""


def _make_envs(config: DaggerConfig, family: Family, n: int) -> list[Any]:
    from derl_bench.rollout.commands import command_envs

    return command_envs(config.env_id, config.level, "train", n, family=family, teacher=True,
                        max_episode_steps=config.max_episode_steps, data_root=config.data_root)


def labelled(episodes: list[CommandEpisode]) -> list[CommandStep]:
    """The steps of ``episodes`` that carry the teacher's label."""
    return [s for e in episodes for s in e.steps if s.label is not None]


def train_steps(model: Any, end_id: int, data: list[CommandStep], updates: int,
                batch_size: int, optimizer: torch.optim.Optimizer,
                rng: np.random.Generator) -> list[float]:
    """``updates`` minibatch steps of the teacher's commands' negative log-probability."""
    from derl_bench.policies.commands import chosen_log_probs

    model.train()
    losses = []
    for _ in range(updates):
        batch = [data[i] for i in rng.integers(len(data), size=batch_size)]
        labels = [s.label for s in batch if s.label is not None]
        if len(labels) != len(batch):
            raise ValueError("train_steps needs labelled states (see labelled())")
        loss = -chosen_log_probs(model, [s.ids for s in batch], labels, end_id).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def label_accuracy(model: Any, end_id: int, data: list[CommandStep], chunk: int = 64) -> float:
    """Share of ``data``'s states where the student's most probable command is the teacher's."""
    from derl_bench.policies.commands import command_log_probs

    if not data:
        return math.nan
    right = 0
    with torch.no_grad():
        for start in range(0, len(data), chunk):
            part = data[start:start + chunk]
            for lp, s in zip(command_log_probs(model, [s.ids for s in part], end_id), part,
                             strict=True):
                right += int(lp.argmax()) == s.label
    return right / len(data)


def _summary(episodes: list[CommandEpisode]) -> dict[str, Any]:
    won = [e.won for e in episodes]
    return {"games": len(episodes), "won": int(sum(won)),
            "success": float(np.mean(won)) if won else math.nan,
            "states": sum(e.length for e in episodes)}


def run_dagger(config: DaggerConfig, log: Any = None) -> dict[str, Any]:
    """Build the base as ``config`` says and write it to ``config.output`` (a model folder
    any loader reads, plus ``dagger.json``); returns the record. The folder appears whole or
    not at all."""
    from derl_bench.policies.command_model import (
        CommandModelSpec,
        CommandParts,
        build_command_model,
        command_parts,
        write_view_files,
    )
    from derl_bench.policies.commands import CommandPolicy
    from derl_bench.progress import quiet_transformers
    from derl_bench.rollout.commands import game_count, play

    family = resolve_family(config.env_id)
    # a card without a commands hook is refused, naming the hook (CardError)
    default: CommandParts = command_parts(family)
    parts = default.view(config.view)  # an unknown view is refused, naming the offered ones
    output = Path(config.output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise FileExistsError(f"{output} exists and is not an empty folder")
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    started = time.perf_counter()

    def say(message: str) -> None:
        if log is not None:
            log(f"[{time.perf_counter() - started:7.1f}s] {message}")

    tokenizer = parts.tokenizer(config.data_root)
    spec = CommandModelSpec(**{**config.model, "seed": config.seed})
    model = build_command_model(tokenizer, spec).eval()
    policy = CommandPolicy(model, tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate,
                                  weight_decay=0.0)
    envs = _make_envs(config, family, config.envs)
    total = game_count(envs[0])
    pool = [{"index": int(i)} for i in rng.permutation(total)[:config.pool]]
    if config.bc_games > len(pool):
        raise ValueError(f"bc_games {config.bc_games} exceeds the pool of {len(pool)} games")
    record: dict[str, Any] = {"config": asdict(config), "games_in_split": total,
                              "pool": [g["index"] for g in pool], "rounds": []}
    try:
        bc_games = pool[:config.bc_games]
        episodes = play(envs, policy, bc_games, parts.state, teacher_share=1.0,
                        detour_share=config.detour_share, seed=config.seed)
        data = labelled(episodes)
        say(f"behaviour cloning: {len(data)} states from {len(episodes)} games")
        losses = train_steps(model, policy.end_id, data, config.bc_updates, config.batch_size,
                             optimizer, rng)
        record["bc"] = {**_summary(episodes), "labelled_states": len(data),
                        "loss_first": losses[0], "loss_last": float(np.mean(losses[-50:])),
                        "seconds": time.perf_counter() - started}
        say(f"behaviour cloning: loss {losses[0]:.3f} -> {record['bc']['loss_last']:.3f}")
        for k in range(config.rounds):
            share = config.teacher_share * config.teacher_decay ** k
            round_games = [pool[int(i)] for i in rng.choice(len(pool), config.round_games,
                                                            replace=config.round_games > len(pool))]
            episodes = play(envs, policy, round_games, parts.state, teacher_share=share,
                            seed=config.seed * 1000 + k + 1)
            new = labelled(episodes)
            accuracy = label_accuracy(model, policy.end_id,
                                      [s for s in new if s.actor == "policy"])
            data += new
            losses = train_steps(model, policy.end_id, data, config.round_updates,
                                 config.batch_size, optimizer, rng)
            row = {"round": k + 1, "teacher_share": share, **_summary(episodes),
                   "new_states": len(new), "data_states": len(data),
                   "student_label_accuracy_before": accuracy,
                   "loss_last": float(np.mean(losses[-50:])),
                   "seconds": time.perf_counter() - started}
            record["rounds"].append(row)
            say(f"round {k + 1}: teacher share {share:.3f}, success {row['success']:.3f}, "
                f"student accuracy on its states {accuracy:.3f}, data {len(data)}, "
                f"loss {row['loss_last']:.3f}")
    finally:
        for env in envs:
            env.close()
    record["seconds"] = time.perf_counter() - started
    record["parameters"] = sum(p.numel() for p in model.parameters())
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}-", dir=output.parent))
    try:
        with quiet_transformers():
            model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "dagger.json").write_text(json.dumps(record, indent=2) + "\n")
        write_view_files(staging, parts, default)
        if output.exists():
            output.rmdir()
        staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return record


__all__ = ["DaggerConfig", "label_accuracy", "labelled", "run_dagger", "train_steps"]
