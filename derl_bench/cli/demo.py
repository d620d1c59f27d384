"""``derl-bench demo``: the embedded default job, DERL against outcome-only on the proxy task.

It needs no data: ``derl/Arithmetic-v0`` generates its problems, and the base policy is the
tiny model fine-tuned in code on the env's reference solutions. On 2 CPU cores, in minutes, it

1. builds the base policy (cached in ``OUTPUT/base-model``);
2. runs DERL in its population variant, DERL-pop — a Meta-Optimizer writes Meta-Rewards, each
   trains a GRPO policy from the best policy so far, each policy is scored on the fixed
   validation set, and the scores train the Meta-Optimizer — and, beside it at the same budget
   and with the same warm start, the hand-made outcome-only reward;
3. evaluates each method's best policy on the L0/L1/L2 eval sets and writes result records, a
   plot of validation success per generation and ``demo.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DEMO: dict[str, Any] = {
    "methods": ["derl-pop", "outcome-pop"],
    "seeds": [0],
    "outer_steps": 3,
    "population": 4,
    "validation_episodes": 200,
}
"""The embedded default: the proxy benchmark's inner recipe and base policy, DERL-pop and the
outcome-only baseline with the same population warm start, one seed, 3 generations of 4 inner
runs each."""

LABELS = {"derl-pop": "derl", "outcome-pop": "outcome-only"}


def run_demo(output: Path, workers: int = 2, small: bool = False,
             log: Any = print) -> dict[str, Any]:
    """Run the demo into ``output``; returns what it wrote to ``output/demo.json``.
    ``small`` shrinks every budget to the proxy benchmark's CI size (numbers meaningless)."""
    from derl_bench.evaluation.proxy import ProxyConfig, plot_curves, run_proxy
    from derl_bench.evaluation.proxy import small as shrink

    config = ProxyConfig(output=str(output), workers=workers, **DEMO)
    if small:
        config = shrink(config)
        config.methods, config.seeds = list(DEMO["methods"]), list(DEMO["seeds"])
    result = run_proxy(config, log=log)
    rows = [r for r in result["runs"] if r["method"] in LABELS]
    # The demo plots each generation's best, which (unlike the best so far) can also fall.
    plot_curves(rows, output / "curves.png", key="generation_best")
    methods: dict[str, Any] = {}
    for row in rows:
        level0 = row["eval"].get("L0", {})
        methods[LABELS[row["method"]]] = {
            "variant": row["method"],
            "validation_by_generation": row["generation_best"],
            "best_so_far": row["validation_by_generation"],
            "generation_mean": row["generation_mean"],
            "best_meta_reward": row["best_expr"],
            "eval_success": {"mean": level0.get("mean"), "se": level0.get("se"),
                             "n": level0.get("n")},
            "eval_by_level": {lvl: {k: v for k, v in figures.items() if k != "record"}
                              for lvl, figures in row["eval"].items()},
            "records": {lvl: figures["record"] for lvl, figures in row["eval"].items()},
            "zero_advantage_generations": row["zero_advantage_generations"],
            "retrained_from_base": _figures(row.get("retrained_from_base")),
        }
    summary = {"env_id": result["env_id"], "budget_inner_runs": config.budget,
               "seed": config.seeds[0], "wall_time_s": result["wall_time_s"],
               "curve": str(output / "curves.png"), "methods": methods}
    tmp = output / "demo.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(output / "demo.json")
    return summary


def _figures(headline: dict[str, Any] | None) -> dict[str, Any] | None:
    """The retrained-from-base headline without its record paths."""
    if not headline:
        return None
    return {k: ({kk: vv for kk, vv in v.items() if kk != "record"} if isinstance(v, dict) else v)
            for k, v in headline.items()}


def explain(summary: dict[str, Any]) -> str:
    """What the user is looking at, in words."""
    lines = [
        "",
        f"Reward discovery on {summary['env_id']} (seed {summary['seed']}): each method trained "
        f"{summary['budget_inner_runs']} GRPO policies in generations of equal size; from the "
        "second generation on, every run continues from the best policy so far (DERL-pop's "
        "population warm start, given to both methods). Scores: success on 200 fixed "
        "validation problems, greedy decoding.",
        "",
        f"{'method':<14}{'validation (best of each generation)':<44}{'L0 eval success':>18}",
    ]
    for name, m in summary["methods"].items():
        curve = " -> ".join(f"{v:.3f}" for v in m["validation_by_generation"])
        e = m["eval_success"]
        lines.append(f"{name:<14}{curve:<44}{e['mean']:>10.3f} ± {e['se']:.3f}")
    derl, outcome = summary["methods"].get("derl"), summary["methods"].get("outcome-only")
    if derl and outcome:
        lines += ["", f"DERL's best Meta-Reward: {derl['best_meta_reward']}"]
        diff = derl["eval_success"]["mean"] - outcome["eval_success"]["mean"]
        verdict = ("above" if diff > 0 else "below" if diff < 0 else "level with")
        lines.append(f"DERL's policy is {abs(diff):.3f} {verdict} outcome-only on L0 in this one "
                     "seed; the proxy benchmark (docs/proxy.md) runs 3 seeds of every method.")
        curve = derl["validation_by_generation"]
        rises = len(curve) > 1 and curve[-1] > curve[0]
        lines.append(
            "DERL's validation " + ("rose" if rises else "did not rise") + " across generations. "
            "Part of any rise is the warm start itself (later policies have trained longer); "
            "outcome-only had the same warm start and budget. Whether the Meta-Optimizer's "
            "learning adds to it is what the proxy benchmark measures against random search.")
        retrained = derl.get("retrained_from_base") or {}
        if "L0" in retrained:
            lines.append(f"DERL's best Meta-Reward retrained once from the base policy: L0 "
                         f"{retrained['L0']['mean']:.3f} ± {retrained['L0']['se']:.3f}.")
    lines += [f"Curves: {summary['curve']}; everything else: demo.json and runs/ beside it."]
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    output = Path(args.output)
    print("derl-bench demo: DERL vs outcome-only reward on derl/Arithmetic-v0 "
          "(tiny models built in code; a few minutes on 2 CPU cores)")
    summary = run_demo(output, workers=args.workers)
    print(explain(summary))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``derl-bench demo``."""
    parser = sub.add_parser(
        "demo", help="run the embedded default job: DERL vs outcome-only on the proxy task",
        description="Fine-tune the tiny model on derl/Arithmetic-v0's reference solutions, "
        "then run DERL and the outcome-only reward at the same budget of inner GRPO runs; "
        "evaluate both best policies on L0/L1/L2 and write records, curves and demo.json.")
    parser.add_argument("--output", default="runs/demo", help="output directory (default runs/demo)")
    parser.add_argument("--workers", type=int, default=2,
                        help="methods run side by side, one process each (default 2)")
    parser.set_defaults(func=_run)

