"""Which primitives a Meta-Reward may read: the env's, as its card declares them.

Each env family's card (``envs/<family>.md``) lists its primitives with their ranges under
``primitives:`` and its ``g1..g4`` aliases under ``aliases:``; tests check that the family's
observers emit exactly those names. A Meta-Reward is compiled against one
:class:`PrimitiveSet`, named by an env id (``"derl/ALFWorld-v0"``), a family (``"alfworld"``)
or one of the two historical domains, each the families whose cards say ``joins_domain: true``
merged: ``"math"`` (the math card) and ``"agent"`` (ALFWorld and ScienceWorld, so an agent
reward may read primitives only one of them emits)::

    >>> "score" in primitive_set("derl/ScienceWorld-v0").names
    True
    >>> "score" in primitive_set("derl/ALFWorld-v0").names
    False
    >>> primitive_set("math").aliases["g1"]
    'outcome'

A stage that has resolved the env's family already asks :func:`env_primitives`, which looks
nothing up::

    >>> from derl_bench.family import resolve_family
    >>> family = resolve_family("derl/ALFWorld-v0")
    >>> env_primitives("derl/ALFWorld-v0", family) == primitive_set("derl/ALFWorld-v0")
    True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from derl_bench.family import DOMAINS as CARD_DOMAINS
from derl_bench.family import (
    Family,
    FamilySpec,
    family_specs,
    find_family,
    on_reload,
    resolve_family,
)
from derl_bench.reward.errors import UnknownDomainError
from derl_bench.reward.functions import Interval

UNBOUNDED: Interval = (-math.inf, math.inf)



@functools.cache
def domain_families() -> dict[str, tuple[str, ...]]:
    """The historical domains and the families each merges: the cards of that ``domain`` that
    say ``joins_domain: true`` (a family that trains in a domain without joining it keeps its
    own primitives and aliases, such as reasoning-gym's ``g3``).

    >>> domain_families()["agent"]
    ('alfworld', 'scienceworld')
    """
    return {domain: tuple(s.name for s in family_specs().values()
                          if s.domain == domain and s.joins_domain)
            for domain in CARD_DOMAINS}


@dataclass(frozen=True)
class PrimitiveSet:
    """The primitives (name -> declared range, in order) and aliases an expression compiles
    against; ``name`` says where they came from (an env id, a family or a domain)."""

    name: str
    ranges: Mapping[str, Interval]
    aliases: Mapping[str, str]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.ranges)

    def range(self, name: str) -> Interval:
        """The declared range of ``name``; unbounded for a name the set does not declare."""
        return self.ranges.get(name, UNBOUNDED)

    def with_primitives(self, primitives: Iterable[str] | Mapping[str, Interval]) -> PrimitiveSet:
        """The same aliases over other primitive names; a mapping also declares their ranges
        (names given without one keep this set's range, if any)."""
        ranges = (
            {str(n): (float(lo), float(hi)) for n, (lo, hi) in primitives.items()}
            if isinstance(primitives, Mapping)
            else {n: self.range(n) for n in dict.fromkeys(primitives)}
        )
        return PrimitiveSet(self.name, ranges, self.aliases)


def family_primitives(family: str | FamilySpec | Family) -> PrimitiveSet:
    """The primitive set a family's card declares: ``family`` as the caller resolved it (a
    :class:`~derl_bench.family.Family` or its :class:`~derl_bench.family.FamilySpec`), or
    named (a family, one of its env ids or boards; looked up once per process)."""
    if isinstance(family, str):
        return _named_family_primitives(family)
    spec = family.spec if isinstance(family, Family) else family
    return PrimitiveSet(spec.name, dict(spec.primitives), dict(spec.aliases))


@functools.cache
def _named_family_primitives(name: str) -> PrimitiveSet:
    spec = family_specs().get(name) or resolve_family(name).spec
    return family_primitives(spec)


@functools.cache
def _domain_primitives(domain: str) -> PrimitiveSet:
    ranges: dict[str, Interval] = {}
    aliases: dict[str, str] = {}
    for family in domain_families()[domain]:
        part = family_primitives(family)
        for name, (lo, hi) in part.ranges.items():
            old = ranges.get(name, (lo, hi))
            ranges[name] = (min(lo, old[0]), max(hi, old[1]))
        for alias, text in part.aliases.items():
            if aliases.setdefault(alias, text) != text:
                raise UnknownDomainError(f"{domain!r}: its families define alias {alias} twice")
    return PrimitiveSet(domain, ranges, aliases)


def primitive_set(source: str | PrimitiveSet) -> PrimitiveSet:
    """The primitives of an env id, a card family or a historical domain (see the module),
    found by name (:class:`UnknownDomainError` for an env id no card defines); a
    :class:`PrimitiveSet` as it is. Where the env's family is resolved, ask
    :func:`env_primitives`."""
    if isinstance(source, PrimitiveSet):
        return source
    return _named_set(source)


def env_primitives(env_id: str, family: FamilySpec | Family) -> PrimitiveSet:
    """The primitives of ``env_id``, as its ``family`` (resolved by the caller) declares them,
    named by the env id: a reward compiled against them names that id as its domain."""
    declared = family_primitives(family)
    return PrimitiveSet(env_id, declared.ranges, declared.aliases)


@functools.cache
def _named_set(source: str) -> PrimitiveSet:
    if source in domain_families():
        return _domain_primitives(source)
    if source in family_specs():
        return family_primitives(source)
    if "/" in source:
        family = find_family(source)
        if family is None:
            raise UnknownDomainError(f"{source!r} is not a derl-bench env id")
        return env_primitives(source, family)
    raise UnknownDomainError(
        f"{source!r}; give an env id, a family ({', '.join(family_specs())}) or a domain "
        f"({', '.join(domain_families())})"
    )


def known_primitives(source: str) -> tuple[str, ...]:
    """The primitive names of an env id, family or domain, in card order.

    >>> known_primitives("math")[:2]
    ('outcome', 'format_boxed')
    """
    return primitive_set(source).names


DOMAINS: tuple[str, ...] = CARD_DOMAINS
PRIMITIVE_RANGES: Mapping[str, Mapping[str, Interval]] = {
    d: primitive_set(d).ranges for d in DOMAINS
}
"""The historical domains' primitives and ranges (views of the cards)."""
ALIASES: Mapping[str, Mapping[str, str]] = {d: primitive_set(d).aliases for d in DOMAINS}
"""The historical domains' ``g1..g4`` aliases (views of the cards)."""


@on_reload
def _forget() -> None:
    for cache in (domain_families, _named_family_primitives, _domain_primitives, _named_set):
        cache.cache_clear()
