"""The paper's mechanism 3 under two reward semantics: which reward structures a search
proposes, and what they score, side by side.

Each argument is a proxy benchmark output folder (``derl-bench proxy --output DIR``) with a
label; the script prints, per structure class (linear, bounded, veto, unbounded), the share of
each run's valid proposals in the first and second half of the generations and the mean
validation score of those proposals, over seeds. Usage::

    derl-bench proxy --methods derl --seeds 0 1 --optimizer protocol=derl-official \\
        --output runs/official-semantics
    derl-bench proxy --methods derl --seeds 0 1 --optimizer protocol=derl-official \\
        inner.reward_semantics=derl --output runs/derl-semantics
    python scripts/structure_by_semantics.py official=runs/official-semantics \\
        derl=runs/derl-semantics

docs/meta-loop.md reports the result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from derl_bench.experiments.evidence import STRUCTURES


def structure_rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per structure: share of valid proposals in each half of the run and their mean score."""
    halves = result["config"]["outer_steps"] // 2
    proposals = [c for run in result["runs"] for c in run["candidates"] if c.get("structure")]
    rows = {}
    for kind in STRUCTURES:
        row: dict[str, Any] = {}
        for name, part in (("early", [c for c in proposals if c["generation"] < halves]),
                           ("late", [c for c in proposals if c["generation"] >= halves])):
            mine = [c for c in part if c["structure"] == kind]
            scores = [c["score"] for c in mine if c.get("score") is not None]
            row[f"{name}_share"] = len(mine) / len(part) if part else 0.0
            row[f"{name}_score"] = sum(scores) / len(scores) if scores else None
            row[f"{name}_n"] = len(mine)
        rows[kind] = row
    return rows


def markdown(labelled: dict[str, dict[str, Any]]) -> str:
    """The side-by-side table."""
    labels = list(labelled)
    head = "| structure | " + " | ".join(
        f"{label}: share early → late | {label}: mean score early → late, %"
        for label in labels) + " |"
    lines = [head, "|---|" + "---|---|" * len(labels)]
    tables = {label: structure_rows(result) for label, result in labelled.items()}

    def score(value: float | None) -> str:
        return "–" if value is None else f"{100 * value:.1f}"

    for kind in STRUCTURES:
        cells = []
        for label in labels:
            r = tables[label][kind]
            cells.append(f"{100 * r['early_share']:.0f}% → {100 * r['late_share']:.0f}% "
                         f"(n {r['early_n']} → {r['late_n']})")
            cells.append(f"{score(r['early_score'])} → {score(r['late_score'])}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    for label, result in labelled.items():
        endpoint = result["summary"]["derl"]["endpoint"]
        lines.append("")
        lines.append(f"{label}: seeds {result['summary']['derl']['seeds']}, proposals' mean "
                     f"score over generations {result['config']['endpoint_from']}–"
                     f"{result['config']['outer_steps'] - 1}: {100 * endpoint['mean']:.1f} ± "
                     f"{100 * endpoint['se']:.1f}%; wall time "
                     f"{result['wall_time_s'] / 60:.0f} min.")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv or any("=" not in a for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    labelled = {}
    for arg in argv:
        label, folder = arg.split("=", 1)
        labelled[label] = json.loads((Path(folder) / "results.json").read_text())
    print(markdown(labelled))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
