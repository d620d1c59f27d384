"""The taskset: one task per item of a single-step env's split, or per reset seed of an agent env.

Every task carries, as plain values on its data, what derl-bench plays: the env id, level,
split, step cap, answer format and the Meta-Reward with its semantics (the fields of
:class:`derl_bench.integrations.sessions.Task`), and the item (``index``) or game (``seed``).
A trace therefore says exactly what was played.

Scoring is derl-bench's: every card primitive is a metric (its value at the episode's last
step, where the family's success primitive says whether the episode succeeded) and the
Meta-Reward, compiled by :func:`derl_bench.reward.compile_reward` with the chosen semantics
over every step's primitives, is the one reward, of weight 1. The steps themselves are kept in
``trace.info["derl"]`` (``observations``, ``primitive_steps``, ``env_rewards``).

A single-step task is played in :meth:`DerlBenchTask.finalize`, which steps the env with the
model's last reply, so it scores under any verifiers env (``--env.id best-of-n`` too). An agent
env's episode is played turn by turn by :class:`derl_bench_v1.env.DerlBenchEnv`.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.types import AssistantMessage, content_text

from derl_bench.integrations import sessions
from derl_bench.policies.prompts import ANSWER_FORMAT, MATH_INSTRUCTION
from derl_bench.reward import MetaReward
from derl_bench.settings import DEFAULT_ENV_ID

RECORD = "derl"
"""The key of ``trace.info`` under which an episode's steps are kept."""


class DerlBenchData(vf.TaskData):
    """One row: what is played (see the module docstring) and which item or game."""

    env_id: str
    reward: str
    """The Meta-Reward expression (the family's success primitive unless one was given)."""
    semantics: str = "derl"
    level: str | None = None
    split: str | None = None
    max_episode_steps: int | None = None
    action_format: str | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Further keyword arguments of ``gymnasium.make``."""
    multi_turn: bool = False
    index: int | None = None
    """A single-step env's item: the position in the split ``reset(options={"index": i})``
    plays."""
    seed: int | None = None
    """An agent env's reset seed, which draws its game as derl-bench's trainer draws it."""

    def episode_task(self) -> sessions.Task:
        """The derl-bench task these values name."""
        return episode_task(self.env_id, reward=self.reward, semantics=self.semantics,
                            level=self.level, split=self.split,
                            max_episode_steps=self.max_episode_steps,
                            action_format=self.action_format, env_kwargs=self.env_kwargs)


def episode_task(env_id: str, *, reward: str | None, semantics: str, level: str | None,
                 split: str | None, max_episode_steps: int | None, action_format: str | None,
                 env_kwargs: dict[str, Any]) -> sessions.Task:
    """A :class:`~derl_bench.integrations.sessions.Task`, checked: a ``TaskError`` for an
    unknown id, level, split, answer format or Meta-Reward, a step cap below 1."""
    task = sessions.Task(env_id, level=level, split=split, max_episode_steps=max_episode_steps,
                         action_format=action_format, reward=reward, semantics=semantics,
                         env_kwargs=tuple(sorted(env_kwargs.items())))
    task.make_kwargs()
    task.compile_reward()
    return task


class SessionPool:
    """Idle :class:`~derl_bench.integrations.sessions.EpisodeSession` objects per task, reused
    by later rollouts: making an env loads its split (and a ScienceWorld env starts a JVM), a
    reset does not."""

    def __init__(self) -> None:
        self._idle: dict[sessions.Task, list[sessions.EpisodeSession]] = {}
        self._lock = threading.Lock()

    def take(self, task: sessions.Task) -> sessions.EpisodeSession:
        """An idle session of ``task``, else a new one (blocking: call it on a thread)."""
        with self._lock:
            idle = self._idle.get(task)
            if idle:
                return idle.pop()
        return sessions.EpisodeSession(task)

    def give_back(self, session: sessions.EpisodeSession) -> None:
        """Keep ``session`` for the next rollout of its task (a closed one is dropped)."""
        if session.closed:
            return
        with self._lock:
            self._idle.setdefault(session.task, []).append(session)

    def idle(self) -> int:
        """How many sessions are kept."""
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def close(self) -> None:
        """Close every kept session (an ALFWorld engine returns its library copy, a
        ScienceWorld JVM stops)."""
        with self._lock:
            kept = [s for idle in self._idle.values() for s in idle]
            self._idle.clear()
        for session in kept:
            # not on a thread: this also runs at interpreter exit, when no thread may start
            session.close()


SINGLE_STEP_POOL = SessionPool()
"""The sessions single-step tasks are scored with (:meth:`DerlBenchTask.finalize` has no env
to hold them, since it scores under any verifiers env)."""
atexit.register(SINGLE_STEP_POOL.close)


def new_record(first: sessions.StepView) -> dict[str, list[Any]]:
    """The ``trace.info["derl"]`` record of an episode that was just reset."""
    return {"observations": [first.observation], "primitive_steps": [], "env_rewards": []}


def add_step(record: dict[str, list[Any]], view: sessions.StepView) -> None:
    """Append one step's observation, primitives and env reward to ``record``."""
    record["observations"].append(view.observation)
    record["primitive_steps"].append(dict(view.primitives))
    record["env_rewards"].append(view.env_reward)


def reply_text(messages: Sequence[Any]) -> str:
    """The text of the last assistant message, as the model wrote it (not stripped: the
    primitives read the response whole, its length included); "" when there is none."""
    for message in reversed(list(messages)):
        if isinstance(message, AssistantMessage):
            return content_text(message.content)
    return ""


def _play_single_step(task: sessions.Task, index: int, text: str) -> list[sessions.StepView]:
    session = SINGLE_STEP_POOL.take(task)
    try:
        return session.play([text], index=index)
    finally:
        SINGLE_STEP_POOL.give_back(session)


class DerlBenchTask(vf.Task[DerlBenchData]):
    """The card's primitives as metrics and the Meta-Reward as the reward."""

    def _steps(self, trace: vf.Trace) -> list[dict[str, float]]:
        return list(trace.info.get(RECORD, {}).get("primitive_steps", []))

    def _meta_reward(self) -> MetaReward:
        return self.data.episode_task().compile_reward()

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Play a single-step task: reset the env to the row's item and step it with the
        model's reply. (An agent env's episode was played by its env, turn by turn.)"""
        data = self.data
        if RECORD in trace.info or data.index is None:
            return
        text = reply_text(trace.assistant_messages)
        views = await asyncio.to_thread(_play_single_step, data.episode_task(), data.index, text)
        record = new_record(views[0])
        for view in views[1:]:
            add_step(record, view)
        trace.info[RECORD] = record

    @vf.metric
    async def primitives(self, trace: vf.Trace) -> dict[str, float]:
        """Every primitive of the card, at the episode's last step (0.0 before any step)."""
        steps = self._steps(trace)
        last = steps[-1] if steps else {}
        names = self.data.episode_task().spec.primitives
        return {name: float(last.get(name, 0.0)) for name in names}

    @vf.reward(weight=1.0)
    async def meta_reward(self, trace: vf.Trace) -> float:
        """The Meta-Reward over every step's primitives (0.0 when no step was played)."""
        steps = self._steps(trace)
        if not steps:
            return 0.0
        return float(self._meta_reward().episodic_from_steps([steps])[0])


class DerlBenchConfig(vf.TasksetConfig):
    """What is played, under ``--env.taskset.*``."""

    env_id: str = DEFAULT_ENV_ID
    """Any registered ``derl/`` id."""
    reward: str | None = None
    """The Meta-Reward over the card's primitives (default: the family's success primitive)."""
    semantics: str = "derl"
    """``derl`` or ``derl-official`` (docs/meta-reward.md)."""
    level: str | None = "L0"
    split: str | None = "train"
    """A single-step env plays a level's eval set with ``split="eval"``."""
    num_examples: int = -1
    """The first N rows only (all when negative)."""
    seeds: list[int] | None = None
    """An agent env's reset seeds, one row each (default 0..N-1, N the split's size or
    ``num_examples``)."""
    max_episode_steps: int | None = None
    """An agent env's step cap (default the card's)."""
    action_format: str | None = None
    """Agent envs: ``think-action`` (default) or ``command``."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Further keyword arguments of ``gymnasium.make``."""


class DerlBenchTaskset(vf.Taskset[DerlBenchTask, DerlBenchConfig]):
    """A derl-bench env's items (single-step) or reset seeds (agent envs), one task each."""

    def __init__(self, config: DerlBenchConfig) -> None:
        super().__init__(config)
        # Checked now, so a bad value is refused where the run starts, not mid-rollout.
        self.episode_task = episode_task(
            config.env_id, reward=config.reward, semantics=config.semantics, level=config.level,
            split=config.split, max_episode_steps=config.max_episode_steps,
            action_format=config.action_format, env_kwargs=config.env_kwargs)
        self.items = self.episode_task.items()
        count = len(self.items)
        if config.num_examples >= 0:
            count = min(config.num_examples, count)
        if config.seeds is not None:
            if not self.episode_task.spec.multi_turn:
                raise sessions.TaskError(f"{config.env_id} is single-step: its rows are the "
                                         "split's items, so seeds do not apply")
            self.seeds = [sessions.reset_number("seed", seed) for seed in config.seeds]
        else:
            self.seeds = list(range(count))
        self.count = count

    def _data(self, **row: Any) -> DerlBenchData:
        task = self.episode_task
        return DerlBenchData(env_id=task.env_id, reward=task.reward_expression,
                             semantics=task.semantics, level=task.level, split=task.split,
                             max_episode_steps=task.max_episode_steps,
                             action_format=task.action_format,
                             env_kwargs=dict(task.env_kwargs),
                             multi_turn=task.spec.multi_turn, **row)

    def load(self) -> Iterator[DerlBenchTask]:
        """The rows, lazily: a single-step row's prompt is the env's observation for its item,
        so only the rows a run selects are reset."""
        task = self.episode_task
        if task.spec.multi_turn:
            intro = getattr(task.family.prompt, "intro", "")  # None where the card names none
            system = f"{intro or ''}\n{ANSWER_FORMAT}".strip()
            for seed in self.seeds:
                # The prompt is the game's first observation, which the env's reset gives.
                yield DerlBenchTask(self._data(name=f"{task.env_id} seed {seed}", seed=seed,
                                               system_prompt=system, prompt=None),
                                    self.config.task)
            return
        session = SINGLE_STEP_POOL.take(task)
        try:
            for index in range(self.count):
                view = session.reset(index=index)
                yield DerlBenchTask(self._data(id=self.items[index], index=index,
                                               system_prompt=MATH_INSTRUCTION,
                                               prompt=view.observation),
                                    self.config.task)
        finally:
            SINGLE_STEP_POOL.give_back(session)
