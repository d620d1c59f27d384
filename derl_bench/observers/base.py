"""Primitive observers: small pluggable classes that turn env steps into named signals.

Every derl env step carries ``info["primitives"]``, a flat ``dict[str, float]``. The values come
from observers, each a small class that sees the bare env and the step's transition and returns
some named floats. Observers never change observations, rewards or termination.

Writing one takes a few lines::

    >>> class ShortAnswer(Observer):
    ...     names = ("short_answer",)
    ...     def observe(self, env, t):
    ...         return {"short_answer": float(len(t.action) < 200)}

and :class:`ObserveWrapper` adds it to any env (``gymnasium.make`` of a ``derl/`` id already
wraps the family's default observers)::

    import gymnasium as gym
    env = ObserveWrapper(gym.make("derl_bench:derl/GSM8K-v0"), [ShortAnswer()])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, SupportsFloat, TypeVar

import gymnasium as gym


@dataclass(frozen=True)
class Transition:
    """One env step as observers see it.

    ``step`` counts from 1 for the first action of an episode; ``max_steps`` is the env's step
    cap (1 for single-step envs). ``info`` is the bare env's info for this step.
    """

    action: str
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: Mapping[str, Any]
    step: int
    max_steps: int
    prev_observation: str = ""
    extras: dict[str, Any] = field(default_factory=dict)


EnvT = TypeVar("EnvT")


class Observer(Generic[EnvT]):
    """Base class of primitive observers.

    Subclasses set ``names`` (the primitives they emit, in order) and implement
    :meth:`observe`. :meth:`reset` is called on every env reset, for observers that keep
    per-episode state (visited locations, past actions). A family's observers name the bare
    env they read, ``Observer[ALFWorldEnv]``; a plain ``Observer`` reads any env.
    """

    names: ClassVar[tuple[str, ...]] = ()

    def reset(self, env: EnvT, observation: str, info: Mapping[str, Any]) -> None:
        """Start a new episode. The default keeps no state."""

    def observe(self, env: EnvT, t: Transition) -> Mapping[str, float]:
        """Return a value for every name in ``names``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.names)})"


class PrimitiveError(ValueError):
    """An observer emitted a name it did not declare, or a value that is not a finite float."""


def _checked(observer: Observer, values: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in values.items():
        if name not in observer.names:
            raise PrimitiveError(f"{observer!r} emitted undeclared primitive {name!r}")
        number = float(value)
        if not math.isfinite(number):
            raise PrimitiveError(f"{observer!r} emitted non-finite {name}={value!r}")
        out[name] = number
    missing = set(observer.names) - out.keys()
    if missing:
        raise PrimitiveError(f"{observer!r} did not emit {sorted(missing)}")
    return out


def step_cap(env: gym.Env) -> int:
    """The episode's step cap: the ``TimeLimit`` inside ``env``, else the env's own
    ``max_steps`` (1 for a single-step env), else 1."""
    inner: Any = env
    while isinstance(inner, gym.Wrapper):
        if isinstance(inner, gym.wrappers.TimeLimit):
            return int(inner._max_episode_steps)
        inner = inner.env
    return int(getattr(inner, "max_steps", 1) or 1)


class ObserveWrapper(gym.Wrapper):
    """Adds observers' primitives to ``info["primitives"]`` on reset and on every step.

    On reset every primitive is 0.0, so the keys of ``info["primitives"]`` are the same on
    every call of an episode. Primitives already in ``info`` (from an inner wrapper) are kept;
    a name emitted twice is an error, so two observers can never silently overwrite each other.
    """

    def __init__(self, env: gym.Env, observers: Iterable[Observer]) -> None:
        super().__init__(env)
        self.observers: list[Observer] = list(observers)
        seen: set[str] = set()
        for obs in self.observers:
            clash = seen.intersection(obs.names)
            if clash:
                raise PrimitiveError(f"primitive names emitted twice: {sorted(clash)}")
            seen.update(obs.names)
        self.primitive_names: tuple[str, ...] = tuple(n for o in self.observers for n in o.names)
        self.max_steps = step_cap(env)
        self._step = 0
        self._last_obs = ""

    def _merge(self, info: dict[str, Any], values: Mapping[str, float]) -> dict[str, Any]:
        info = dict(info)
        prims = dict(info.get("primitives", {}))
        clash = prims.keys() & values.keys()
        if clash:
            raise PrimitiveError(f"primitive names emitted twice: {sorted(clash)}")
        prims.update(values)
        info["primitives"] = prims
        return info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._step = 0
        self._last_obs = obs if isinstance(obs, str) else ""
        for observer in self.observers:
            observer.reset(self.env.unwrapped, obs, info)
        return obs, self._merge(info, dict.fromkeys(self.primitive_names, 0.0))

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._step += 1
        t = Transition(
            action=action if isinstance(action, str) else str(action),
            observation=obs if isinstance(obs, str) else str(obs),
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=info,
            step=self._step,
            max_steps=self.max_steps,
            prev_observation=self._last_obs,
        )
        self._last_obs = t.observation
        values: dict[str, float] = {}
        for observer in self.observers:
            values.update(_checked(observer, observer.observe(self.env.unwrapped, t)))
        return obs, reward, terminated, truncated, self._merge(info, values)
