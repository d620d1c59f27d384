"""``derl-pop``: DERL with every inner run after the first generation warm-started from the best
policy so far (DERL-pop)."""

from __future__ import annotations

from derl_bench.meta.methods.base import Method
from derl_bench.meta.methods.derl import OPTIMIZER_SETTINGS, POPULATION_WHY, meta_optimizer

METHOD = Method(
    name="derl-pop",
    summary="DERL, every inner run warm-started from the best policy so far",
    proposer=meta_optimizer,
    learns=True,
    warm_starts=True,
    min_population=2,
    population_why=POPULATION_WHY,
    settings=(*OPTIMIZER_SETTINGS, "warm_start_from"),
    protocols=("derl", "derl-official"),
    # The released code runs DERL-pop for 50 generations (grpo_coordinator_population.py:29).
    protocol_values={"derl-official": {"outer_steps": 50}},
)
