"""Per-domain tables: the primitives a domain knows, their declared ranges, and the paper's
``g1..g4`` aliases.

Aliases are data: each maps a name to an expression in the language, which the parser
substitutes where the alias appears. Ranges are what observers promise; structure analysis
uses them to decide whether a reward is bounded. ``inf`` marks an open end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

INF = math.inf

PRIMITIVE_RANGES: Mapping[str, Mapping[str, tuple[float, float]]] = {
    "math": {
        "outcome": (0.0, 1.0),
        "format_boxed": (0.0, 1.0),
        "cot_steps": (0.0, 1.0),
        "loose_outcome": (0.0, 1.0),
        "response_length": (0.0, INF),
        "answer_parsed": (0.0, 1.0),
        "env_reward": (0.0, 1.0),
    },
    "agent": {
        "success": (0.0, 1.0),
        "published_success": (0.0, 1.0),
        "failed": (0.0, 1.0),
        # ScienceWorld's score over 100, floored at 0; the env reward is the raw change over
        # 100, and the raw score runs from -100 (failure) to 100.
        "score": (0.0, 1.0),
        "score_delta": (-1.0, 1.0),
        "goal_progress": (0.0, 1.0),
        "goal_progress_delta": (-1.0, 1.0),
        "action_admissible": (0.0, 1.0),
        "action_valid": (0.0, 1.0),
        "action_effective": (0.0, 1.0),
        "new_location": (0.0, 1.0),
        "repeated_action": (0.0, 1.0),
        "step_fraction": (0.0, 1.0),
        "format_valid": (0.0, 1.0),
        "env_reward": (-2.0, 2.0),
    },
}

ALIASES: Mapping[str, Mapping[str, str]] = {
    # DERL math: outcome, format (\boxed), chain-of-thought steps, loose outcome.
    "math": {
        "g1": "outcome",
        "g2": "format_boxed",
        "g3": "cot_steps",
        "g4": "loose_outcome",
    },
    # DERL agents: outcome, then the mean step reward over the first/middle/last third.
    "agent": {
        "g1": "success",
        "g2": "first_third(env_reward)",
        "g3": "mid_third(env_reward)",
        "g4": "last_third(env_reward)",
    },
}

DOMAINS: tuple[str, ...] = tuple(PRIMITIVE_RANGES)


def known_primitives(domain: str) -> tuple[str, ...]:
    """The primitive names a domain knows, in table order.

    >>> known_primitives("math")[:2]
    ('outcome', 'format_boxed')
    """
    from derl_bench.reward.errors import UnknownDomainError

    if domain not in PRIMITIVE_RANGES:
        raise UnknownDomainError(f"{domain!r}; choose one of {', '.join(DOMAINS)}")
    return tuple(PRIMITIVE_RANGES[domain])


def primitive_range(domain: str, name: str) -> tuple[float, float]:
    """The declared range of ``name`` in ``domain``; unbounded for names the table lacks."""
    return PRIMITIVE_RANGES.get(domain, {}).get(name, (-INF, INF))
