"""``derl-frozen``: the control that isolates learning: DERL's cold-started Meta-Optimizer and
sampler, never updated (learning rate 0)."""

from __future__ import annotations

import dataclasses
from typing import Any

from derl_bench.meta.methods import derl
from derl_bench.meta.search import Proposer


def frozen_meta_optimizer(recipe: Any, env_id: str, cold_start: bool) -> Proposer:
    """DERL's Meta-Optimizer at learning rate 0."""
    return derl.meta_optimizer(recipe, env_id, cold_start, frozen=True)


# DERL's settings, population rule and protocols: the released code has DERL and DERL-pop;
# the frozen control is DERL at learning rate 0, so it differs only in its proposer.
METHOD = dataclasses.replace(
    derl.METHOD,
    name="derl-frozen",
    summary="DERL's cold-started Meta-Optimizer at learning rate 0 (the control)",
    proposer=frozen_meta_optimizer,
    label="",  # its own name, not derl's
)
