"""Register every env id named in the env cards under Gymnasium's ``derl/`` namespace.

Each id is an ordinary Gymnasium registration: a string entry point, the card's keyword
arguments, ``max_episode_steps`` from the card's ``max_steps`` (multi-turn families), and the
family's observers as a :class:`~gymnasium.envs.registration.WrapperSpec` in
``additional_wrappers``. ``gymnasium.make`` applies those after its ``TimeLimit``, so an env is
``CardObservers(TimeLimit(bare env))``: the observers see the cap (``step_fraction``), and every
rollout, evaluation and training run is cut by the one ``TimeLimit``. Gymnasium's own argument
sets the cap::

    >>> import gymnasium as gym
    >>> import derl_bench
    >>> gym.spec("derl/ALFWorld-v0").max_episode_steps
    30
    >>> gym.spec("derl/ALFWorld-v0").entry_point
    'derl_bench.registration:make_bare'

    env = gym.make("derl/ALFWorld-v0", max_episode_steps=5)
    # CardObservers(TimeLimit(ALFWorldEnv, 5))

Pass ``observers=[...]`` to replace the family's default observers, or
``extra_observers=[...]`` to add to them. Gymnasium hands ``make``'s keyword arguments to the
entry point alone, never to the additional wrappers, so :func:`make_bare` takes these two and
:class:`CardObservers` reads them back from the env's spec, which records every argument of
``make``; that is the one place derl-bench steps outside Gymnasium's registration.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec
from gymnasium.utils import RecordConstructorArgs

from derl_bench.family import family_specs, on_reload, resolve
from derl_bench.observers.base import Observer, ObserveWrapper


def make_bare(
    env_class: str,
    observers: Iterable[Observer] | None = None,
    extra_observers: Iterable[Observer] | None = None,
    **kwargs: Any,
) -> gym.Env:
    """Gymnasium's entry point of every card id: the bare env class ``env_class`` (a dotted
    ``module:Class`` path) built with the remaining keyword arguments. ``observers`` and
    ``extra_observers`` are for :class:`CardObservers`, which finds them in the env's spec."""
    if "max_steps" in kwargs:
        raise TypeError(
            f"max_steps={kwargs['max_steps']!r} is not an env argument: the step cap is "
            f"gymnasium.make's max_episode_steps={kwargs['max_steps']!r}")
    return resolve(env_class)(**kwargs)


class CardObservers(ObserveWrapper, RecordConstructorArgs):
    """The family's observers, applied by ``gymnasium.make`` after its ``TimeLimit``.

    ``observers`` is the card's dotted path to a callable that takes the bare env and returns
    the default observers. ``make(id, observers=[...])`` replaces them and
    ``make(id, extra_observers=[...])`` adds to them.
    """

    def __init__(self, env: gym.Env, observers: str) -> None:
        RecordConstructorArgs.__init__(self, observers=observers)
        made = env.unwrapped.spec.kwargs if env.unwrapped.spec is not None else {}
        chosen = made.get("observers")
        if chosen is None:
            chosen = resolve(observers)(env.unwrapped)
        ObserveWrapper.__init__(self, env, [*chosen, *(made.get("extra_observers") or ())])


_REGISTERED: set[str] = set()
"""The ids this module registered, so that a reload can drop those whose card went away."""


@on_reload
def register_envs() -> None:
    """Register all card ids with Gymnasium (idempotent); on a reload, the ids registered
    before are registered again from the cards found now (an id whose card went away is
    dropped)."""
    for env_id in _REGISTERED:
        gym.registry.pop(env_id, None)
    _REGISTERED.clear()
    for spec in family_specs().values():
        for env_id, entry in spec.ids.items():
            if env_id in gym.registry:
                continue
            _REGISTERED.add(env_id)
            gym.register(
                id=env_id,
                entry_point="derl_bench.registration:make_bare",
                max_episode_steps=spec.max_steps if spec.multi_turn else None,
                kwargs={"env_class": entry.entry_point, **entry.kwargs},
                additional_wrappers=(WrapperSpec(
                    name="CardObservers",
                    entry_point="derl_bench.registration:CardObservers",
                    kwargs={"observers": entry.observers}),),
                disable_env_checker=False,
            )
