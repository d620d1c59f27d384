"""Item identity: which problems, games or (task, variation) pairs a split of an env holds,
and which split is each level's eval set, read from the env cards (and, for the math datasets,
the data), never from an episode.

An item id is what names one episode's start: a math problem id (``test/17``,
``test/precalculus/807.json``), a generated arithmetic problem id, an ALFWorld game
(``valid_seen/<task folder>/<trial>``) or a ScienceWorld ``task<TAB>variation`` line. Ids of
different splits of one env are comparable, so two splits overlap exactly when they share ids.
Each function takes the env's resolved :class:`~derl_bench.family.Family` and the env id::

    >>> from derl_bench.family import resolve_family
    >>> eval_splits(resolve_family("derl/GSM8K-v0"), "derl/GSM8K-v0")
    {'L0': {'split': 'test'}}
    >>> alfworld = resolve_family("derl/ALFWorld-v0")
    >>> sorted(eval_splits(alfworld, "derl/ALFWorld-v0")["L2"].items())
    [('level', 'L2'), ('split', 'eval')]
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from derl_bench.cards import read_manifest
from derl_bench.family import Family, FamilySpec, UnknownFamilyError, resolve

AGENT_EVAL_SPLIT = "eval"
"""The agent envs' ``split`` of a level's eval set (manifest ``<level>-eval``)."""


def _card_kwargs(spec: FamilySpec, env_id: str) -> dict[str, Any]:
    try:
        return dict(spec.env(env_id).kwargs)
    except UnknownFamilyError:  # a registered variant of a card id: the card's first id
        return dict(next(iter(spec.ids.values())).kwargs)


def _env_class(spec: FamilySpec, env_id: str) -> Any:
    try:
        entry = spec.env(env_id)
    except UnknownFamilyError:
        entry = next(iter(spec.ids.values()))
    return resolve(entry.entry_point)


def eval_splits(family: Family, env_id: str, **env_kwargs: Any) -> dict[str, dict[str, str]]:
    """Each level's eval set as env kwargs (``split``, and ``level`` for agents), from the card:
    a single-step card's ``levels`` (level -> split), and ``split="eval"`` at every level of
    a multi-turn card. An env class that defines ``eval_sets(**kwargs)`` says it itself, given
    the env's kwargs (``env_kwargs`` over the card's): the math datasets' eval sets depend on
    the dataset, reasoning-gym's on the task."""
    spec = family.spec
    env_cls = _env_class(spec, env_id)
    if hasattr(env_cls, "eval_sets"):
        return env_cls.eval_sets(**{**_card_kwargs(spec, env_id), **env_kwargs})
    if spec.multi_turn:
        return {str(level): {"level": str(level), "split": AGENT_EVAL_SPLIT}
                for level in family.card["levels"]}
    levels = family.card["levels"]
    return {str(level): {"split": str(split)} for level, split in levels.items()}


def split_items(family: Family, env_id: str, split: str, level: str | None = None,
                **env_kwargs: Any) -> list[str]:
    """The item ids of ``split`` (at ``level``, for the agents: default the card's), in the
    order the env plays them by index; an env class that defines ``item_ids(**kwargs)`` lists
    them itself from the env's kwargs (``env_kwargs`` over the card's). Raises ``ValueError``
    for a split the env lacks."""
    spec = family.spec
    env_cls = _env_class(spec, env_id)
    if hasattr(env_cls, "item_ids"):
        kwargs = {**_card_kwargs(spec, env_id), **env_kwargs, "split": split}
        if level is not None:
            kwargs["level"] = level
        return list(env_cls.item_ids(**kwargs))
    if spec.multi_turn:
        level = level or str(_card_kwargs(spec, env_id).get("level", "L0"))
        manifests = family.card.get("manifests") or {}
        name = f"{level}-{split}"
        if name not in manifests:
            raise ValueError(f"{env_id} has no split {split!r} at level {level!r}")
        return read_manifest(spec.name, name)
    raise ValueError(f"no item ids are defined for the {spec.name!r} family")


def data_files(family: Family, env_id: str, **env_kwargs: Any) -> list[str]:
    """What an env made with ``env_kwargs`` (over the card's) reads from the data root: paths
    relative to it, as the data catalogue names them (``gsm8k/train.jsonl``), for a caller to
    check against the catalogue's checksums before using them. An env class that defines
    ``data_files(**kwargs)`` says it itself; any other reads nothing the catalogue checksums
    (it generates its items, or its files have no catalogue checksum)."""
    spec = family.spec
    env_cls = _env_class(spec, env_id)
    if hasattr(env_cls, "data_files"):
        return list(env_cls.data_files(**{**_card_kwargs(spec, env_id), **env_kwargs}))
    return []


def env_settings_problem(family: Family | None, env_id: str, level: str | None,
                         env_kwargs: dict[str, Any]) -> str | None:
    """Why a config's env settings cannot make its env, else None: ``env_kwargs`` that set
    ``split`` or ``level``, which the config has fields of its own for (the env would take the
    kwarg over the field, so a run would train on one split while the config it records names
    another), or a ``level`` the env is not made at (:func:`level_problems`).

        >>> print(env_settings_problem(None, "derl/GSM8K-v0", None, {"split": "test"}))
        env_kwargs may not set split: give it as the config's own split field (split: test)
    """
    for key in ("split", "level"):
        if key in env_kwargs:
            return (f"env_kwargs may not set {key}: give it as the config's own {key} field "
                    f"({key}: {env_kwargs[key]})")
    problem = None if level is None else level_problems(family, env_id, [level], made_at=True,
                                                         **env_kwargs)
    return problem and f"level: {problem}"


def level_problems(family: Family | None, env_id: str, levels: Iterable[str], *,
                   made_at: bool = False, **env_kwargs: Any) -> str | None:
    """Why ``levels`` are not all levels of ``env_id``, else None. The env's levels are the
    ones its card lists (:func:`eval_splits`); ``made_at``: the levels are what the env is
    made at (a recipe's ``level``), so the env must also take a ``level`` at all. An env id
    that has no card (``family`` None) is not checked.

        >>> from derl_bench.family import resolve_family
        >>> alfworld = resolve_family("derl/ALFWorld-v0")
        >>> print(level_problems(alfworld, "derl/ALFWorld-v0", ["L0", "L7"]))
        derl/ALFWorld-v0 has no level 'L7'; its card's levels are L0, L1, L2
        >>> gsm8k = resolve_family("derl/GSM8K-v0")
        >>> print(level_problems(gsm8k, "derl/GSM8K-v0", ["L0"], made_at=True))
        derl/GSM8K-v0 is not made at a level: its one level, L0, names its eval set
    """
    if family is None:
        return None
    known = list(eval_splits(family, env_id, **env_kwargs))
    if made_at and "level" not in inspect.signature(_env_class(family.spec, env_id)).parameters:
        which = (f"its levels, {', '.join(known)}, name its eval sets" if len(known) > 1 else
                 f"its one level, {known[0]}, names its eval set" if known else
                 "it has no levels")
        return f"{env_id} is not made at a level: {which}"
    unknown = [level for level in levels if level not in known]
    if unknown:
        return (f"{env_id} has no level {', '.join(repr(u) for u in unknown)}; its card's "
                f"levels are {', '.join(known)}")
    return None
