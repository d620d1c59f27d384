"""Re-score one generation's proposals on fresh inner seeds: the winner's-curse check of the
proxy benchmark's primary endpoint.

A proposal that repeats an earlier reward keeps that reward's first score, and a search that
learns converges on the rewards whose single noisy run scored high, so its late proposals'
recorded scores are biased upward by selection. Training every reward of a generation again
with an inner seed no run of the benchmark used gives an unbiased score for each proposal (a
repeat gets its reward's fresh score). Usage::

    python scripts/rescore_proposals.py runs/proxy 19 derl derl-frozen

It prints, per method and seed, the generation's recorded and fresh mean, and the fresh
difference of the first method minus each other, paired by seed; ``OUT/rescored-gGEN.json``
keeps every score. docs/proxy.md reports the result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from derl_bench.experiments.landscape import LandscapeConfig, score_jobs
from derl_bench.experiments.proxy import ProxyConfig
from derl_bench.experiments.stats import paired_difference
from derl_bench.files import write_json_atomic

FRESH_SEED = 9_999_999
"""An inner seed outside every slot seed of the benchmark (``seed * 100000 + k``)."""


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, generation, methods = Path(argv[0]), int(argv[1]), argv[2:]
    result = json.loads((out / "results.json").read_text())
    fields = {k: v for k, v in result["config"].items() if k != "base"}
    config = ProxyConfig(**{**fields, "output": str(out)})
    rows = {(r["method"], r["seed"]): r for r in result["runs"] if r["method"] in methods}
    proposals = {key: [c for c in row["candidates"] if c["generation"] == generation]
                 for key, row in rows.items()}
    exprs = sorted({c["expr"] for cs in proposals.values() for c in cs
                    if c["status"] == "scored"})
    size = config.population
    jobs = [(exprs[i:i + size], FRESH_SEED, out / "rescore" / f"r{i // size:03d}")
            for i in range(0, len(exprs), size)]
    fresh = score_jobs(LandscapeConfig(proxy=config), str(out / "base-model"), jobs, print)
    table = {}
    for (method, seed), cs in sorted(proposals.items()):
        recorded = [c["score"] for c in cs]
        now = [fresh[c["expr"], FRESH_SEED] if c["status"] == "scored" else c["score"]
               for c in cs]
        table[f"{method}/{seed}"] = {"recorded": sum(recorded) / len(recorded),
                                     "fresh": sum(now) / len(now),
                                     "proposals": [{"expr": c["expr"], "recorded": c["score"],
                                                    "fresh": f} for c, f in zip(cs, now,
                                                                               strict=True)]}
        print(f"{method:<12} seed {seed}  "
              f"recorded {100 * table[f'{method}/{seed}']['recorded']:.2f}"
              f"  fresh {100 * table[f'{method}/{seed}']['fresh']:.2f}")
    seeds = sorted({s for _, s in proposals})
    first = methods[0]
    differences = {}
    for other in methods[1:]:
        d = paired_difference([table[f"{first}/{s}"]["fresh"] for s in seeds],
                              [table[f"{other}/{s}"]["fresh"] for s in seeds])
        differences[other] = d
        print(f"{first} - {other}, generation {generation}, fresh seed: "
              f"{100 * d['mean']:+.2f} [{100 * d['ci_low']:+.2f}, {100 * d['ci_high']:+.2f}] "
              f"points (MDE {100 * d['mde']:.2f}, {d['n']} seeds)")
    write_json_atomic(out / f"rescored-g{generation}.json",
                      {"generation": generation, "fresh_seed": FRESH_SEED, "rewards": len(exprs),
                       "table": table, "differences": differences})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
