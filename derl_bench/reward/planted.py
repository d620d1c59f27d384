"""The reward a task's card plants as its best (``planted_reward``) and the parts it names
(``planted_parts``): what the planted-reward experiment trains, and what the search controls
withhold or search around.

    >>> from derl_bench.family import resolve_family
    >>> balance = resolve_family("derl/DigitsBalance-v0")
    >>> planted_reward("derl/DigitsBalance-v0", balance)
    'digit_recall * length_fit**2'
    >>> planted_parts("derl/DigitsBalance-v0", balance)["digit_recall"]
    'digit_recall'
"""

from __future__ import annotations

from derl_bench.family import Family


def planted_reward(env_id: str, family: Family) -> str:
    """The reward ``env_id``'s card plants (its ``planted_reward``); ``family`` is
    ``env_id``'s, resolved by the caller."""
    expr = family.card.get("planted_reward")
    if not expr:
        raise ValueError(f"{env_id}'s card names no planted_reward")
    return str(expr)


def planted_parts(env_id: str, family: Family) -> dict[str, str]:
    """The parts ``env_id``'s card names for its planted reward (``planted_parts``; label ->
    Meta-Reward), or none; ``family`` is ``env_id``'s, resolved by the caller."""
    parts = family.card.get("planted_parts") or {}
    return {str(label): str(expr) for label, expr in dict(parts).items()}
