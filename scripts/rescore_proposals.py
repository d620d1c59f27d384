"""Re-score generations' proposals on fresh inner seeds: the winner's-curse check of the proxy
benchmark's mechanism endpoint.

A proposal that repeats an earlier reward keeps that reward's first score, and a search that
learns converges on the rewards whose single noisy run scored high, so its late proposals'
recorded scores are biased upward by selection. Training every reward of the generations again
on ``RESCORE_SEEDS`` inner seeds no run of the benchmark used (:func:`rescore_seeds`) gives an
unbiased score for each proposal: the mean of its reward's fresh runs (a repeat gets its
reward's). The proxy board does the same for its mechanism since the pick became a setting
(``derl_bench.experiments.rescore``, whose functions this script uses); this script re-scores
a board made before, or other generations.
Usage (a generation, or a range ``FIRST-LAST``)::

    python scripts/rescore_proposals.py runs/proxy 10-19 derl derl-frozen

It prints, per method and seed, the generations' recorded and fresh mean, and the fresh
difference of the first method minus each other, paired by seed and Holm-corrected;
``OUT/rescored-gFIRST-LAST.json`` keeps every score. docs/proxy.md reports the result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from derl_bench.experiments.landscape import LandscapeConfig, score_jobs
from derl_bench.experiments.proxy import ProxyConfig
from derl_bench.experiments.rescore import RESCORE_SEEDS, fresh_endpoint, rescore_seeds
from derl_bench.experiments.stats import describe, holm, paired_difference
from derl_bench.files import write_json_atomic

__all__ = ["RESCORE_SEEDS", "main", "rescore_seeds"]


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, span, methods = Path(argv[0]), argv[1], argv[2:]
    first, _, last = span.partition("-")
    generations = range(int(first), int(last or first) + 1)
    result = json.loads((out / "results.json").read_text())
    fields = {k: v for k, v in result["config"].items() if k != "base"}
    # results.json of a run made before the pick was a setting: keep what it did.
    fields.setdefault("pick", "best-run")
    config = ProxyConfig(**{**fields, "output": str(out)})
    rows = {(r["method"], r["seed"]): r for r in result["runs"] if r["method"] in methods}
    proposals = {key: [c for c in row["candidates"] if c["generation"] in generations]
                 for key, row in rows.items()}
    exprs = sorted({c["expr"] for cs in proposals.values() for c in cs
                    if c["status"] == "scored"})
    size = config.population
    seeds = rescore_seeds()
    jobs = [(exprs[i:i + size], seed, out / "rescore" / f"r{seed}-{i // size:03d}")
            for seed in seeds for i in range(0, len(exprs), size)]
    scores = score_jobs(LandscapeConfig(proxy=config), str(out / "base-model"), jobs, print)
    fresh = {e: sum(scores[e, s] for s in seeds) / len(seeds) for e in exprs}
    table = {}
    for (method, seed), cs in sorted(proposals.items()):
        recorded = [c["score"] for c in cs if c["score"] is not None]
        now = [fresh[c["expr"]] if c["status"] == "scored" else c["score"] for c in cs]
        table[f"{method}/{seed}"] = {"recorded": sum(recorded) / len(recorded),
                                     "fresh": fresh_endpoint(cs, generations, fresh),
                                     "proposals": [{"expr": c["expr"], "recorded": c["score"],
                                                    "fresh": f} for c, f in zip(cs, now,
                                                                               strict=True)]}
        print(f"{method:<12} seed {seed}  "
              f"recorded {100 * table[f'{method}/{seed}']['recorded']:.2f}"
              f"  fresh {100 * table[f'{method}/{seed}']['fresh']:.2f}")
    run_seeds = sorted({s for _, s in proposals})
    subject, others = methods[0], methods[1:]
    raw = [paired_difference([table[f"{subject}/{s}"]["fresh"] for s in run_seeds],
                             [table[f"{other}/{s}"]["fresh"] for s in run_seeds])
           for other in others]
    differences = dict(zip(others, holm(raw), strict=True))
    for other, d in differences.items():
        print(f"{subject} - {other}, generations {span}, {len(seeds)} fresh seeds, "
              f"{d['n']} seeds: {describe(d, digits=2)} points")
    write_json_atomic(out / f"rescored-g{span}.json",
                      {"generations": span, "fresh_seeds": seeds, "rewards": len(exprs),
                       "table": table, "differences": differences})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
