"""``derl/ScienceWorld-v0``: ScienceWorld's 30 science tasks behind the Gymnasium API.

The observation is text (on reset: the task description, then the first room); the action is
a text command such as ``"open door to kitchen"``. The reward is the change of the simulator's
score over 100, so an episode's rewards sum to its final score minus its score at reset (a
few tasks award points for the starting room), in ``[-1, 1]``. ``terminated``
is set when the simulator declares the task completed or failed (score below zero, e.g. after
focusing on the wrong object); ``truncated`` when the step cap (30 by default) is reached.
``info`` holds two success flags: ``success`` (strict: completed with score 100) and
``published_success`` (RLVMR's rule, which published numbers use: the episode ended, including
by upstream's 100-tick limit, with a score above 0; gameable by scoring a little and waiting).

    >>> import gymnasium as gym
    >>> env = gym.make("derl_bench:derl/ScienceWorld-v0", level="L0", split="eval")
    >>> obs, info = env.reset(seed=0)
    >>> info["task_name"], info["variation"]
    ('test-conductivity', 576)
    >>> obs, reward, terminated, truncated, info = env.step("look around")
    >>> obs.splitlines()[0]
    'This outside location is called the outside. Here you see: '
    >>> env.unwrapped.valid_actions()[:2]
    ['close door to foundry', 'close door to greenhouse']
    >>> env.close()

Levels and splits follow the RLVMR/DERL protocol (:mod:`derl_bench.families.scienceworld.splits`).
A step asks the simulator only for the observation, score and completion; valid actions, goal
progress and the gold path are fetched when something asks for them
(:meth:`ScienceWorldEnv.valid_actions`, :meth:`ScienceWorldEnv.goal_progress`,
:meth:`ScienceWorldEnv.gold_path`) and cached until the next step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym

from derl_bench.envs.options import reset_options
from derl_bench.envs.spaces import text_space
from derl_bench.families.scienceworld.simulator import (
    DEFAULT_JVM_MEMORY,
    UNKNOWN_ACTION,
    SimulatorCrashedError,
    SimulatorProcess,
)
from derl_bench.families.scienceworld.splits import Pair, manifest_name, split_pairs
from derl_bench.families.scienceworld.text import (
    NO_MATCH,
    clean_action,
    location_in,
    parse_goal_progress,
)

FIRST_ACTION = "look around"
PROTOCOLS = ("strict", "rlvmr")
RLVMR_TICK_LIMIT = 100
"""RLVMR creates upstream's env with ``envStepLimit=100``; upstream's ``step`` then declares the
episode completed once ``moves > envStepLimit`` (``moves`` counts simulator ticks, and one
``wait`` costs 10). See RLVMR/code/agent_system/environments/env_package/sciworld/envs.py
(zzjweb/digitalhuman) and ``scienceworld.ScienceWorldEnv.step``."""
RESET_OBSERVATIONS = ("task_and_look", "look")
OBJECT_ORDERS = ("fixed", "shuffled")
MAX_OBSERVATION_CHARS = 1 << 20
class ScienceWorldEnv(gym.Env[str, str]):
    """ScienceWorld, one (task, variation) per episode, drawn from a level's split.

    Args:
        level: ``"L0"``, ``"L1"`` or ``"L2"`` (see :mod:`~derl_bench.families.scienceworld.splits`).
        split: ``"train"`` or ``"eval"``.
        simplifications: the simulator's simplification string (``"easy"`` = all of them).
        success_score: the score (0..100) a completed episode needs to count as a success.
        jvm_memory: heap cap of the simulator's JVM (``-Xmx``).
        port: gateway port of the JVM; 0 lets the OS pick a free one.
        java_path: the ``java`` executable (default: ``$JAVA_HOME/bin/java``, then PATH).
        jvm_options: extra JVM options.
        include_valid_actions: put ``valid_actions`` in every ``info`` (costs a simulator call).
        max_action_chars: longer actions are answered like unparseable input without reaching
            the simulator.
        protocol: ``"strict"`` (the default) or ``"rlvmr"``, which also ends an episode, as
            RLVMR's upstream env does, once the simulator's tick count exceeds
            :data:`RLVMR_TICK_LIMIT` and shows upstream's reset observation.
        reset_observation: ``"task_and_look"`` (the task description, a blank line, then the
            first room; the strict default) or ``"look"`` (upstream's ``reset``: the first room
            only; the rlvmr default). ``info["task_description"]`` has the task either way.
        object_order: ``"fixed"`` (the default: the same text on every load) or
            ``"shuffled"`` (upstream's behaviour: object order changes on every load).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        level: str = "L0",
        split: str = "train",
        simplifications: str = "easy",
        success_score: int = 100,
        jvm_memory: str = DEFAULT_JVM_MEMORY,
        port: int = 0,
        java_path: str | None = None,
        jvm_options: tuple[str, ...] | list[str] = (),
        include_valid_actions: bool = False,
        max_action_chars: int = 4096,
        render_mode: str | None = None,
        protocol: str = "strict",
        reset_observation: str | None = None,
        object_order: str = "fixed",
    ) -> None:
        manifest_name(level, split)  # validates both
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        if reset_observation is None:
            reset_observation = "look" if protocol == "rlvmr" else "task_and_look"
        if reset_observation not in RESET_OBSERVATIONS:
            raise ValueError(f"reset_observation must be one of {RESET_OBSERVATIONS}, "
                             f"got {reset_observation!r}")
        if object_order not in OBJECT_ORDERS:
            raise ValueError(f"object_order must be one of {OBJECT_ORDERS}, got {object_order!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"unsupported render_mode {render_mode!r}; only 'ansi'")
        self.level = level
        self.split = split
        self.simplifications = simplifications
        self.success_score = int(success_score)
        self.include_valid_actions = include_valid_actions
        self.max_action_chars = int(max_action_chars)
        self.render_mode = render_mode
        self.protocol = protocol
        self.reset_observation = reset_observation
        self.object_order = object_order
        self._jvm: dict[str, Any] = {
            "jvm_memory": jvm_memory,
            "port": int(port),
            "java_path": java_path,
            "jvm_options": tuple(jvm_options),
            "fixed_object_order": object_order == "fixed",
        }
        self.observation_space = text_space(MAX_OBSERVATION_CHARS)
        self.action_space = text_space(self.max_action_chars)
        self._sim: SimulatorProcess | None = None
        self._pairs: list[Pair] | None = None
        self._task_names: list[str] | None = None
        self._gold: dict[tuple[str, int, str], list[str]] = {}
        self._clear_episode()

    def _clear_episode(self) -> None:
        self.task_name: str | None = None
        self.variation: int | None = None
        self.steps = 0
        self.score = 0
        self.completed = False
        self.moves = 0
        self._published: bool | None = None
        self.agent_location: str | None = None
        self.last_action_parsed = False
        self.history: list[str] = []
        self._last_observation = ""
        self._valid_cache: list[str] | None = None
        self._goal_cache: tuple[int, int] | None = None

    # -- splits --------------------------------------------------------------------------------

    @property
    def pairs(self) -> list[Pair]:
        """The ``(task_name, variation)`` pairs of this env's level and split, in manifest order."""
        if self._pairs is None:
            self._pairs = split_pairs(self.level, self.split)
        return self._pairs

    def episodes(self) -> Iterator[dict[str, Any]]:
        """Reset options covering the split exhaustively, in manifest order::

            for options in env.unwrapped.episodes():
                obs, info = env.reset(options=options)
        """
        for task, variation in self.pairs:
            yield {"task": task, "variation": variation}

    # -- simulator lifecycle -------------------------------------------------------------------

    @property
    def simulator(self) -> SimulatorProcess:
        """The running simulator, started on first use and restarted after a crash."""
        if self._sim is not None and not self._sim.alive():
            self._sim.close()
            self._sim = None
        if self._sim is None:
            self._sim = SimulatorProcess(**self._jvm)
        return self._sim

    @property
    def jvm_address(self) -> tuple[int, int] | None:
        """``(pid, port)`` of the running simulator JVM, or None before the first reset."""
        return (self._sim.pid, self._sim.port) if self._sim is not None else None

    def task_names(self) -> list[str]:
        """The simulator's task names, sorted (the order RLVMR's task indices refer to)."""
        if self._task_names is None:
            self._task_names = sorted(self.simulator.task_names())
        return self._task_names

    def _live(self) -> SimulatorProcess:
        """The episode's simulator. Unlike :attr:`simulator` it never starts a new one: a dead
        JVM makes the next call raise :class:`SimulatorCrashedError`."""
        if self._sim is None or self.task_name is None:
            raise gym.error.ResetNeeded("call reset() first")
        return self._sim

    def close(self) -> None:
        """Stop the simulator's JVM (a later reset starts a new one)."""
        if self._sim is not None:
            self._sim.close()
            self._sim = None

    # -- episode -------------------------------------------------------------------------------

    def _choose(self, options: dict[str, Any]) -> Pair:
        options = reset_options(options, ("task", "variation", "index"))
        if "variation" in options and "task" not in options:
            raise ValueError("reset option 'variation' needs a 'task' (or give 'index', a "
                             "place in the split)")
        if "index" in options and "task" in options:
            raise ValueError("give reset option 'task' (with 'variation') or 'index', not both")
        if "task" in options:
            task = str(options["task"])
            if task not in self.task_names():
                raise ValueError(f"unknown ScienceWorld task {task!r}; tasks: {self.task_names()}")
            variation = int(options.get("variation", 0))
            limit = self.simulator.max_variations(task)
            if not 0 <= variation < limit:
                raise ValueError(f"task {task!r} has variations 0..{limit - 1}, got {variation}")
            return task, variation
        if "index" in options:
            index = int(options["index"])
            if not 0 <= index < len(self.pairs):
                raise ValueError(f"reset option 'index' must be in 0..{len(self.pairs) - 1} "
                                 f"(the split's pairs), got {index}")
            return self.pairs[index]
        return self.pairs[int(self.np_random.integers(len(self.pairs)))]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode: ``options={"task": ..., "variation": ...}`` or ``{"index": i}``
        (into :attr:`pairs`) pick one; otherwise it is drawn from the split with the env's RNG,
        so ``reset(seed=s)`` always gives the same pair."""
        super().reset(seed=seed)
        task, variation = self._choose(options or {})
        self._clear_episode()
        try:
            sim = self.simulator
            sim.load(task, variation, self.simplifications)
            look, score, completed = sim.step(FIRST_ACTION)
            description = sim.task_description()
        except SimulatorCrashedError:
            self.close()
            raise
        self.task_name, self.variation = task, variation
        self.score = round(score * 100)
        self.completed = completed
        self.moves = sim.moves()
        self.agent_location = location_in(look)
        observation = (f"{description}\n\n{look}" if self.reset_observation == "task_and_look"
                       else look)
        self._last_observation = observation
        info = self._info()
        info["task_description"] = description
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task_name is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        text = clean_action(action)
        self.steps += 1
        self.history.append(text)
        self._valid_cache = None
        self._goal_cache = None
        meta = _META_COMMANDS.get(text.strip().lower())
        if len(text) > self.max_action_chars:
            observation, completed, new_score = NO_MATCH, self.completed, self.score
        else:
            try:
                if meta is not None:
                    # upstream answers these in PythonInterface.step without a simulator tick
                    observation = meta(self)
                    completed, new_score = self.completed, self.score
                else:
                    observation, score, completed = self._live().step(text)
                    new_score = round(score * 100)
                    self.moves = self._live().moves()
            except SimulatorCrashedError:
                self.close()
                self.task_name = None
                raise
        self.last_action_parsed = observation not in (NO_MATCH, UNKNOWN_ACTION)
        reward = (new_score - self.score) / 100.0
        self.score, self.completed = new_score, completed
        location = location_in(observation)
        if location is not None:
            self.agent_location = location
        over_ticks = self.moves > RLVMR_TICK_LIMIT
        if self._published is None and (completed or new_score < 0 or over_ticks):
            # the step at which RLVMR's episode ends; its "won" is fixed here
            self._published = new_score > 0
        terminated = bool(completed or new_score < 0
                          or (self.protocol == "rlvmr" and over_ticks))
        self._last_observation = observation
        # The step cap is the TimeLimit gymnasium.make puts around this env, not this env.
        return observation, reward, terminated, False, self._info()

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "score": self.score,
            "task_name": self.task_name,
            "variation": self.variation,
            "level": self.level,
            "split": self.split,
            "success": self.success,
            "published_success": self.published_success,
            "failed": self.failed,
            "moves": self.moves,
            "action_parsed": self.last_action_parsed,
            "location": self.agent_location,
        }
        if self.include_valid_actions:
            info["valid_actions"] = self.valid_actions()
        return info

    @property
    def success(self) -> bool:
        """Completed with at least :attr:`success_score` (100 by default)."""
        return self.completed and self.score >= self.success_score

    @property
    def published_success(self) -> bool:
        """RLVMR's ``won``, the metric published ScienceWorld numbers use: the episode ended
        (completed, failed, or past :data:`RLVMR_TICK_LIMIT` simulator ticks) with a score
        above 0, judged at the step it ended. A policy that scores a few points and then
        waits meets it without doing the task; :attr:`success` does not."""
        return bool(self._published)

    @property
    def failed(self) -> bool:
        """The simulator declared the task failed (its score drops below zero)."""
        return self.score < 0

    # -- on demand -----------------------------------------------------------------------------

    def valid_actions(self) -> list[str]:
        """The simulator's valid actions in the current state (one call, cached per step)."""
        if self._valid_cache is None:
            self._valid_cache = self._live().valid_actions()
        return list(self._valid_cache)

    def goal_progress(self) -> tuple[int, int]:
        """``(done, total)`` sequential subgoals of the task (one call, cached per step)."""
        if self._goal_cache is None:
            self._goal_cache = parse_goal_progress(self._live().goal_progress())
        return self._goal_cache

    def gold_path(self) -> list[str]:
        """The simulator's gold action sequence for the current (task, variation).

        Generating it reloads the task, so the actions taken so far are replayed to restore the
        episode's state; the result is cached per (task, variation, simplifications).
        """
        sim = self._live()
        assert self.task_name is not None and self.variation is not None
        key = (self.task_name, self.variation, self.simplifications)
        if key not in self._gold:
            sim.load(self.task_name, self.variation, self.simplifications, gold=True)
            self._gold[key] = sim.gold_actions()
            for action in [FIRST_ACTION, *self.history]:
                if (len(action) <= self.max_action_chars
                        and action.strip().lower() not in _META_COMMANDS):
                    sim.step(action)
            self._valid_cache = None
            self._goal_cache = None
        return list(self._gold[key])

    def possible_actions(self) -> list[str]:
        """The action templates of the current task (what ``help`` lists)."""
        return self._live().possible_actions()

    def possible_objects(self) -> list[str]:
        """The object referents visible now (what ``objects`` lists)."""
        return self._live().possible_objects()

    def render(self) -> str | None:
        return self._last_observation if self.render_mode == "ansi" else None


def _help(env: ScienceWorldEnv) -> str:
    return "Possible actions: \n\t" + "\n\t".join(env.possible_actions())


def _objects(env: ScienceWorldEnv) -> str:
    return "Possible object references: \n\t" + "\n\t".join(env.possible_objects())


def _task(env: ScienceWorldEnv) -> str:
    return "Task description:\n" + env._live().task_description()


_META_COMMANDS = {"help": _help, "objects": _objects, "task": _task}
"""Inputs upstream's ``PythonInterface.step`` answers itself, with these texts, before the
agent interface (which would not match them) sees them."""


__all__ = [
    "FIRST_ACTION",
    "MAX_OBSERVATION_CHARS",
    "OBJECT_ORDERS",
    "PROTOCOLS",
    "RESET_OBSERVATIONS",
    "RLVMR_TICK_LIMIT",
    "ScienceWorldEnv",
]
