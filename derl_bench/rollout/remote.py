"""Envs in Ray actors: a multi-turn group's episodes stepped in parallel (the verl-agent layout).

A multi-turn rollout generates one action per live env in a batch, then steps every env. With
local envs the steps run one after another; :class:`RemoteEnv` keeps its env (wrappers and
observers included) in a Ray actor, so :func:`step_all` sends a turn's actions to all actors
at once and waits for all of them. The trainer builds its envs this way with
``env_actors: true`` (see ``docs/distributed.md`` for when that pays off).

    env = RemoteEnv(lambda: gymnasium.make("derl/ALFWorld-v0"))   # needs the [distributed] extra
    obs, info = env.reset(seed=0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym


class _EnvActor:
    """Holds one env inside a Ray actor."""

    def __init__(self, make: Callable[[], gym.Env]) -> None:
        self.env = make()

    def reset(self, seed: int | None, options: dict | None) -> tuple[Any, dict]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()


class RemoteEnv(gym.Env):
    """An env that lives in a Ray actor; ``reset``/``step`` are forwarded to it.

    Args:
        make: builds the env inside the actor (pickled with cloudpickle, so a closure works).
        num_cpus: CPUs Ray reserves for the actor; 0 (the default) because an env actor is
            idle while the policy generates, and reserving a core each would leave none for
            inner runs.
    """

    def __init__(self, make: Callable[[], gym.Env], num_cpus: float = 0.0) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(log_to_driver=False, configure_logging=False)
        self._ray = ray
        self._actor: Any = ray.remote(_EnvActor).options(num_cpus=num_cpus).remote(make)
        self._pending: Any = None

    def reset(self, *, seed: int | None = None, options: dict | None = None,
              ) -> tuple[Any, dict]:
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(self, *, seed: int | None = None, options: dict | None = None) -> None:
        """Start a reset; :meth:`reset_wait` returns its result."""
        self._pending = self._actor.reset.remote(seed, options)

    def reset_wait(self) -> tuple[Any, dict]:
        return self._wait()

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        self.step_async(action)
        return self.step_wait()

    def step_async(self, action: Any) -> None:
        """Send ``action``; :meth:`step_wait` returns its result."""
        self._pending = self._actor.step.remote(action)

    def step_wait(self) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        return self._wait()

    def _wait(self) -> Any:
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("a *_wait() call without its *_async() call")
        return self._ray.get(pending)

    def close(self) -> None:
        try:
            self._ray.get(self._actor.close.remote())
        finally:
            self._ray.kill(self._actor)


def step_all(envs: Sequence[gym.Env], actions: Sequence[Any],
             ) -> list[tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]]:
    """``env.step(action)`` for each pair; envs that step asynchronously (:class:`RemoteEnv`)
    all run at once."""
    # duck-typed: any env with step_async/step_wait is stepped asynchronously
    remote: list[Any] = [env if hasattr(env, "step_async") else None for env in envs]
    for env, action in zip(remote, actions, strict=True):
        if env is not None:
            env.step_async(action)
    return [r.step_wait() if r is not None else env.step(action)
            for env, r, action in zip(envs, remote, actions, strict=True)]


def reset_all(envs: Sequence[gym.Env], seeds: Sequence[int]) -> list[tuple[Any, dict]]:
    """``env.reset(seed=seed)`` for each pair, the remote ones all at once."""
    remote: list[Any] = [env if hasattr(env, "reset_async") else None for env in envs]
    for env, seed in zip(remote, seeds, strict=True):
        if env is not None:
            env.reset_async(seed=seed)
    return [r.reset_wait() if r is not None else env.reset(seed=seed)
            for env, r, seed in zip(envs, remote, seeds, strict=True)]


__all__ = ["RemoteEnv", "reset_all", "step_all"]
