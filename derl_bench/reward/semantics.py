"""What a compiled Meta-Reward's arithmetic means: derl-bench's own rules, or the DERL code's.

``derl`` (the default) is the language as documented in ``docs/meta-reward.md``: primitives
as the observers emit them (0 or 1 for the math indicators), ``x / 0 = 0`` term by term, and
every output made finite and clipped to ``[-bound, bound]``.

``derl-official`` is how the released DERL code (``verl/utils/reward_score/__init__.py``,
``default_compute_score``) scores a formula: each of the math family's four primitives
``g1..g4`` (outcome, format_boxed, cot_steps, loose_outcome) enters as ``1e-6`` or
``1 + 1e-6`` instead of 0 or 1; the formula is Python arithmetic, so a division by zero (or a
``**`` that overflows) anywhere raises, and the code's ``except`` makes the whole reward 0 for
that sample; the value is stored as a float32 and never clipped. Only what Python's ``eval``
of the official code can evaluate is accepted: ``g1..g4`` (or the four primitives by name),
numbers, ``+ - * / **``, parentheses and Python's own ``abs``, ``min`` and ``max``::

    >>> from derl_bench.reward import compile_reward
    >>> r = compile_reward("g1 / (g2 - g3) + g4", env="derl/GSM8K-v0", semantics="derl-official")
    >>> traj = {"outcome": [[1.0], [1.0]], "format_boxed": [[1.0], [1.0]],
    ...         "cot_steps": [[0.0], [1.0]], "loose_outcome": [[1.0], [1.0]]}
    >>> [round(v, 1) for v in r.episodic(traj).tolist()]   # (1 + 1e-6) / 1 + 1, then 1 / 0
    [2.0, 0.0]
"""

from __future__ import annotations

from derl_bench.reward.errors import ForbiddenConstructError, MetaRewardError
from derl_bench.reward.nodes import Agg, Call, Node, Prim, walk
from derl_bench.reward.primitives import PrimitiveSet

DERL = "derl"
OFFICIAL = "derl-official"
SEMANTICS: tuple[str, ...] = (DERL, OFFICIAL)
"""The semantics a Meta-Reward can be compiled under (``compile_reward(semantics=...)``,
``TrainConfig.reward_semantics``)."""

OFFICIAL_EPSILON = 1e-6
"""The official code's encoding: an indicator primitive ``v`` in {0, 1} enters as ``v + 1e-6``."""
OFFICIAL_ALIASES = ("g1", "g2", "g3", "g4")
OFFICIAL_FUNCTIONS = frozenset({"abs", "min", "max"})
"""The language's functions that are also Python builtins with the same meaning; the others
(``sqrt``, ``log1p``, ``clip``) are names the official ``eval`` does not know."""


def check_semantics(semantics: str) -> str:
    """``semantics`` if it is one of :data:`SEMANTICS`, else a :class:`MetaRewardError`."""
    if semantics not in SEMANTICS:
        raise MetaRewardError(
            f"semantics must be one of {', '.join(SEMANTICS)}, not {semantics!r}")
    return semantics


def official_primitives(primitives: PrimitiveSet) -> frozenset[str]:
    """The primitives ``g1..g4`` name in ``primitives``; an error where they are not four
    plain primitives (the official semantics exists for the math families only)."""
    names = [primitives.aliases.get(alias) for alias in OFFICIAL_ALIASES]
    if any(name is None or name not in primitives.ranges for name in names):
        raise MetaRewardError(
            f"{OFFICIAL} semantics needs g1..g4 to be four primitives, as the math families "
            f"define them; {primitives.name!r} defines "
            f"{dict(primitives.aliases) or 'no aliases'}")
    return frozenset(name for name in names if name is not None)


def check_official(tree: Node, primitives: PrimitiveSet, expr: str) -> None:
    """Reject what the official code's ``eval`` cannot evaluate: primitives other than
    ``g1..g4``, trajectory terms and the functions Python does not have."""
    allowed = official_primitives(primitives)
    for node in walk(tree):
        if isinstance(node, Prim) and node.name not in allowed:
            raise ForbiddenConstructError(
                f"{OFFICIAL} semantics reads only g1..g4 ({', '.join(sorted(allowed))}), "
                f"not {node.name!r}", expr=expr)
        if isinstance(node, Agg):
            raise ForbiddenConstructError(
                f"{OFFICIAL} semantics has no trajectory terms ({node.fn}(...))", expr=expr)
        if isinstance(node, Call) and node.fn not in OFFICIAL_FUNCTIONS:
            raise ForbiddenConstructError(
                f"{OFFICIAL} semantics knows only the functions "
                f"{', '.join(sorted(OFFICIAL_FUNCTIONS))}, not {node.fn!r}", expr=expr)
