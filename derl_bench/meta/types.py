"""The values the meta loop hands to its persistence and its report: what a run found
(:class:`MetaResult`) and what became of each candidate (:class:`Status`). They live apart from
:mod:`derl_bench.meta.loop` so that the modules the loop uses can name them without importing
the loop."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


@dataclass
class MetaResult:
    """What a reward-discovery run found."""

    best_expr: str | None = None
    best_score: float = -math.inf
    best_checkpoint: str | None = None
    generations: list[dict[str, Any]] = field(default_factory=list)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    headline: dict[str, Any] = field(default_factory=dict)
    """Per level: the best policy's eval success ``{"mean", "se", "n"}`` and its record."""
    zero_advantage_generations: int = 0


class Status(StrEnum):
    """A candidate record's ``status``: what became of its reward."""

    INVALID = "invalid"
    """It does not compile (or was left unfinished); it scores ``invalid_score``."""
    CONSTANT = "constant"
    """It is constant on the probe set, so it trains nothing; it scores ``invalid_score``."""
    SCORED = "scored"
    """Its inner run (or an earlier run of the same behaviour) trained and was validated."""
    FAILED = "failed"
    """Its inner run raised on every attempt; it is left out of the generation."""


__all__ = ["MetaResult", "Status"]
