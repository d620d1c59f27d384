"""Register every env id named in the env cards under Gymnasium's ``derl/`` namespace.

A card's ``ids`` entry names the bare env class (``entry_point``), the family's default
observers (``observers``, a callable returning a list) and default keyword arguments.
``gymnasium.make(id, **kwargs)`` builds the bare env with the card's kwargs updated by the
caller's, then wraps it in :class:`~derl_bench.observers.ObserveWrapper`. Pass
``observers=[...]`` to replace the defaults, or ``extra_observers=[...]`` to add to them.

A multi-turn env's step cap is ``max_steps`` (the card's, or the caller's): Gymnasium's
``TimeLimit`` between the bare env and the observers, the one place episodes are cut, so the
observers see the cap (``step_fraction``) and every rollout, evaluation and training run is
cut by the same wrapper::

    env = gymnasium.make("derl/ALFWorld-v0", max_steps=5)   # ObserveWrapper(TimeLimit(ALFWorldEnv, 5))
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import gymnasium as gym


def _resolve(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def make_env(
    env_id: str,
    observers: list[Any] | None = None,
    extra_observers: list[Any] | None = None,
    **kwargs: Any,
) -> gym.Env:
    """Build ``env_id`` from its card: the bare env wrapped with its observers."""
    from derl_bench.family import UnknownFamilyError, family_spec
    from derl_bench.observers.base import ObserveWrapper

    try:
        entry = family_spec(env_id).env(env_id)
    except UnknownFamilyError:
        raise gym.error.UnregisteredEnv(f"{env_id!r} is not a derl-bench env") from None
    spec = family_spec(env_id)
    env_cls = _resolve(entry.entry_point)
    values = {**entry.kwargs, **kwargs}
    cap = int(values.pop("max_steps", spec.max_steps))
    bare = env_cls(**values)
    if observers is None:
        observers = _resolve(entry.observers)(bare)
    if not spec.multi_turn:
        return ObserveWrapper(bare, [*observers, *(extra_observers or [])])
    if cap < 1:
        raise ValueError(f"max_steps must be at least 1, got {cap}")
    return ObserveWrapper(gym.wrappers.TimeLimit(bare, cap), [*observers, *(extra_observers or [])])


def register_envs() -> None:
    """Register all card ids with Gymnasium (idempotent)."""
    from derl_bench.family import family_specs

    for spec in family_specs().values():
        for env_id in spec.env_ids:
            if env_id not in gym.registry:
                gym.register(id=env_id, entry_point=functools.partial(make_env, env_id),
                             disable_env_checker=False)
