"""Evaluating a command policy (a model that picks among admissible commands) on an agent
env's fixed game sets: every game of a level's split once, greedily or sampled at a
temperature, in lockstep.

    result = evaluate_commands("runs/alfworld-base", level="L0", env="derl/ALFWorld-v0")
    result["success"], result["by_task_type"]

The policy's view of the game is handed in (``state_factory``; default the state tracker of
the env's card's ``commands`` hook, :class:`~derl_bench.policies.command_model.CommandParts`),
as in training.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from derl_bench.rollout.commands import CommandEpisode

if TYPE_CHECKING:
    from derl_bench.evaluation.families import FamilyAdapter


def summarise(episodes: list[CommandEpisode]) -> dict[str, Any]:
    """Success rate, per task type, and the mean length of the won episodes."""
    by_type: dict[str, list[CommandEpisode]] = defaultdict(list)
    for e in episodes:
        by_type[e.task_type].append(e)

    def stats(group: list[CommandEpisode]) -> dict[str, Any]:
        won = [e for e in group if e.won]
        return {"games": len(group), "won": len(won),
                "success": len(won) / len(group) if group else float("nan"),
                "mean_steps_won": float(np.mean([e.length for e in won])) if won else None}

    return {**stats(episodes), "by_task_type": {k: stats(v) for k, v in sorted(by_type.items())}}


def evaluate_commands(model: str | Path | Any, level: str = "L0", split: str = "eval", *,
                      env: str | FamilyAdapter, limit: int | None = None,
                      envs: int = 16, num_threads: int | None = None,
                      state_factory: Callable[[], Any] | None = None,
                      data_root: str | None = None,
                      episodes_out: list[CommandEpisode] | None = None,
                      temperature: float | None = None,
                      seed: int = 0) -> dict[str, Any]:
    """Play every game of ``level``'s ``split`` (the first ``limit``) once: greedily, or with
    a ``temperature`` one seeded draw (``seed``) of a whole command per step from
    ``softmax(log p / temperature)`` over the admissible commands (1.0: the distribution
    command GRPO trains).

    ``model`` is a model folder (or a loaded ``CommandPolicy``), ``env`` an env whose card
    has a ``commands`` hook: its id, whose family is resolved here, once, or the
    :class:`~derl_bench.evaluation.families.FamilyAdapter` the caller resolved; a damaged
    file of the folder is a ``ValueError`` naming it.
    Returns :func:`summarise`'s figures with the level, split, temperature (None: greedy),
    seed and wall seconds;
    ``episodes_out`` receives the episodes. Without a ``state_factory`` the state is the one
    of the view the model folder was built for
    (:func:`~derl_bench.policies.command_model.model_view`; the ``commands`` hook's default
    for a folder that names none); the result's ``policy_interface`` is that view's.
    """
    import torch

    from derl_bench.policies.commands import CommandPolicy
    from derl_bench.rollout.commands import command_envs, game_count, play

    if temperature is not None and not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0 (None plays greedily), "
                         f"not {temperature!r}")
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    if isinstance(model, CommandPolicy):
        policy = model
    else:
        from derl_bench.policies import load_model_and_tokenizer
        from derl_bench.policies.model_files import damaged_model_file

        # Named before loading: the loaders' own errors do not say which file is damaged.
        damaged = damaged_model_file(model)
        if damaged:
            raise ValueError(f"the command model cannot be loaded: {damaged}")
        lm, tokenizer = load_model_and_tokenizer(str(model))
        policy = CommandPolicy(lm.eval(), tokenizer)
    from derl_bench.evaluation.families import adapter_for
    from derl_bench.policies.command_model import command_parts, model_view

    adapter = adapter_for(env)
    env_id, family = adapter.env_id, adapter.resolved
    # A model folder names the view it was built for; the policy reads that one.
    parts = command_parts(family)
    parts = parts.view(None if isinstance(model, CommandPolicy) else model_view(model))
    if state_factory is None:
        state_factory = parts.state
    started = time.perf_counter()
    pool = command_envs(env_id, level, split, envs, data_root=data_root, family=family)
    try:
        count = game_count(pool[0])
        games = [{"index": i} for i in range(count if limit is None else min(limit, count))]
        sampling: dict[str, Any] = ({"greedy": True} if temperature is None
                                    else {"temperature": temperature, "seed": seed})
        episodes = play(pool[:len(games)] or pool[:1], policy, games, state_factory,
                        **sampling)
    finally:
        for made in pool:
            made.close()
    if episodes_out is not None:
        episodes_out.extend(episodes)
    return {"level": level, "split": split, **summarise(episodes),
            "temperature": temperature, "seed": seed if temperature is not None else None,
            "policy_interface": parts.interface, "seconds": time.perf_counter() - started}


def command_log_line(episode: CommandEpisode) -> dict[str, Any]:
    """A command policy's episode as a line of ``evaluate --trajectories``'s log: the game
    (its ``index`` in the split where it was chosen by index, and its id), task type, outcome,
    steps, whether the step cap cut it, and each step's chosen command with the policy's
    log-probability of it (``null`` where it was not scored).

    >>> from derl_bench.rollout.commands import CommandStep
    >>> step = CommandStep(ids=([1], [2]), commands=["look", "go to desk 1"], chosen=1,
    ...                    log_prob=-0.25, label=None, actor="policy")
    >>> line = command_log_line(CommandEpisode({"index": 3}, "g", "look", [step], won=True))
    >>> line["index"], line["success"], line["actions"], line["log_probs"]
    (3, True, ['go to desk 1'], [-0.25])
    """
    game = episode.game if isinstance(episode.game, dict) else {}
    return {"index": game.get("index"), "game": episode.game_id,
            "task_type": episode.task_type, "success": bool(episode.won),
            "steps": episode.length, "truncated": bool(episode.truncated),
            "actions": [s.commands[s.chosen] for s in episode.steps],
            "log_probs": [None if math.isnan(s.log_prob) else float(s.log_prob)
                          for s in episode.steps]}


__all__ = ["command_log_line", "evaluate_commands", "summarise"]
