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
    python leaderboards/arithmetic/study/structure_by_semantics.py \\
        official=runs/official-semantics derl=runs/derl-semantics

With ``--corpus OUT K``, it trains instead a fixed set of rewards under both semantics: the
first ``K`` formulas of each structure class among the DERL paper's cold-start formulas that
compile under both, with the proxy's inner recipe and base policy (from ``OUT``, a proxy output
folder), inner seeds 0 and 1, each scored on the 1,000 validation problems; it prints each
class's mean score under each semantics and the difference, paired by formula and seed::

    python leaderboards/arithmetic/study/structure_by_semantics.py --corpus runs/proxy 8

The study's README.md reports the result.
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


def corpus_comparison(out: Path, per_class: int, seeds: tuple[int, ...] = (0, 1),
                      ) -> dict[str, Any]:
    """Train the first ``per_class`` corpus formulas of each structure class under both
    semantics (see the module docstring) and compare their scores per class."""
    from dataclasses import replace

    from derl_bench.experiments.landscape import LandscapeConfig, score_jobs
    from derl_bench.experiments.proxy import ProxyConfig

    chosen = chosen_formulas(per_class)
    formulas = [f for kind in STRUCTURES for f in chosen[kind]]
    scores = {}
    for semantics in ("derl", "derl-official"):
        base = ProxyConfig(output=str(out))
        config = replace(base, inner={**base.inner, "reward_semantics": semantics})
        jobs = [(formulas[i:i + 8], seed, out / "semantics" / f"{semantics}-s{seed}-{i // 8}")
                for seed in seeds for i in range(0, len(formulas), 8)]
        found = score_jobs(LandscapeConfig(proxy=config), str(out / "base-model"), jobs, print)
        scores[semantics] = {f"{expr}|{seed}": v for (expr, seed), v in found.items()}
    return {"seeds": list(seeds), "per_class": per_class,
            "table": corpus_table(chosen, scores, seeds), "scores": scores}


def chosen_formulas(per_class: int) -> dict[str, list[str]]:
    """The first ``per_class`` of the DERL paper's cold-start formulas in each structure class
    that compile under both semantics."""
    from derl_bench.data.corpus import cold_start_formulas
    from derl_bench.experiments.proxy import ENV_ID
    from derl_bench.reward import MetaRewardError, compile_reward

    chosen: dict[str, list[str]] = {kind: [] for kind in STRUCTURES}
    for formula in cold_start_formulas():
        try:
            kind = compile_reward(formula, domain=ENV_ID).structure.kind
            compile_reward(formula, domain=ENV_ID, semantics="derl-official")
        except MetaRewardError:
            continue
        if len(chosen[kind]) < per_class and formula not in chosen[kind]:
            chosen[kind].append(formula)
    return chosen


def corpus_table(chosen: dict[str, list[str]], scores: dict[str, dict[str, float]],
                 seeds: tuple[int, ...] | list[int]) -> dict[str, Any]:
    """Per structure class: the mean score under each semantics and official minus derl,
    paired by formula and seed (``scores``: semantics -> ``"formula|seed"`` -> score)."""
    from derl_bench.experiments.stats import paired_difference

    table = {}
    for kind in STRUCTURES:
        keys = [f"{f}|{s}" for f in chosen[kind] for s in seeds]
        if not keys:
            continue
        derl = [scores["derl"][k] for k in keys]
        official = [scores["derl-official"][k] for k in keys]
        table[kind] = {"formulas": chosen[kind], "derl": sum(derl) / len(derl),
                       "official": sum(official) / len(official),
                       "official_minus_derl": paired_difference(official, derl)}
    return table


def corpus_markdown(found: dict[str, Any]) -> str:
    """The corpus comparison as a table."""
    lines = ["| structure | formulas | mean score, derl semantics, % | official semantics, % | "
             "official − derl, points [95% CI] |", "|---|---|---|---|---|"]
    for kind, row in found["table"].items():
        d = row["official_minus_derl"]
        lines.append(f"| {kind} | {len(row['formulas'])} | {100 * row['derl']:.1f} | "
                     f"{100 * row['official']:.1f} | {100 * d['mean']:+.1f} "
                     f"[{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}] |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--corpus"] and len(argv) == 3:
        from derl_bench.files import write_json_atomic

        out = Path(argv[1])
        found = corpus_comparison(out, int(argv[2]))
        write_json_atomic(out / "semantics-corpus.json", found)
        print(corpus_markdown(found))
        return 0
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
