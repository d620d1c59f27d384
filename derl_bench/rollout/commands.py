"""Agent episodes of a command policy: a vector of envs played in lockstep, one batched forward
per turn.

A command policy (:class:`~derl_bench.policies.commands.CommandPolicy`) picks one of the env's
admissible commands from a state it keeps itself (the state tracker of the family's card's
``commands`` hook, :class:`~derl_bench.policies.command_model.CommandParts`, handed in as
``state_factory``: the env's parser belongs to the caller, as in verl-agent). :func:`play` runs
a list of games on a few envs at once: every turn it scores the states of all running episodes
in one call, then steps each env; an env whose episode ended takes the next game of the list.
Each step keeps what training needs: the prompt's and the commands' token ids, the index
executed, its log-probability at rollout, the teacher's index when the env reports one
(``info["teacher_action"]``), and the step's primitives.

Who acts is drawn per step, so one function serves every use:

- evaluation: ``greedy=True``;
- GRPO: sampled commands, their log-probabilities kept for the update;
- behaviour cloning and DAgger: ``teacher_share`` (the teacher's command is executed with that
  probability) and ``detour_share`` (a uniformly random admissible command instead), the label
  always the teacher's.

Draws come from one ``numpy`` generator and one ``torch`` generator seeded by ``seed``, so the
same call plays the same episodes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from derl_bench.family import Family
from derl_bench.policies.commands import (
    CommandPolicy,
    StateIds,
    command_log_probs,
    draw_commands,
    greedy_command,
    sample_command,
)
from derl_bench.policies.fast import PrefillCache


class AgentState(Protocol):
    """What a policy's view of an episode offers (``CompactState`` is one)."""

    def reset(self, observation: str, info: Mapping[str, Any] | None = None) -> Any: ...
    def update(self, command: str, observation: str,
               info: Mapping[str, Any] | None = None) -> Any: ...
    def render(self) -> str: ...


@dataclass
class CommandStep:
    """One turn: the state's ids, the commands, who chose what, and what the env emitted."""

    ids: StateIds
    commands: list[str]
    chosen: int
    log_prob: float
    """The policy's log-probability of ``chosen`` at rollout (NaN when it was not scored)."""
    label: int | None
    """The teacher's index among ``commands`` (None where the env reports no teacher)."""
    actor: str
    """``policy``, ``teacher`` or ``detour``."""
    primitives: dict[str, float] = field(default_factory=dict)


@dataclass
class CommandEpisode:
    """One game played to its end or the step cap."""

    game: Any
    """The reset options that chose the game (e.g. ``{"index": 3}``)."""
    game_id: str
    task_type: str
    steps: list[CommandStep] = field(default_factory=list)
    won: bool = False
    truncated: bool = False

    @property
    def length(self) -> int:
        return len(self.steps)

    def primitive_steps(self) -> list[Mapping[str, float]]:
        """Each step's primitives, for a Meta-Reward's ``episodic_from_steps``."""
        return [s.primitives for s in self.steps]


@dataclass
class _Running:
    env: gym.Env
    state: Any
    episode: CommandEpisode
    admissible: list[str]
    teacher: str | None


def command_envs(env_id: str, level: str, split: str, n: int, *, family: Family,
                 max_episode_steps: int | None = None, data_root: str | None = None,
                 teacher: bool = False, think_action: bool = False) -> list[gym.Env]:
    """``n`` envs of ``level``'s ``split`` for :func:`play`: ``teacher`` puts the teacher's
    command in ``info``; ``think_action`` sends each command through the think/action parser
    (the card's ``action_parser``: its ``format_valid``), as an LLM's response would reach the
    env. That parser is ``family``'s (``env_id``'s :class:`~derl_bench.family.Family`, resolved
    where the caller started)."""
    from derl_bench.observers.think_action import ThinkActionWrapper, action_parser_for

    kwargs: dict[str, Any] = {"level": level, "split": split}
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    if data_root is not None:
        kwargs["data_root"] = data_root
    if teacher:
        kwargs["teacher"] = True
    envs = [gym.make(env_id, **kwargs) for _ in range(n)]
    if not think_action:
        return envs
    return [ThinkActionWrapper(env, action_parser_for(family)) for env in envs]


def game_count(env: gym.Env) -> int:
    """How many games ``env`` plays by index (``reset(options={"index": i})``)."""
    ids = getattr(env.unwrapped, "game_ids", None)
    if ids is None:
        raise TypeError(f"{env.unwrapped!r} does not play indexed games (no game_ids)")
    return len(ids)


def _admissible(info: Mapping[str, Any]) -> list[str]:
    return [str(c) for c in info.get("admissible_commands", [])]


def play(envs: Sequence[gym.Env], policy: CommandPolicy | None, games: Sequence[Mapping[str, Any]],
         state_factory: Callable[[], AgentState], *, greedy: bool = False,
         temperature: float = 1.0,
         teacher_share: float = 0.0, detour_share: float = 0.0, seed: int = 0,
         respond: Callable[[str], str] | None = None, decode: bool = False,
         timing: dict[str, float] | None = None,
         on_episode: Callable[[CommandEpisode], None] | None = None) -> list[CommandEpisode]:
    """Play each game of ``games`` (reset options) once, ``len(envs)`` at a time.

    Args:
        envs: the envs to play on (each plays several games in turn).
        policy: the command policy (it encodes every state, and scores those it acts in);
            ``None`` only with ``teacher_share=1``, and then the steps keep no token ids.
        games: reset options, one episode each, played in this order.
        state_factory: a new policy view per episode.
        greedy: the policy's most probable command instead of a sample.
        temperature: the policy's draws come from ``softmax(log_probs / temperature)`` over
            whole commands (:func:`~derl_bench.policies.commands.sample_command`); each step's
            ``log_prob`` stays the model's own. With ``decode``, each token is drawn from its
            masked logits divided by the temperature, and ``log_prob`` is of that tempered
            draw (the policy GRPO trains at that temperature;
            :func:`~derl_bench.policies.commands.draw_commands`).
        teacher_share: probability that a step executes the teacher's command.
        detour_share: probability that a step executes a uniformly random admissible command
            (drawn before the teacher's; the teacher still labels the state).
        seed: seeds both generators (the draws of who acts and the policy's samples).
        respond: what is sent to the env for a chosen command (default: the command itself;
            e.g. the command in the think/action tags of an env behind
            :class:`~derl_bench.observers.think_action.ThinkActionWrapper`).
        decode: sample by decoding inside each state's trie
            (:func:`~derl_bench.policies.commands.sample_commands`) instead of scoring every
            command: the same distribution, other draws, a fraction of the model's time. A
            state's prompt is prefilled once per call, however many turns reach it
            (:class:`~derl_bench.policies.fast.PrefillCache`).
        timing: if given, seconds are added to its ``reset_s`` (loading and resetting games),
            ``step_s`` (the envs' steps) and ``model_s`` (encoding and scoring states).
        on_episode: called with each episode as it ends.

    Returns the episodes in the order of ``games``.
    """
    if policy is None and teacher_share < 1.0:
        raise ValueError("a policy is needed unless the teacher executes every step")
    if not 0.0 <= teacher_share <= 1.0 or not 0.0 <= detour_share <= 1.0:
        raise ValueError("teacher_share and detour_share are probabilities")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0 (greedy=True for the most "
                         f"probable command), not {temperature}")
    clock = timing if timing is not None else {}
    for key in ("reset_s", "step_s", "model_s"):
        clock.setdefault(key, 0.0)
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    # The weights stay as they are through the call, and states recur across its turns.
    prefills = PrefillCache()
    queue = list(enumerate(games))
    done: dict[int, CommandEpisode] = {}
    running: dict[int, _Running] = {}
    slots: dict[int, int] = {}  # env slot -> game position

    def start(slot: int) -> None:
        position, options = queue.pop(0)
        env = envs[slot]
        began = time.perf_counter()
        observation, info = env.reset(options=dict(options))
        clock["reset_s"] += time.perf_counter() - began
        state = state_factory()
        state.reset(observation, info)
        episode = CommandEpisode(dict(options), str(info.get("game_id", "")),
                                 str(info.get("task_type", "")))
        running[slot] = _Running(env, state, episode, _admissible(info),
                                 info.get("teacher_action"))
        slots[slot] = position

    for slot in range(min(len(envs), len(queue))):
        start(slot)
    while running:
        order = sorted(running)
        # Who acts at each running env: a detour, the teacher, or the policy.
        actors = []
        for slot in order:
            r = running[slot]
            if detour_share and rng.random() < detour_share:
                actors.append("detour")
            elif teacher_share and r.teacher and rng.random() < teacher_share:
                actors.append("teacher")
            else:
                actors.append("policy")
        began = time.perf_counter()
        texts = [(running[s].state.render(), running[s].admissible) for s in order]
        ids = policy.encode_states(texts) if policy is not None else [([], []) for _ in texts]
        scored = [i for i, a in enumerate(actors) if a == "policy"]
        log_probs: dict[int, torch.Tensor] = {}
        drawn_log_probs: dict[int, float] = {}
        drawn: dict[int, int] = {}
        if scored and decode and not greedy:
            assert policy is not None
            # Token by token inside each trie, each draw's log-probability from the same
            # masked logits: the same distribution for a fraction of the scoring.
            sub = [ids[i] for i in scored]
            with torch.no_grad():
                picks, picked = draw_commands(policy.model, sub, policy.end_id,
                                              policy.tokenizer.pad_token_id, generator,
                                              temperature, prefills)
            drawn = dict(zip(scored, picks, strict=True))
            drawn_log_probs = dict(zip(scored, picked.tolist(), strict=True))
        elif scored:
            assert policy is not None
            with torch.no_grad():
                values = command_log_probs(policy.model, [ids[i] for i in scored],
                                           policy.end_id)
            log_probs = dict(zip(scored, values, strict=True))
        clock["model_s"] += time.perf_counter() - began
        for i, slot in enumerate(order):
            r = running[slot]
            commands = r.admissible
            label = commands.index(r.teacher) if r.teacher in commands else None
            if actors[i] == "detour":
                chosen = int(rng.integers(len(commands)))
            elif actors[i] == "teacher":
                assert label is not None
                chosen = label
            elif i in drawn:
                chosen = drawn[i]
            else:
                lp = log_probs[i]
                chosen = (greedy_command(lp) if greedy
                          else sample_command(lp, generator, temperature))
            if i in drawn:
                lp_chosen = drawn_log_probs[i]
            else:
                lp_chosen = float(log_probs[i][chosen]) if i in log_probs else math.nan
            command = commands[chosen]
            sent = command if respond is None else respond(command)
            began = time.perf_counter()
            observation, _, terminated, truncated, info = r.env.step(sent)
            clock["step_s"] += time.perf_counter() - began
            r.episode.steps.append(CommandStep(ids[i], list(commands), chosen, lp_chosen, label,
                                               actors[i], dict(info.get("primitives", {}))))
            if terminated or truncated:
                r.episode.won = bool(info.get("won", terminated))
                r.episode.truncated = bool(truncated and not terminated)
                done[slots[slot]] = r.episode
                if on_episode is not None:
                    on_episode(r.episode)
                del running[slot]
                if queue:
                    start(slot)
                continue
            r.state.update(command, observation, info)
            r.admissible = _admissible(info)
            r.teacher = info.get("teacher_action")
    return [done[i] for i in range(len(games))]


__all__ = ["AgentState", "CommandEpisode", "CommandStep", "command_envs", "game_count",
           "play"]
