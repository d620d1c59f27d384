"""The DERL cold-start corpus under derl-bench's semantics and under the official code's.

For each of the 206 formulas of the corpus (``derl-bench data download derl``) this compiles
it under ``semantics="derl"`` and ``"derl-official"``, evaluates both on the 16 binary outcomes
of ``g1..g4`` and prints how many compile, how many order the 16 outcomes differently, and how
large the official values get (``docs/meta-reward.md`` reports the figures)::

    python benchmarks/official_semantics.py [--json]

Deterministic: no sampling, no model.
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

import numpy as np

from derl_bench.data.corpus import cold_start_formulas
from derl_bench.reward import SEMANTICS, MetaRewardError, compile_reward, primitive_set

ENV = "derl/GSM8K-v0"
LARGE = 1e5


def outcomes() -> dict[str, np.ndarray]:
    """The 16 binary combinations of g1..g4 as a batch of one-step trajectories."""
    aliases = primitive_set(ENV).aliases
    combos = np.array(list(itertools.product((0.0, 1.0), repeat=4)))
    return {aliases[f"g{i + 1}"]: combos[:, i:i + 1] for i in range(4)}


def order(values: np.ndarray) -> np.ndarray:
    """The sign of every pairwise difference: equal orders, equal rankings (ties included)."""
    return np.sign(values[:, None] - values[None, :])


def measure() -> dict[str, Any]:
    formulas = cold_start_formulas()
    batch = outcomes()
    compiled: dict[str, int] = {}
    values: dict[str, list[np.ndarray | None]] = {}
    for semantics in SEMANTICS:
        row: list[np.ndarray | None] = []
        for formula in formulas:
            try:
                reward = compile_reward(formula, env=ENV, semantics=semantics)
            except MetaRewardError:
                row.append(None)
                continue
            row.append(np.asarray(reward.episodic(batch)))
        values[semantics] = row
        compiled[semantics] = sum(v is not None for v in row)
    both = [(d, o) for d, o in zip(values["derl"], values["derl-official"], strict=True)
            if d is not None and o is not None]
    differ = sum(not np.array_equal(order(d), order(o)) for d, o in both)
    reversed_pairs = sum(bool((order(d) * order(o) < 0).any()) for d, o in both)
    ties_broken = sum(bool(((order(d) == 0) & (order(o) != 0)).any()) for d, o in both)
    official = [o for o in values["derl-official"] if o is not None]
    large = [o for o in official if (np.abs(o) > LARGE).any()]
    return {
        "formulas": len(formulas),
        "compiled": compiled,
        "compiled_under_both": len(both),
        "ranking_differs": differ,
        "ranking_reversed": reversed_pairs,
        "ties_broken_by_official": ties_broken,
        "official_formulas_above_1e5": len(large),
        "official_values_above_1e5": int(sum((np.abs(o) > LARGE).sum() for o in official)),
        "official_max": float(max(np.abs(o).max() for o in official)),
        "official_zero_values": int(sum((o == 0).sum() for o in official)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = measure()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
