"""Collect episodes with an LLM policy: single-step (math) and multi-turn (agents).

Both return a flat list of :class:`~derl_bench.rollout.types.Episode`, ``group_size`` per
reset seed, grouped by ``Episode.group``:

- :func:`rollout_single_step`: reset to a problem, sample G responses to the same prompt in one
  batch, grade each with a fresh ``reset(seed)`` + ``step(response)``.
- :func:`rollout_multi_turn`: G copies of a game reset with the same seed, stepped in lockstep;
  every step is one generation over all still-running episodes (the verl-agent protocol). Each
  env must take whole responses, i.e. be wrapped in
  :class:`~derl_bench.observers.think_action.ThinkActionWrapper`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from derl_bench.policies import Generation, LLMPolicy
from derl_bench.policies.session import (
    AgentSession,
    observation_text,
    task_description,
)
from derl_bench.rollout.remote import reset_all, step_all
from derl_bench.rollout.types import Episode, Step


def _single_step_reset(env: gym.Env, key: int, by_index: bool) -> tuple[Any, dict[str, Any]]:
    if by_index:
        return env.reset(options={"index": int(key)})
    return env.reset(seed=int(key))


def single_step_prompts(env: gym.Env, policy: LLMPolicy, seeds: Sequence[int],
                        group_size: int, by_index: bool = False) -> list[list[int]]:
    """The prompt of every episode of :func:`rollout_single_step`: each problem's, G times."""
    problems = [observation_text(_single_step_reset(env, seed, by_index)[0]) for seed in seeds]
    encoded = [policy.math_prompt(p) for p in problems]  # once per problem, not per sample
    return [ids for ids in encoded for _ in range(group_size)]


def grade_single_step(env: gym.Env, generations: Sequence[Generation], seeds: Sequence[int],
                      group_size: int, first_group: int = 0,
                      by_index: bool = False) -> list[Episode]:
    """Grade the responses to :func:`single_step_prompts`' prompts: one episode each."""
    episodes: list[Episode] = []
    for index, gen in enumerate(generations):
        g = index // group_size
        _single_step_reset(env, seeds[g], by_index)
        _, reward, terminated, truncated, info = env.step(gen.text)
        step = Step(gen.prompt_ids, gen.completion_ids, gen.text, gen.text,
                    dict(info.get("primitives", {})), float(reward))
        episodes.append(Episode(first_group + g, int(seeds[g]), [step], bool(terminated),
                                bool(truncated), _summary(info)))
    return episodes


def rollout_single_step(env: gym.Env, policy: LLMPolicy, seeds: Sequence[int],
                        group_size: int, first_group: int = 0,
                        by_index: bool = False) -> list[Episode]:
    """G graded responses for each problem picked by ``seeds`` (see the module docstring).

    With ``by_index`` the "seeds" are problem indices of the split
    (``reset(options={"index": i})``): a fixed set where each problem is seen once.
    """
    prompts = single_step_prompts(env, policy, seeds, group_size, by_index)
    return grade_single_step(env, policy.generate(prompts), seeds, group_size, first_group,
                             by_index)


def rollout_multi_turn(envs: Sequence[gym.Env], policy: LLMPolicy, seeds: Sequence[int],
                       group_size: int, first_group: int = 0) -> list[Episode]:
    """Run ``len(seeds) * group_size`` episodes, env ``i`` in group ``i // group_size``, each
    until its env says it ended: the step cap is the envs' own ``TimeLimit`` (every
    ``gymnasium.make`` of a multi-turn id has one; see :mod:`derl_bench.registration`)."""
    if len(envs) != len(seeds) * group_size:
        raise ValueError(f"need {len(seeds) * group_size} envs for {len(seeds)} seeds x "
                         f"{group_size}, got {len(envs)}")
    episodes, sessions = [], []
    env_seeds = [int(seeds[i // group_size]) for i in range(len(envs))]
    for i, (obs, info) in enumerate(reset_all(envs, env_seeds)):
        episodes.append(Episode(first_group + i // group_size, env_seeds[i]))
        sessions.append(AgentSession.start(obs, info))
    active = list(range(len(envs)))
    while active:
        generations = policy.generate([policy.agent_prompt(sessions[i].turn()) for i in active])
        # Every live env steps at once where it can (envs in Ray actors, rollout.remote).
        results = step_all([envs[i] for i in active], [gen.text for gen in generations])
        still = []
        for i, gen, result in zip(active, generations, results, strict=True):
            obs, reward, terminated, truncated, info = result
            action = str(info.get("action", policy.parse_action(gen.text)))
            episodes[i].steps.append(Step(gen.prompt_ids, gen.completion_ids, gen.text, action,
                                          dict(info.get("primitives", {})), float(reward)))
            sessions[i].act(action)
            sessions[i].observe(obs, info)
            if terminated or truncated:
                episodes[i].terminated = bool(terminated)
                # TimeLimit also flags a win on the last allowed step; that episode ended won.
                episodes[i].truncated = bool(truncated and not terminated)
                episodes[i].info = _summary(info)
            else:
                still.append(i)
        active = still
    return episodes


def _summary(info: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar parts of a final info, kept for logging."""
    return {k: v for k, v in info.items() if isinstance(v, bool | int | float | str)
            and k != "raw_response"}


__all__ = [
    "grade_single_step",
    "rollout_multi_turn",
    "rollout_single_step",
    "single_step_prompts",
    "task_description",
]
