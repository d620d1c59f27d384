"""``compile_reward``: parse, canonicalise, analyse once; evaluate batches many times."""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from derl_bench.reward.canonical import normalize, stable_hash, to_text
from derl_bench.reward.errors import (
    InputTooLongError,
    MetaRewardError,
    TooDeepError,
    TrajectoryError,
)
from derl_bench.reward.evaluate import Evaluation, prepare
from derl_bench.reward.nodes import Node, primitives_of
from derl_bench.reward.parser import parse, resolve
from derl_bench.reward.primitives import Interval, PrimitiveSet
from derl_bench.reward.semantics import (
    DERL,
    OFFICIAL,
    OFFICIAL_EPSILON,
    check_official,
    check_semantics,
)
from derl_bench.reward.structure import Structure, analyze

DEFAULT_LIMIT = 1e6
"""Magnitude every output is clipped to when no ``bound`` is given."""


class MetaReward:
    """A compiled Meta-Reward. Build one with :func:`compile_reward`.

    >>> r = compile_reward("g1 + 0.5 * mean(format_valid)", env="derl/ALFWorld-v0")
    >>> r.primitives
    ('format_valid', 'success')
    >>> r.episodic({"success": [[0, 1]], "format_valid": [[1, 0]]}, [2]).tolist()
    [1.25]

    ``semantics`` is ``"derl"`` or ``"derl-official"`` (:mod:`derl_bench.reward.semantics`);
    ``canonical`` and ``hash`` name the expression, whatever its semantics.
    """

    def __init__(self, expr: str, primitives: PrimitiveSet, tree: Node, bound: float | None,
                 semantics: str = DERL) -> None:
        self.expr = expr
        self.declared = primitives
        """The primitives it was compiled against: their names, ranges and aliases."""
        self.domain = primitives.name
        self.known = primitives.names
        self.bound = bound
        self.semantics = check_semantics(semantics)
        self.official = semantics == OFFICIAL
        if self.official:
            check_official(tree, primitives, expr)
            if bound is not None:
                raise MetaRewardError(f"{OFFICIAL} semantics never clips: give no bound")
        self.limit = DEFAULT_LIMIT if bound is None else float(bound)
        self.tree = normalize(tree)
        # The official rule is Python's evaluation of the text as written: the canonical
        # form's folded constants and merged terms would round differently.
        self._evaluated = tree if self.official else self.tree
        self.canonical = to_text(self.tree)
        _check_canonical(self.canonical, primitives, expr)
        self.hash = stable_hash(self.canonical)
        self.primitives = primitives_of(self._evaluated)
        shift = OFFICIAL_EPSILON if self.official else 0.0

        def ranges(name: str) -> Interval:
            low, high = primitives.range(name)
            return low + shift, high + shift

        self.structure: Structure = analyze(self.tree, ranges)

    def __repr__(self) -> str:
        extra = "" if self.semantics == DERL else f", semantics={self.semantics!r}"
        return f"MetaReward({self.canonical!r}, domain={self.domain!r}, hash={self.hash}{extra})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetaReward) and (self.hash, self.bound, self.semantics) == (
            other.hash,
            other.bound,
            other.semantics,
        )

    def __hash__(self) -> int:
        return hash((self.hash, self.bound, self.semantics))

    def _finish(self, ops: Any, raw: Any, run: Evaluation) -> tuple[Any, Any]:
        """The outputs and where they were NaN or infinite: clipped and made finite, or under
        the official semantics 0 wherever Python raised, rounded to float32, never clipped."""
        if not self.official:
            return ops.sanitize(raw, self.limit)
        if run.raised is not None:
            raw = ops.where(ops.broadcast(run.raised, tuple(raw.shape)), 0.0, raw)
        values = ops.float32(raw)
        return values, ~ops.isfinite(values)

    def episodic(
        self, traj: Mapping[str, Any], lengths: Any = None, *, return_invalid: bool = False
    ) -> Any:
        """One reward per trajectory, ``(B,)``; with ``return_invalid`` also a ``(B,)`` mask
        of values that were NaN or infinite before clean-up.

        ``traj`` maps each primitive to a ``(B, T)`` array (numpy, torch or nested lists);
        ``lengths`` (``(B,)``, default ``T``) marks the real steps, the rest is padding.
        """
        ops, columns, lengths_t, lengths_np, shape = prepare(traj, lengths, self.primitives,
                                                             self.official)
        with np.errstate(all="ignore"):
            run = Evaluation(ops, columns, lengths_t, shape, lengths_np, per_step=False,
                             official=self.official)
            raw = ops.broadcast(run.value(self._evaluated), (shape[0],))
            values, invalid = self._finish(ops, raw, run)
        return (values, invalid) if return_invalid else values

    def per_step(
        self, traj: Mapping[str, Any], lengths: Any = None, *, return_invalid: bool = False
    ) -> Any:
        """A dense reward per step, ``(B, T)``, zero on padding.

        Step ``t`` gets ``F(t) - F(t - 1)``, where ``F(t)`` is the episodic value of the
        trajectory cut after step ``t`` (``F(-1) = 0``), so the steps of an episode sum to its
        episodic reward.
        """
        ops, columns, lengths_t, lengths_np, shape = prepare(traj, lengths, self.primitives,
                                                             self.official)
        with np.errstate(all="ignore"):
            run = Evaluation(ops, columns, lengths_t, shape, lengths_np, per_step=True,
                             official=self.official)
            raw = ops.broadcast(run.value(self._evaluated), shape)
            running, invalid = self._finish(ops, raw, run)
            previous = ops.where(ops.arange(shape[1])[None, :] > 0, ops.roll_right(running), 0.0)
            steps = ops.where(run.mask, running - previous, 0.0)
        return (steps, invalid & run.mask) if return_invalid else steps

    def episodic_from_steps(self, episodes: Sequence[Sequence[Mapping[str, float]]]) -> np.ndarray:
        """Episodic rewards from ragged per-step ``info["primitives"]`` dicts, ``(B,)``."""
        traj, lengths = pad_episodes(episodes, self.primitives)
        return self.episodic(traj, lengths)


def _check_canonical(canonical: str, primitives: PrimitiveSet, expr: str) -> None:
    """Refuse an expression whose canonical form the language's limits refuse.

    The canonical form names a reward (its hash, the records, the Meta-Optimizer's history) and
    is compiled again from its text (a resumed search, a board's check); writing out aliases
    (``g4`` -> ``last_third(env_reward)``) and constants can make it longer or deeper than the
    expression. Checking it here keeps every accepted expression's canonical form accepted."""
    try:
        parse(canonical, primitives)
    except (InputTooLongError, TooDeepError) as err:
        raise type(err)(f"its canonical form (aliases written out, constants folded) would be "
                        f"refused: {err.message}", None, expr) from None


def pad_episodes(
    episodes: Sequence[Sequence[Mapping[str, float]]], names: Iterable[str]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Stack ragged per-step primitive dicts into ``(B, T)`` arrays and ``(B,)`` lengths.
    A value must be a number (a bool counts as 0 or 1), never its text: :class:`TrajectoryError`
    names the episode, step and primitive."""
    names = tuple(names)
    lengths = np.array([len(e) for e in episodes], dtype=np.int64)
    steps = max(1, int(lengths.max(initial=0)))
    traj = {n: np.zeros((len(episodes), steps)) for n in names}
    for b, episode in enumerate(episodes):
        for t, step in enumerate(episode):
            for name in names:
                if name not in step:
                    raise TrajectoryError(f"episode {b} step {t} lacks primitive {name!r}")
                value = step[name]
                try:
                    # float() also reads text: a logged "1" would pass for the number 1
                    if isinstance(value, str | bytes | bytearray):
                        raise TypeError
                    traj[name][b, t] = float(value)
                except (TypeError, ValueError):
                    raise TrajectoryError(
                        f"episode {b} step {t}: {name!r} is not a number: "
                        f"{reprlib.repr(value)}"  # shortened: a logged value may be huge
                    ) from None
    return traj, lengths


def compile_reward(
    expr: str,
    domain: str | PrimitiveSet | None = None,
    primitives: Iterable[str] | Mapping[str, Interval] | None = None,
    bound: float | None = None,
    *,
    env: str | None = None,
    semantics: str = DERL,
) -> MetaReward:
    """Parse and compile ``expr`` against the primitives ``env`` declares (an env id such as
    ``"derl/ALFWorld-v0"``), or those of ``domain`` (a family, or ``"math"``/``"agent"``).

    ``primitives`` replaces the known names (for envs with their own observers); a mapping
    also declares each name's ``(low, high)`` range for structure analysis. ``bound`` clips
    every output to ``[-bound, bound]`` (default ``DEFAULT_LIMIT``). ``semantics="derl-official"``
    evaluates the way the released DERL code does (:mod:`derl_bench.reward.semantics`): the
    ``1e-6`` encoding of ``g1..g4``, a reward of 0 wherever Python would raise, no clipping.

    Raises a :class:`MetaRewardError` subclass, with position, on any rejected expression: an
    unknown primitive is an :class:`UnknownPrimitiveError` with close names as suggestions.
    """
    if bound is not None and not (
        isinstance(bound, (int, float)) and math.isfinite(bound) and bound > 0
    ):
        raise MetaRewardError(f"bound must be a positive finite number, not {bound!r}")
    source = env if env is not None else domain
    if source is None:
        raise MetaRewardError("compile_reward needs env= (an env id) or domain=")
    chosen = resolve(source, primitives)
    return MetaReward(expr, chosen, parse(expr, chosen), bound, semantics)
