"""One typed description per env family, built from its card: :class:`FamilySpec`.

Every stage asks :func:`family_spec` what a family is, instead of parsing env ids or keeping
its own table of families::

    >>> spec = family_spec("derl_bench:derl/ALFWorld-v0")
    >>> spec.name, spec.multi_turn, spec.success_primitive, spec.max_steps
    ('alfworld', True, 'success', 30)
    >>> family_spec("derl/GSM8K-v0").multi_turn
    False
    >>> family_spec("derl/GSM8K-v0").env("derl/GSM8K-v0").benchmark
    'gsm8k'

The spec holds only what the card declares, in plain data, because this module sits below
every stage that uses it (right after :mod:`derl_bench.cards`). What a family needs from a later
stage is looked up there by the spec's ``name``: the prompt builder and action parser in
:mod:`derl_bench.policies.prompts` (``ENV_INTRO``) and
:mod:`derl_bench.observers.think_action`, the evaluation rules in
:mod:`derl_bench.evaluation.families` (``adapter_for``). Storing those objects in the spec would
make this module import those stages, and the spec could then not be imported by the stages
before them. The entry point and observers stay dotted-path strings for the same reason.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from derl_bench.cards import CardError, card_families, load_card

EPISODE_KINDS = ("single-step", "multi-turn")
DOMAINS = ("math", "agent")

Interval = tuple[float, float]


class UnknownFamilyError(ValueError):
    """A name that is neither a card family nor one of their env ids."""


def resolve(path: str) -> Any:
    """The object a card's dotted ``module:attr`` path names (its module imported on first use).

    >>> resolve("derl_bench.family:resolve") is resolve
    True
    """
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class EnvIdSpec:
    """One env id a card defines: the bare env class, its observers, its default kwargs."""

    env_id: str
    entry_point: str
    observers: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def benchmark(self) -> str:
        """The leaderboard a record of this id belongs to: ``derl/ALFWorld-v0`` -> ``alfworld``."""
        return self.env_id.split("/", 1)[-1].rsplit("-v", 1)[0].lower()


@dataclass(frozen=True)
class FamilySpec:
    """What one env family is, as its card (``envs/<name>.md``) declares it.

    ``domain`` is the historical Meta-Reward domain the family trains in (``"math"`` or
    ``"agent"``); ``primitives`` maps each primitive name to its declared range, in the order the
    observers emit them, and ``aliases`` the ``g1..g4`` names. ``max_steps`` is the default step
    cap of an episode (1 for single-step families). The mappings are plain dicts so that a spec
    pickles into worker processes; treat them as read-only.
    """

    name: str
    card_version: int
    ids: Mapping[str, EnvIdSpec]
    multi_turn: bool
    domain: str
    primitives: Mapping[str, Interval]
    aliases: Mapping[str, str]
    success_primitive: str
    max_steps: int

    @property
    def env_ids(self) -> tuple[str, ...]:
        return tuple(self.ids)

    def env(self, env_id: str) -> EnvIdSpec:
        """The card entry of ``env_id`` (a ``derl_bench:`` prefix is allowed)."""
        bare = env_id.rsplit(":", 1)[-1]
        if bare not in self.ids:
            raise UnknownFamilyError(f"{env_id!r} is not an env id of the {self.name!r} card")
        return self.ids[bare]

    @classmethod
    def from_card(cls, card: Mapping[str, Any]) -> FamilySpec:
        """Build the spec from a card's parsed front matter, checking what it declares."""
        name = str(card.get("family"))

        def need(key: str) -> Any:
            if key not in card:
                raise CardError(f"card {name!r} has no {key!r}")
            return card[key]

        episodes = need("episodes")
        if episodes not in EPISODE_KINDS:
            raise CardError(f"card {name!r}: episodes is {episodes!r}, not one of {EPISODE_KINDS}")
        domain = need("domain")
        if domain not in DOMAINS:
            raise CardError(f"card {name!r}: domain is {domain!r}, not one of {DOMAINS}")
        declared = card.get("primitives") or {}
        if isinstance(declared, Mapping):
            ranges = {str(n): (float(lo), float(hi)) for n, (lo, hi) in declared.items()}
        else:  # a plain list of names declares no ranges
            ranges = {str(n): (-math.inf, math.inf) for n in declared}
        success = str(need("success"))
        if success not in ranges:
            raise CardError(f"card {name!r}: success primitive {success!r} is not declared")
        multi_turn = episodes == "multi-turn"
        ids = {
            str(env_id): EnvIdSpec(str(env_id), str(entry["entry_point"]), str(entry["observers"]),
                                   dict(entry.get("kwargs") or {}))
            for env_id, entry in (card.get("ids") or {}).items()
        }
        return cls(
            name=name, card_version=int(need("card_version")), ids=ids,
            multi_turn=multi_turn, domain=str(domain), primitives=ranges,
            aliases={str(k): str(v) for k, v in (card.get("aliases") or {}).items()},
            success_primitive=success,
            max_steps=int(need("max_steps")) if multi_turn else 1,
        )


@functools.cache
def family_specs() -> dict[str, FamilySpec]:
    """Every card family's spec, by family name."""
    return {family: FamilySpec.from_card(load_card(family)) for family in card_families()}


@functools.cache
def _id_index() -> dict[str, FamilySpec]:
    return {env_id: spec for spec in family_specs().values() for env_id in spec.ids}


@functools.cache
def _benchmark_index() -> dict[str, FamilySpec]:
    return {e.benchmark: spec for spec in family_specs().values() for e in spec.ids.values()}


def family_spec(name: str | FamilySpec) -> FamilySpec:
    """The spec of a card family, given its name (``"alfworld"``), one of its env ids or the
    leaderboard name of one (``"gsm8k"``).

    An env id may carry a ``derl_bench:`` prefix, and may be an id registered with Gymnasium
    as a variant of a card's id (reusing its entry point and ``env_class``) or of a card's
    bare env class.

    >>> family_spec("derl/MATH-v0").name
    'math'
    """
    if isinstance(name, FamilySpec):
        return name
    specs = family_specs()
    if name in specs:
        return specs[name]
    if name in _benchmark_index():
        return _benchmark_index()[name]
    bare = name.rsplit(":", 1)[-1]
    index = _id_index()
    if bare in index:
        return index[bare]
    variant = _registered_variant(bare)
    if variant is not None:
        return variant
    raise UnknownFamilyError(
        f"{name!r} is not a derl-bench env id or family (families: {', '.join(specs)})")


def _registered_variant(env_id: str) -> FamilySpec | None:
    import gymnasium as gym

    registered = gym.registry.get(env_id)
    if registered is None:
        return None
    # a card id registers its bare class as the ``env_class`` argument of a shared entry
    # point; a user's variant may reuse that registration or name the bare class directly
    entry = registered.kwargs.get("env_class", registered.entry_point)
    for spec in family_specs().values():
        if any(e.entry_point == entry for e in spec.ids.values()):
            return spec
    return None
