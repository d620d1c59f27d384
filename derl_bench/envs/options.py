"""The ``options`` of an env's ``reset``, checked the same way by every env.

A key an env does not read would otherwise be dropped without a word, and the episode played
would be one drawn at random instead of the one asked for::

    >>> reset_options({"index": 3}, ("index",))
    {'index': 3}
    >>> try:
    ...     reset_options({"level": "L1"}, ("index",))
    ... except ValueError as exc:
    ...     print(exc)
    unknown reset options ['level']; the only option is 'index'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def reset_options(options: Mapping[str, Any] | None, allowed: Sequence[str]) -> dict[str, Any]:
    """A copy of ``options`` (``{}`` for None), or ``ValueError`` naming every key not in
    ``allowed`` and listing the ones that are."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"reset options must be a dict, not {type(options).__name__}")
    unknown = sorted(map(str, set(options) - set(allowed)))
    if unknown:
        names = [repr(name) for name in allowed]
        known = ("this env takes none" if not names
                 else f"the only option is {names[0]}" if len(names) == 1
                 else f"the options are {', '.join(names[:-1])} and {names[-1]}")
        raise ValueError(f"unknown reset options {unknown}; {known}")
    return dict(options)


__all__ = ["reset_options"]
