"""The Meta-Reward language: safe, compiled reward expressions over primitives.

A Meta-Reward is a short arithmetic expression over the primitives an env declares (its card's
``primitives:``, which its observers emit), with trajectory terms (``mean``, ``sum``, ``last``,
``max``, ``min``, thirds) and its family's ``g1..g4`` aliases. It is parsed by a small
hand-written parser (never ``eval``), compiled to batched numpy/torch operations, and given a
canonical form, a hash and a structure class. ``semantics="derl-official"`` evaluates it the way
the released DERL code does (:mod:`derl_bench.reward.semantics`)::

    >>> r = compile_reward("g1 + 0.5 * (g2 + 0.5 * (g3 + 0.5 * (g4 + 0.5)))", env="derl/GSM8K-v0")
    >>> r.structure.kind, r.primitives
    ('linear', ('cot_steps', 'format_boxed', 'loose_outcome', 'outcome'))

See ``docs/meta-reward.md`` for the language reference.
"""

from derl_bench.reward.canonical import canonical_text, distance, levenshtein, stable_hash
from derl_bench.reward.constrained import ExpressionPrefix, TokenConstraint, allowed_next_chars
from derl_bench.reward.errors import (
    AggregationError,
    ForbiddenConstructError,
    InputTooLongError,
    MetaRewardError,
    MetaRewardSyntaxError,
    NumberError,
    TooDeepError,
    TrajectoryError,
    UnknownDomainError,
    UnknownPrimitiveError,
)
from derl_bench.reward.functions import MAX_POWER, POINTWISE, TRAJECTORY, language_summary
from derl_bench.reward.generate import random_expression
from derl_bench.reward.meta_reward import DEFAULT_LIMIT, MetaReward, compile_reward, pad_episodes
from derl_bench.reward.nodes import AGGREGATIONS, FUNCTIONS, MAX_DEPTH, MAX_LENGTH
from derl_bench.reward.primitives import (
    ALIASES,
    DOMAINS,
    PRIMITIVE_RANGES,
    PrimitiveSet,
    env_primitives,
    known_primitives,
    primitive_set,
)
from derl_bench.reward.semantics import SEMANTICS
from derl_bench.reward.structure import Structure

__all__ = [
    "AGGREGATIONS",
    "ALIASES",
    "DEFAULT_LIMIT",
    "DOMAINS",
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MAX_POWER",
    "PRIMITIVE_RANGES",
    "AggregationError",
    "ExpressionPrefix",
    "ForbiddenConstructError",
    "InputTooLongError",
    "MetaReward",
    "MetaRewardError",
    "MetaRewardSyntaxError",
    "PrimitiveSet",
    "NumberError",
    "SEMANTICS",
    "POINTWISE",
    "Structure",
    "TokenConstraint",
    "TRAJECTORY",
    "TooDeepError",
    "TrajectoryError",
    "UnknownDomainError",
    "UnknownPrimitiveError",
    "allowed_next_chars",
    "canonical_text",
    "compile_reward",
    "distance",
    "known_primitives",
    "language_summary",
    "levenshtein",
    "pad_episodes",
    "env_primitives",
    "primitive_set",
    "random_expression",
    "stable_hash",
]
