"""Run a policy over an eval set on a vector env and collect one result per episode.

Each vector-env slot holds an :class:`EpisodeSlot`: it resets its env to the episode the
evaluator hands it (``options["episodes"][slot]``, with that episode's seed), adds what the
policy needs to ``info`` (valid actions, the oracle plan) and, when the episode ends, the
outcome. When no episode is left for a slot it idles until the others finish. Slots run in
worker processes (:class:`gymnasium.vector.AsyncVectorEnv`) when ``num_envs > 1``; the policy
runs in this process, so an LLM policy generates for all slots in one batch.

Results do not depend on ``num_envs``: episode ``i`` always gets seed ``base_seed + i`` and
its own policy state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from derl_bench.evaluation.families import FamilyAdapter
from derl_bench.evaluation.policies import AVAILABLE_ACTIONS, ORACLE_PLAN, VALID_ACTIONS, Policy
from derl_bench.evaluation.protocol import EvalSet

OUTCOME = "eval_outcome"
# The vector env deep-copies each slot's spaces to batch them, and a Text space over all of
# Unicode takes seconds to copy. The evaluator never samples from or checks these spaces, so
# slots expose a small stand-in.
_SLOT_SPACE = gym.spaces.Text(max_length=1 << 20, min_length=0)
TASK_TYPE = "eval_task_type"


@dataclass
class EpisodeResult:
    """What one episode produced; ``actions``/``observations`` are kept for trajectory logs."""

    index: int
    entry: str
    seed: int
    task_type: str
    success: bool = False
    score: float | None = None
    published: bool | None = None
    steps: int = 0
    total_reward: float = 0.0
    goal_progress: float | None = None
    """The share of the goal's conditions that hold at the episode's end (an agent env's
    ``goal_progress`` primitive), where the env emits it."""
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)

    def log_line(self) -> dict[str, Any]:
        """The episode's line in a trajectory log (JSONL)."""
        return {
            "index": self.index, "entry": self.entry, "seed": self.seed,
            "task_type": self.task_type, "success": self.success, "score": self.score,
            "published_success": self.published, "steps": self.steps,
            "total_reward": self.total_reward,
            "observations": self.observations, "actions": self.actions, "rewards": self.rewards,
        }


class EpisodeSlot(gym.Wrapper):
    """One vector-env slot: resets to assigned episodes, idles when it has none."""

    def __init__(self, env: gym.Env, adapter: FamilyAdapter, slot: int,
                 needs: frozenset[str]) -> None:
        super().__init__(env)
        self.adapter = adapter
        self.slot = slot
        self.needs = needs
        self.observation_space = self.action_space = _SLOT_SPACE
        self._idle = True
        self._entry = ""

    def _extras(self, info: dict[str, Any]) -> dict[str, Any]:
        if VALID_ACTIONS in self.needs:
            info[VALID_ACTIONS] = self.adapter.valid_actions(self.env.unwrapped, info)
        if AVAILABLE_ACTIONS in self.needs:
            info[AVAILABLE_ACTIONS] = self.adapter.available_actions(self.env.unwrapped)
        return info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        entry = (options or {}).get("episodes", [None] * (self.slot + 1))[self.slot]
        if entry is None:
            self._idle = True
            return "", {}
        obs, info = self.env.reset(
            seed=seed, options=self.adapter.reset_options(self.env.unwrapped, entry))
        self._idle, self._entry = False, entry
        info = dict(info)
        info[TASK_TYPE] = self.adapter.task_type(entry, info)
        if ORACLE_PLAN in self.needs:
            info[ORACLE_PLAN] = self.adapter.oracle_plan(self.env.unwrapped, info)
        return obs, self._extras(info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._idle:
            return "", 0.0, True, False, {}
        # The step cap is the env's TimeLimit (the card's max_steps, or the eval set's).
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        if terminated or truncated:
            self._idle = True
            success, score = self.adapter.outcome(self.env.unwrapped, float(reward),
                                                  bool(terminated), info)
            info[OUTCOME] = {"success": bool(success), "score": score,
                             "published": self.adapter.published(info)}
            return obs, reward, terminated, truncated, info
        return obs, reward, terminated, truncated, self._extras(info)


def _make_slot(env_id: str, env_kwargs: dict[str, Any], slot: int,
               needs: frozenset[str], adapter: FamilyAdapter) -> gym.Env:
    env = gym.make(env_id, **env_kwargs)
    return EpisodeSlot(env, adapter, slot, needs)


def slot_info(infos: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Undo the vector env's info batching for slot ``i``."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        if isinstance(value, Mapping):
            out[key] = slot_info(value, i)
        elif infos.get(f"_{key}", np.ones(i + 1, dtype=bool))[i]:
            item = value[i]
            out[key] = item.item() if isinstance(item, np.generic) else item
    return out


def run_episodes(
    eval_set: EvalSet,
    policy: Policy,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    num_envs: int = 1,
    limit: int | None = None,
    base_seed: int = 0,
    keep_trajectories: bool = False,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    adapter: FamilyAdapter,
) -> list[EpisodeResult]:
    """Run ``policy`` on the first ``limit`` (default: all) episodes of ``eval_set``, which
    ``adapter`` made (its rules reset, score and describe each episode).

    Returns the results in eval-set order. ``on_episode`` is called as each episode ends
    (in completion order), e.g. to advance a progress bar.
    """
    entries: Sequence[str] = eval_set.entries[:limit] if limit is not None else eval_set.entries
    if not entries:
        return []
    kwargs = {**eval_set.spec.env_kwargs, **(env_kwargs or {})}
    k = max(1, min(num_envs, len(entries)))
    # a worker process gets the adapter pickled with its family (parts by reference), so it
    # plays by the rules this process resolved
    fns = [functools.partial(_make_slot, eval_set.env_id, kwargs, s, policy.needs, adapter)
           for s in range(k)]
    if k == 1:
        vec: gym.vector.VectorEnv = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
    else:
        vec = AsyncVectorEnv(fns, shared_memory=False, autoreset_mode=AutoresetMode.DISABLED)
    results: list[EpisodeResult] = []
    running: list[EpisodeResult | None] = [None] * k
    observations: list[Any] = [""] * k
    infos: list[dict[str, Any]] = [{} for _ in range(k)]
    next_index = 0

    def start(mask: np.ndarray) -> None:
        nonlocal next_index
        episodes: list[str | None] = [None] * k
        seeds: list[int | None] = [None] * k
        for s in np.flatnonzero(mask):
            if next_index < len(entries):
                episodes[s], seeds[s] = entries[next_index], base_seed + next_index
                running[s] = EpisodeResult(next_index, entries[next_index], base_seed + next_index,
                                           task_type="")
                next_index += 1
            else:
                running[s] = None
        if not any(e is not None for e in episodes):
            return
        # Gymnasium annotates seed as one int, but its vector envs take one per slot
        obs, batch_info = vec.reset(seed=seeds,  # type: ignore[arg-type]
                                    options={"reset_mask": mask, "episodes": episodes})
        for s in np.flatnonzero(mask):
            episode = running[s]
            if episode is None:
                continue
            observations[s], infos[s] = obs[s], slot_info(batch_info, int(s))
            episode.task_type = str(infos[s].get(TASK_TYPE, ""))
            if keep_trajectories:
                episode.observations.append(str(obs[s]))
            policy.reset(int(s), str(obs[s]), infos[s], episode.seed)

    try:
        start(np.ones(k, dtype=bool))
        while any(r is not None for r in running):
            active = [s for s in range(k) if running[s] is not None]
            chosen = policy.act_batch(active, [str(observations[s]) for s in active],
                                      [infos[s] for s in active])
            actions = [""] * k
            for s, action in zip(active, chosen, strict=True):
                actions[s] = action
            obs, rewards, terminated, truncated, batch_info = vec.step(tuple(actions))
            finished = np.zeros(k, dtype=bool)
            for s in active:
                episode = running[s]
                assert episode is not None
                info = slot_info(batch_info, s)
                observations[s], infos[s] = obs[s], info
                episode.steps += 1
                episode.total_reward += float(rewards[s])
                if keep_trajectories:
                    episode.actions.append(actions[s])
                    episode.observations.append(str(obs[s]))
                    episode.rewards.append(float(rewards[s]))
                if terminated[s] or truncated[s]:
                    outcome = info.get(OUTCOME) or {}
                    episode.success = bool(outcome.get("success", False))
                    score = outcome.get("score")
                    episode.score = None if score is None else float(score)
                    published = outcome.get("published")
                    episode.published = None if published is None else bool(published)
                    progress = (info.get("primitives") or {}).get("goal_progress")
                    episode.goal_progress = None if progress is None else float(progress)
                    results.append(episode)
                    finished[s] = True
                    if on_episode is not None:
                        on_episode(episode)
            if finished.any():
                start(finished)
    finally:
        vec.close()
    return sorted(results, key=lambda r: r.index)

