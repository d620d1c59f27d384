"""One derl-bench episode as the outside doors play it: the verifiers taskset
(``derl-bench-v1``, ``environments/derl_bench_v1``) and the OpenEnv server
(:mod:`derl_bench.integrations.openenv_server`) both step an :class:`EpisodeSession`, so what
they report is what ``gymnasium.make`` reports in-process, step for step.

A :class:`Task` names what is played: the env id, its level and split, the step cap, the
answer format of agent envs, and the Meta-Reward with its semantics. ``Task.make_env`` builds
the env the way derl-bench's own trainer does (agent envs take whole ``<think>…<action>…``
responses through :class:`~derl_bench.observers.think_action.ThinkActionWrapper`);
``action_format="command"`` takes bare commands instead, counting every one well formed, as
TRL's tool calls are (:mod:`derl_bench.grpo.trl`).

Each step reports the card's primitives, the env's own reward, the Meta-Reward of the episode
so far (``meta_reward``, derl-bench's compiler, never ``eval``) and its increment (``reward``):
the increments of an episode sum to its episodic Meta-Reward, as
:meth:`~derl_bench.reward.MetaReward.per_step` defines them::

    >>> task = Task("derl/Arithmetic-v0", reward="outcome + 0.5 * format_boxed")
    >>> session = EpisodeSession(task)
    >>> first = session.reset(seed=0)
    >>> first.observation
    'Compute 49 + 45 + 44.'
    >>> last = session.step("49 + 45 = 94, 94 + 44 = 138: \\\\boxed{138}")
    >>> last.reward, last.done, last.primitives["outcome"]
    (1.5, True, 1.0)
    >>> try:
    ...     session.step("again")
    ... except EpisodeOverError as exc:
    ...     print(exc)
    the episode is over (1 step); reset to play another
    >>> session.close()

Bad input raises a :class:`SessionError` subclass with a message a remote caller can act on:
:class:`TaskError` (an unknown env id, level, split, task parameter or Meta-Reward),
:class:`EpisodeOverError` and :class:`NotStartedError` (a step out of turn),
:class:`SessionClosedError` (a step after :meth:`EpisodeSession.close`).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, SupportsFloat

import gymnasium as gym

from derl_bench.envs.items import eval_splits, level_problems, split_items
from derl_bench.envs.spaces import as_text
from derl_bench.family import (
    Family,
    FamilySpec,
    UnknownFamilyError,
    on_reload,
    resolve,
    resolve_family,
)
from derl_bench.observers.think_action import ThinkActionWrapper, action_parser_for
from derl_bench.reward import MetaReward, MetaRewardError, compile_reward, env_primitives

ACTION_FORMATS = ("think-action", "command")
"""How an agent env reads an action: a whole ``<think>…</think><action>…</action>`` response
(the trainer's format; ``format_valid`` says whether it was well formed), or a bare command."""

TASK_PARAMETERS = ("level", "split", "max_episode_steps", "action_format", "reward", "semantics")
"""What a reset over the wire may change, besides ``seed`` and ``index``."""


ENV_LOCK = threading.RLock()
"""Held around every call into an env. The envs were written for one thread: TextWorld's
grammar parser (ALFWorld) is a module-level object that two threads corrupt. The servers of
this package run many sessions on threads; this lock makes their env calls take turns, which
costs little while Python holds the GIL anyway (more cores: more server processes)."""


class SessionError(ValueError):
    """A request this session cannot serve; the message says why and what to do."""


class TaskError(SessionError):
    """The task asked for does not exist: env id, level, split, parameter or Meta-Reward."""


class NotStartedError(SessionError):
    """A step before the first reset."""


class EpisodeOverError(SessionError):
    """A step after the episode ended (terminated or cut at the step cap)."""


class SessionClosedError(SessionError):
    """A call on a closed session (closed by its owner, or expired)."""


def derl_env_ids() -> list[str]:
    """Every registered ``derl/`` id, sorted."""
    return sorted(i for i in gym.registry if i.startswith("derl/"))


def check_env_id(env_id: str) -> Family:
    """The family of ``env_id``, or :class:`TaskError` naming the close ids.

    >>> check_env_id("derl/GSM8K-v0").name
    'math'
    >>> try:
    ...     check_env_id("derl/GSM8k-v0")
    ... except TaskError as exc:
    ...     print(exc)
    unknown env id 'derl/GSM8k-v0'; did you mean derl/GSM8K-v0?
    """
    if not isinstance(env_id, str) or env_id not in gym.registry:
        known = derl_env_ids()
        close = difflib.get_close_matches(str(env_id), known, n=3, cutoff=0.8)
        hint = (f"did you mean {', '.join(close)}?" if close
                else f"the derl-bench ids are {', '.join(known)}")
        raise TaskError(f"unknown env id {env_id!r}; {hint}")
    try:
        return resolve_family(env_id)
    except UnknownFamilyError as exc:
        raise TaskError(f"{env_id!r} is not a derl-bench env: {exc}") from None


def _env_class(spec: FamilySpec, env_id: str) -> Any:
    return resolve(spec.env(env_id).entry_point)


@dataclass(frozen=True)
class Task:
    """What an episode plays, as plain values (so a remote caller can name it).

    ``level``: the level the env is made at (agent envs), or, with ``split="eval"``, the level
    whose eval set a single-step env plays; ``None`` keeps the card's. ``split``: ``None``
    keeps the card's (``train``). ``max_episode_steps``: the step cap of agent envs (default
    the card's). ``reward``: a Meta-Reward over the card's primitives (default the family's
    success primitive). ``env_kwargs``: further keyword arguments of ``gymnasium.make``.
    """

    env_id: str
    level: str | None = None
    split: str | None = None
    max_episode_steps: int | None = None
    action_format: str | None = None
    reward: str | None = None
    semantics: str = "derl"
    env_kwargs: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        # Checked here, not where a value arrives, so a task built directly (the verifiers
        # door) and one changed by a reset over the wire (``with_parameters``, through
        # ``replace``) refuse the same values.
        for name in ("level", "split", "action_format", "reward"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TaskError(f"{name} must be a string, not {value!r}")
        if not isinstance(self.semantics, str):
            raise TaskError(f"semantics must be a string, not {self.semantics!r}")
        steps = self.max_episode_steps
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                                  or steps < 1):
            raise TaskError(f"max_episode_steps must be a positive integer, not {steps!r}")

    @functools.cached_property
    def family(self) -> Family:
        """The env's family, resolved once per task (and kept by :meth:`with_parameters`,
        which never changes the env id)."""
        return check_env_id(self.env_id)

    @property
    def spec(self) -> FamilySpec:
        """The env's family, as its card describes it."""
        return self.family.spec

    @property
    def reward_expression(self) -> str:
        """The Meta-Reward played: ``reward``, else the family's success primitive."""
        return self.reward if self.reward is not None else self.spec.success_primitive

    def with_parameters(self, parameters: dict[str, Any]) -> Task:
        """This task with some of :data:`TASK_PARAMETERS` changed (``None`` keeps a value);
        :class:`TaskError` for any other name."""
        unknown = sorted(set(parameters) - set(TASK_PARAMETERS))
        if unknown:
            raise TaskError(f"unknown task parameter(s) {', '.join(unknown)}; a reset takes "
                            f"seed, index and {', '.join(TASK_PARAMETERS)}")
        given = {k: v for k, v in parameters.items() if v is not None}
        task = replace(self, **given)  # checks the values (``__post_init__``)
        if "family" in self.__dict__:  # the same env id: its family carries over
            task.__dict__["family"] = self.__dict__["family"]
        return task

    def make_kwargs(self) -> dict[str, Any]:
        """``gymnasium.make``'s keyword arguments for this task (checked: :class:`TaskError`
        for a level or split the env does not have)."""
        spec = self.spec
        kwargs = dict(self.env_kwargs)
        made_at_level = "level" in inspect.signature(_env_class(spec, self.env_id)).parameters
        if self.level is not None:
            problem = level_problems(self.family, self.env_id, [self.level], **kwargs)
            if problem:
                raise TaskError(problem)
            if made_at_level:
                kwargs["level"] = self.level
            elif self.split == "eval":
                kwargs.update(eval_splits(self.family, self.env_id, **kwargs)[self.level])
        if self.split is not None and not (self.split == "eval" and not made_at_level):
            kwargs["split"] = self.split
        if self.split == "eval" and not made_at_level and self.level is None:
            raise TaskError(f"{self.env_id}: split 'eval' names a level's eval set; give the "
                            f"level too ({', '.join(eval_splits(self.family, self.env_id))})")
        if spec.multi_turn:
            kwargs["max_episode_steps"] = self.max_episode_steps or spec.max_steps
        elif self.max_episode_steps not in (None, 1):
            raise TaskError(f"{self.env_id} is single-step: max_episode_steps does not apply")
        if self.action_format is not None and self.action_format not in ACTION_FORMATS:
            raise TaskError(f"action_format must be one of {', '.join(ACTION_FORMATS)}, "
                            f"not {self.action_format!r}")
        if self.action_format is not None and not spec.multi_turn:
            raise TaskError(f"{self.env_id} is single-step: the whole response is its action, "
                            "so action_format does not apply")
        return kwargs

    def compile_reward(self) -> MetaReward:
        """The task's Meta-Reward, compiled against the env's primitives (:class:`TaskError`
        when it does not compile); once per expression, env and semantics in a process, since
        a compiled reward holds no state and every session of a served task plays the same."""
        return _compiled(self.reward_expression, self.env_id, self.semantics, self.family)

    def make_env(self) -> gym.Env:
        """The env as derl-bench's trainer makes it (see the module docstring)."""
        kwargs = self.make_kwargs()
        try:
            env = gym.make(self.env_id, **kwargs)
        except (ValueError, KeyError) as exc:  # an env's own refusal of its arguments
            raise TaskError(f"{self.env_id} with {kwargs}: {exc}") from None
        if not self.spec.multi_turn:
            return env
        if (self.action_format or ACTION_FORMATS[0]) == "command":
            return CommandWrapper(env)
        return ThinkActionWrapper(env, action_parser_for(self.family))

    def items(self) -> list[str]:
        """The item ids of the task's split, in the order ``reset(index=i)`` plays them."""
        kwargs = self.make_kwargs()
        kwargs.pop("max_episode_steps", None)
        split = kwargs.pop("split", None) or str(
            self.spec.env(self.env_id).kwargs.get("split", "train"))
        level = kwargs.pop("level", None)
        try:
            return split_items(self.family, self.env_id, split, level, **kwargs)
        except ValueError as exc:
            raise TaskError(str(exc)) from None


class CommandWrapper(gym.Wrapper):
    """An agent env that takes bare commands: ``format_valid`` is 1.0 on every step (0.0 on
    reset, as :class:`~derl_bench.observers.think_action.ThinkActionWrapper` reports it)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None,
              ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, _with_format(info, 0.0)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, _with_format(info, 1.0)


def _with_format(info: dict[str, Any], value: float) -> dict[str, Any]:
    return {**info, "primitives": {**info.get("primitives", {}), "format_valid": value}}


@dataclass(frozen=True)
class StepView:
    """What one reset or step reports: ``reward`` is the Meta-Reward's increment (0.0 on a
    reset), ``meta_reward`` the episode's Meta-Reward so far, ``env_reward`` the env's own."""

    observation: str
    reward: float
    done: bool
    terminated: bool
    truncated: bool
    primitives: dict[str, float]
    meta_reward: float
    env_reward: float
    step: int

    def metadata(self) -> dict[str, Any]:
        """The JSON-ready fields beside the observation text, reward and done flag."""
        return {"primitives": dict(self.primitives), "meta_reward": self.meta_reward,
                "env_reward": self.env_reward, "terminated": self.terminated,
                "truncated": self.truncated, "step": self.step}


def reset_number(name: str, value: Any) -> int:
    """``value`` as the ``seed`` or ``index`` of a reset, or :class:`TaskError`: a
    non-negative integer (a numpy integer too; not a bool, a float or a string).

    >>> reset_number("seed", 3)
    3
    >>> try:
    ...     reset_number("seed", -1)
    ... except TaskError as exc:
    ...     print(exc)
    seed must be a non-negative integer, not -1
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise TaskError(f"{name} must be a non-negative integer, not {value!r}")
    return int(value)


_COMPILED: OrderedDict[tuple[str, str, str], MetaReward] = OrderedDict()
_COMPILED_MAX = 256
_COMPILED_LOCK = threading.Lock()


def _compiled(expr: str, env_id: str, semantics: str, family: Family) -> MetaReward:
    # the most recently used 256, keyed by what they are compiled from: the env id's family
    # (the one the task resolved, so nothing is looked up again) only gives the primitives
    key = (expr, env_id, semantics)
    with _COMPILED_LOCK:  # sessions reset from the server's threads
        if key in _COMPILED:
            _COMPILED.move_to_end(key)
            return _COMPILED[key]
    try:
        reward = compile_reward(expr, env_primitives(env_id, family), semantics=semantics)
    except MetaRewardError as exc:
        raise TaskError(f"reward {expr!r}: {exc}") from None
    with _COMPILED_LOCK:
        reward = _COMPILED.setdefault(key, reward)
        _COMPILED.move_to_end(key)
        if len(_COMPILED) > _COMPILED_MAX:
            _COMPILED.popitem(last=False)
    return reward


on_reload(_COMPILED.clear)  # a changed card may change the primitives a reward reads


class EpisodeSession:
    """One env playing one episode at a time (see the module docstring)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.meta_reward = task.compile_reward()
        with ENV_LOCK:
            self._env: gym.Env | None = task.make_env()
        self.primitive_steps: list[dict[str, float]] = []
        self.started = False
        self.done = False
        self._so_far = 0.0

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._env is None

    def _live_env(self) -> gym.Env:
        if self._env is None:
            raise SessionClosedError("this session is closed; open a new one")
        return self._env

    def reset(self, seed: int | None = None, index: int | None = None) -> StepView:
        """Start an episode: the game or problem ``index`` of the split, else one drawn
        with ``seed`` (as ``env.reset(seed=seed)`` draws it)."""
        env = self._live_env()
        seed = None if seed is None else reset_number("seed", seed)
        index = None if index is None else reset_number("index", index)
        options = None if index is None else {"index": index}
        try:
            with ENV_LOCK:
                observation, info = env.reset(seed=seed, options=options)
        except (IndexError, ValueError) as exc:
            raise TaskError(str(exc)) from None
        self.primitive_steps, self.started, self.done, self._so_far = [], True, False, 0.0
        return StepView(as_text(observation), 0.0, False, False, False,
                        _floats(info.get("primitives", {})), 0.0, 0.0, 0)

    def step(self, action: str) -> StepView:
        """Play ``action`` (a whole response, or a command: see :class:`Task`)."""
        env = self._live_env()
        if not self.started:
            raise NotStartedError("no episode is running; reset first")
        if self.done:
            steps = len(self.primitive_steps)
            raise EpisodeOverError(f"the episode is over ({steps} step{'s' * (steps != 1)}); "
                                   "reset to play another")
        if not isinstance(action, str):
            raise TaskError(f"an action is text, not {type(action).__name__}")
        with ENV_LOCK:
            observation, env_reward, terminated, truncated, info = env.step(action)
        primitives = _floats(info.get("primitives", {}))
        self.primitive_steps.append(primitives)
        self.done = bool(terminated or truncated)
        total = float(self.meta_reward.episodic_from_steps([self.primitive_steps])[0])
        increment, self._so_far = total - self._so_far, total
        return StepView(as_text(observation), increment, self.done, bool(terminated),
                        bool(truncated), primitives, total, float(env_reward),
                        len(self.primitive_steps))

    def close(self) -> None:
        """Close the env (a ScienceWorld JVM stops, an ALFWorld engine returns its library
        copy); later calls raise :class:`SessionClosedError`. Idempotent."""
        env, self._env = self._env, None
        if env is not None:
            with ENV_LOCK:
                env.close()

    def play(self, actions: Sequence[str], seed: int | None = None,
             index: int | None = None) -> list[StepView]:
        """Reset, then step each action until the episode ends; the reset's view first. No
        other thread's call comes between these (a session shared by threads stays whole)."""
        with ENV_LOCK:
            views = [self.reset(seed=seed, index=index)]
            for action in actions:
                if self.done:
                    break
                views.append(self.step(action))
        return views


def _floats(primitives: Any) -> dict[str, float]:
    # ObserveWrapper has checked every value is a finite float, so they all fit in JSON
    return {str(k): float(v) for k, v in dict(primitives).items()}


__all__ = ["ACTION_FORMATS", "ENV_LOCK", "TASK_PARAMETERS", "CommandWrapper", "EpisodeOverError",
           "EpisodeSession", "NotStartedError", "SessionClosedError", "SessionError", "StepView",
           "Task", "TaskError", "check_env_id", "derl_env_ids", "reset_number"]
