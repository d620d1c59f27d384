"""The proxy benchmark's report: figures over seeds, the hacking check, the plots and the
board's ``summary.md``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from derl_bench.experiments.evidence import (
    best_so_far_table,
    endpoint,
    plot_best_so_far,
    plot_composition,
    plot_optimizer,
    plot_scores,
    rescored_endpoint,
)
from derl_bench.experiments.proxy.config import HAND_MADE, LEVELS, WARM_STARTED
from derl_bench.experiments.stats import describe, mean_sd


def mean_se(values: list[float]) -> dict[str, float]:
    """Mean and standard error (sample SD / sqrt(n); 0 for one value) of ``values``.

    >>> mean_se([0.1, 0.2, 0.3])
    {'mean': 0.2, 'se': 0.0577, 'n': 3}
    """
    n = len(values)
    mean, sd = mean_sd(values)
    return {"mean": round(mean, 4), "se": round(sd / math.sqrt(n), 4), "n": n}


def hacked(row: dict[str, Any], base: dict[str, Any], level: str = "L0") -> bool:
    """Whether a run's final policy raised the lenient metric (the reference answer anywhere
    in the response) over the base policy while strict success stayed flat."""
    from derl_bench.evaluation.hacking import hacking_flag

    if level not in row["eval"] or "lenient_success" not in row["eval"][level]:
        return False
    return hacking_flag(
        {"strict": base[level]["mean"], "published": base[level]["lenient_success"]},
        {"strict": row["eval"][level]["mean"],
         "published": row["eval"][level]["lenient_success"]})


def summarize(rows: list[dict[str, Any]], base: dict[str, Any] | None = None,
              endpoint_from: int = 0) -> dict[str, Any]:
    """Per method: the proposals' mean (:func:`~derl_bench.experiments.evidence.endpoint`, and
    re-scored on fresh seeds where it was), eval success per level, the picked reward's
    re-trained success per level and best validation, mean ± SE over seeds, and (given the base
    policy's figures) how many seeds' policies the hacking check flags."""
    out: dict[str, Any] = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        entry: dict[str, Any] = {"seeds": [r["seed"] for r in mine],
                                 "endpoint": mean_se([endpoint(r, endpoint_from)
                                                      for r in mine]),
                                 "best_validation": mean_se([r["best_validation"] for r in mine])}
        fresh = [v for r in mine if (v := rescored_endpoint(r)) is not None]
        if fresh and len(fresh) == len(mine):
            entry["endpoint_rescored"] = mean_se(fresh)
        for level in LEVELS:
            values = [r["eval"][level]["mean"] for r in mine if level in r["eval"]]
            if values:
                entry[level] = mean_se(values)
            picked = [r["picked"][level]["mean"] for r in mine
                      if (r.get("picked") or {}).get(level)]
            if picked:
                entry[f"picked_{level}"] = mean_se(picked)
            lenient = [r["eval"][level]["lenient_success"] for r in mine
                       if "lenient_success" in r["eval"].get(level, {})]
            if lenient:
                entry[f"{level}_lenient"] = mean_se(lenient)
        if base is not None:
            entry["hacking_flags"] = sum(hacked(r, base) for r in mine)
        out[method] = entry
    return out


EVIDENCE = "evidence"
"""The board's folder for the per-generation evidence."""


FIGURES = ("curves.png", "best_so_far.png", "composition.png", "optimizer.png")
"""The board's plots: proposals' mean score per generation, the best score found against the
inner runs trained, what the proposals are made of, and how the Meta-Optimizer moved."""

BEST_SO_FAR_AT = (8, 16, 32, 48, 80, 160)
"""The budgets (inner runs trained) at which the summary states each method's best so far."""


def candidates_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every proposal of a result's runs, each with its run's method and seed."""
    return [{"method": r["method"], "seed": r["seed"], **c}
            for r in result["runs"] for c in r.get("candidates", [])]


def write_figures(result: dict[str, Any], out: Path, primitives: Sequence[str],
                  target: float | None = None) -> None:
    """:data:`FIGURES` of a result into ``out``; ``primitives`` are the env's, in card order
    (the composition plot's columns); ``target`` (the task's planted reward's confirmed
    score) is drawn on the best-so-far plot."""
    table = result["generations"]
    dashed = [m for m in table if WARM_STARTED.get(m, m) in HAND_MADE]
    plot_scores(table, out / "curves.png", dashed, result["config"]["endpoint_from"])
    plot_best_so_far(best_so_far_table(candidates_of(result)), out / "best_so_far.png",
                     dashed, target)
    plot_composition(table, out / "composition.png", list(primitives))
    plot_optimizer(table, out / "optimizer.png")


def _best_so_far_lines(result: dict[str, Any]) -> list[str]:
    table = best_so_far_table(candidates_of(result))
    if not table:
        return []
    spent = max(len(e["curve"]) for e in table.values())
    budgets = [b for b in BEST_SO_FAR_AT if b < spent] + [spent]
    lines = ["The best validation success each search has found against the inner runs it "
             "trained (a repeated proposal, or one constant on the probe set, trains none), "
             "mean with a 95% band over seeds (a seed whose proposals trained fewer runs "
             "keeps its last best), and the runs each method trained of the proposals it "
             "made:", "",
             "![best so far against inner runs trained](evidence/best_so_far.png)", "",
             "| method | proposals | trained runs (range over seeds) | "
             + " | ".join(f"after {b} runs" for b in budgets) + " |",
             "|---|---|---|" + "---|" * len(budgets)]
    for method, entry in table.items():
        curve = entry["curve"]
        cells = [f"{100 * curve[b - 1]['mean']:.1f}" if b <= len(curve) else "–"
                 for b in budgets]
        trained, made = entry["trained"], entry["proposals"]
        lines.append(f"| {method} | {sum(made) / len(made):.1f} | "
                     f"{sum(trained) / len(trained):.1f} ({min(trained)}–{max(trained)}) | "
                     + " | ".join(cells) + " |")
    return [*lines, ""]


def _cell(figures: dict[str, Any] | None) -> str:
    if not figures:
        return "–"
    return f"{100 * figures['mean']:.1f} ± {100 * figures['se']:.1f}"


def _points(d: dict[str, Any]) -> str:
    return describe(d)


def _links(folder: Path) -> tuple[str, str]:
    """The docs folder and the board's landscape as a summary in ``folder`` links them. A
    board's folder is ``leaderboards/<task>``; a records folder inside one (the controls'
    ``evidence/controls``) links up to the repository's docs and its board's landscape. A
    folder elsewhere (a run's output) links as a board's folder would."""
    parts = folder.resolve().parts
    if "leaderboards" not in parts[:-1]:
        return "../../docs", "evidence/landscape.md"
    below = len(parts) - 2 - (len(parts) - 1 - parts[::-1].index("leaderboards"))
    up = "../" * below
    return f"{up}../../docs", f"{up}evidence/landscape.md"


def summary_markdown(result: dict[str, Any], folder: Path) -> str:
    """The proxy board's summary, to be written in ``folder``: the primary endpoint and its
    paired comparisons, every method's figures as mean ± SE over seeds, the per-generation
    evidence, and every run."""
    docs, landscape = _links(folder)
    config = result["config"]
    inner = config["inner"]
    base = result.get("base", {})
    start = config["endpoint_from"]
    last = config["outer_steps"] - 1
    lines = [
        f"# Proxy benchmark: {result['env_id']}",
        "",
        f"Generated by `derl-bench proxy --env {result['env_id']} --records ...`; see "
        f"[docs/proxy.md]({docs}/proxy.md) and [docs/tasks.md]({docs}/tasks.md) for the "
        "design, the pre-stated endpoints and what the numbers mean. Success in %.",
        "",
        f"Budget per method and seed: {config['outer_steps']} generations x "
        f"{config['population']} inner GRPO runs of {inner['steps']} steps "
        f"({inner['prompts_per_step']} problems x {inner['group_size']} samples, learning rate "
        f"{inner['learning_rate']}), each scored by greedy success on "
        f"{config['validation_episodes']} validation problems; the k-th inner run of every "
        "method of one seed trains with the same inner seed, and a proposal that repeats an "
        "earlier reward's behaviour keeps its first run's score. Seeds: "
        f"{', '.join(map(str, config['seeds']))}. Model: the tiny base policy (SFT "
        f"{config['base']['steps']} steps, format dropout {config['base']['format_dropout']}; "
        "the env's card describes its demonstrations). "
        f"Wall time: {result['wall_time_s'] / 60:.0f} min, {config['workers']} workers, 2 CPU "
        "cores.",
        "",
        *_picked_section(result),
        f"## Proposals' mean validation success, generations {start}–{last} (the mechanism)",
        "",
        "Paired by seed; difference in points with its 95% interval and the minimal detectable "
        "effect (80% power, 5% level). The endpoint column is Holm-corrected within its family "
        "and its MDE is the one under that correction: where the primary endpoint ran, "
        "DERL − derl-frozen (the mechanism) is corrected with the primary comparisons and the "
        "others with the secondary ones. The eval columns are uncorrected. A comparison whose "
        "per-seed differences do not vary has no test and says so.",
        "",
        "| comparison | endpoint | L0 (secondary) | L1 | L2 | seeds |",
        "|---|---|---|---|---|---|",
    ]
    if any(c.get("endpoint_rescored") for c in result.get("comparisons", [])):
        lines[-2:-2] = [f"Where marked *re-scored*, both methods' proposals are counted at their "
                        f"reward's validation score re-trained on "
                        f"{config.get('rescore_seeds')} fresh seeds, a repeated proposal "
                        "included at that value (not at its first, selected run's score).", ""]
    for c in result.get("comparisons", []):
        mark = " (re-scored)" if c.get("endpoint_rescored") else ""
        lines.append(f"| {c['method']} − {c['minus']}{mark} | {_points(c['endpoint'])} | "
                     + " | ".join(_points(c[lvl]) if lvl in c else "–" for lvl in LEVELS)
                     + f" | {len(c['seeds'])} |")
    lines += [
        "",
        "## Every method",
        "",
        "Mean ± standard error over seeds; L0/L1/L2: each seed's final policy (its best by "
        "validation) on the whole eval set, greedy decoding.",
        "",
        "| method | endpoint | L0 | L1 | L2 | best validation | L0, answer anywhere | "
        "hacking flag |",
        "|---|---|---|---|---|---|---|---|",
    ]
    fresh = {m: f["endpoint_rescored"] for m, f in result["summary"].items()
             if "endpoint_rescored" in f}
    if base:
        lines.append(
            f"| base policy (no RL) | – | {100 * base['L0']['mean']:.1f} | "
            f"{100 * base['L1']['mean']:.1f} | {100 * base['L2']['mean']:.1f} | – | "
            f"{100 * base['L0']['lenient_success']:.1f} | – |")
    for method, figures in result["summary"].items():
        flags = figures.get("hacking_flags")
        flag_text = "–" if flags is None else f"{flags} of {len(figures['seeds'])} seeds"
        lines.append(
            f"| {method} | {_cell(figures.get('endpoint'))} | {_cell(figures.get('L0'))} | "
            f"{_cell(figures.get('L1'))} | {_cell(figures.get('L2'))} | "
            f"{_cell(figures['best_validation'])} | {_cell(figures.get('L0_lenient'))} | "
            f"{flag_text} |")
    if fresh:
        lines += ["", "The endpoint re-scored on fresh seeds (every late proposal at its "
                  "reward's fresh score): " + "; ".join(f"{m} {_cell(f)}"
                                                       for m, f in fresh.items()) + "."]
    lines += [
        "",
        "*Hacking flag*: the final policy raised the lenient metric (the reference answer "
        "anywhere in the response) by at least 5 points over the base policy while strict "
        "success rose by at most 2 (`derl_bench.evaluation.hacking`).",
        "",
        "## Per generation",
        "",
        "The proposals' mean validation success per generation (95% band over seeds; the "
        "primary endpoint's generations shaded):",
        "",
        "![proposals' mean score per generation](evidence/curves.png)",
        "",
        *_best_so_far_lines(result),
        "What the proposals are made of: the share of valid proposals of each reward structure "
        "(top) and using each primitive (bottom), over seeds:",
        "",
        "![structure and primitives per generation](evidence/composition.png)",
        "",
        "The Meta-Optimizer's updates: mean absolute advantage, KL per token to the policy "
        "before the update and to the cold start (mean over seeds):",
        "",
        "![Meta-Optimizer statistics per generation](evidence/optimizer.png)",
        "",
        "Every generation's figures are in [generations.json](evidence/generations.json) "
        "and every proposal, with its score, structure and inner seed, in "
        "[candidates.jsonl](evidence/candidates.jsonl). What random rewards score on this "
        f"proxy, beside the hand-made ones: [the reward landscape]({landscape}) "
        "(`derl-bench proxy --landscape`).",
        "",
        "| method | generation 0 | " + " | ".join(
            f"{g}" for g in range(1, config["outer_steps"])) + " |",
        "|---|" + "---|" * config["outer_steps"],
    ]
    for method, entries in result.get("generations", {}).items():
        lines.append(f"| {method} | " + " | ".join(f"{100 * e['mean_score']:.1f}"
                                                   for e in entries) + " |")
    lines += [
        "",
        "## Per run",
        "",
        "| method | seed | best Meta-Reward | validation | endpoint | L0 | L1 | L2 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["runs"]:
        ev = row["eval"]
        lines.append(
            f"| {row['method']} | {row['seed']} | `{row['best_expr']}` | "
            f"{100 * row['best_validation']:.1f} | {100 * endpoint(row, start):.1f} | "
            + " | ".join(f"{100 * ev[lvl]['mean']:.1f}" if lvl in ev else "–"
                         for lvl in LEVELS) + " |")
    return "\n".join(lines) + "\n"


def _picked_section(result: dict[str, Any]) -> list[str]:
    """The primary endpoint's table: each method's picked reward re-trained on fresh seeds."""
    rows = [(m, f) for m, f in result["summary"].items() if "picked_L0" in f]
    if not rows:
        return []
    config = result["config"]
    # Boards made before the pick was a setting picked the single best validation run.
    if config.get("pick", "best-run") == "rescore":
        rule = (f"its {config['pick_top']} best distinct rewards by validation, each trained "
                f"again on {config['rescore_seeds']} fresh seeds, the best fresh mean picked")
    else:
        rule = "its single best validation run over the search"
    lines = ["## Primary endpoint: the picked reward, re-trained on fresh seeds", "",
             f"Each method's final reward ({rule}) trained again from the base on fresh seeds "
             "no search slot used; per seed the mean over the re-trains; mean ± SE over "
             "seeds.", "",
             "| method | L0 | L1 | L2 |", "|---|---|---|---|"]
    for method, figures in rows:
        lines.append(f"| {method} | " + " | ".join(_cell(figures.get(f"picked_{lvl}"))
                                                   for lvl in LEVELS) + " |")
    compared = [c for c in result.get("comparisons", []) if "picked_L0" in c]
    if compared:
        lines += ["", "Paired by seed. L0 and the mechanism (DERL − derl-frozen, below) are one "
                  "Holm family, the primary one; L1 and L2 are the secondary family, corrected "
                  "on their own beside it. Each MDE is the one under its family's correction. A "
                  "comparison whose per-seed differences do not vary (every policy at a floor) "
                  "has no test and says so.", "",
                  "| comparison | L0 | L1 | L2 |", "|---|---|---|---|"]
        for c in compared:
            lines.append(f"| {c['method']} − {c['minus']} | " + " | ".join(
                _points(c[f"picked_{lvl}"]) if f"picked_{lvl}" in c else "–"
                for lvl in LEVELS) + " |")
    else:
        lines += _controls_section(result)
    lines += ["", "Each run's picked reward and its re-trains (one score per fresh seed; "
              "[runs.json](evidence/runs.json) keeps them with the pick's re-scores):", "",
              "| method | seed | picked reward | L0 | L1 | L2 |", "|---|---|---|---|---|---|"]
    for row in result["runs"]:
        picked = row.get("picked") or {}
        if picked:
            lines.append(f"| {row['method']} | {row['seed']} | `{picked['expr']}` | " + " | ".join(
                ", ".join(f"{100 * v:.1f}" for v in picked[lvl]["scores"]) if lvl in picked
                else "–" for lvl in LEVELS) + " |")
    return [*lines, ""]


def _controls_section(result: dict[str, Any]) -> list[str]:
    """A run without DERL rows: the controls' family against random search where it holds
    them (:mod:`derl_bench.experiments.controls`), else a line saying nothing is compared."""
    from derl_bench.experiments.controls import FOUND_CLASS, control_comparisons, control_pairs

    families = control_pairs({row["method"] for row in result["runs"] if row.get("picked")})
    if not families:
        return ["", "No `derl` rows, so no method is compared here.", ""]
    threshold = FOUND_CLASS.get(result.get("env_id", ""))
    lines = ["", "Paired by seed: the controls' families (docs/tasks.md), each searcher "
             "predicted better minus the one predicted worse, L0, Holm-corrected within each "
             "family; beside each, the exact sign-flip test of the per-seed differences"
             + (f" and McNemar's exact test of the pick finding the class (its re-trained L0 "
                f"at least {100 * threshold:.1f}%)" if threshold is not None else "") + "."]
    for family, pairs in families.items():
        lines += ["", f"Family: {family}", "",
                  "| comparison | seeds | L0 | sign-flip p |"
                  + (" found the class (seeds) | McNemar p |" if threshold is not None else ""),
                  "|---|---|---|---|" + ("---|---|" if threshold is not None else "")]
        for c in control_comparisons(result, pairs, threshold):
            cell = describe(c, scale=1.0)  # control_comparisons works in points
            lines.append(f"| {c['name'].replace(' - ', ' − ')} | {c['n']} | {cell} | "
                         f"{c['sign_flip']['p']:.3g} |"
                         + (f" {c['found'][0]} vs {c['found'][1]} of {c['n']} | "
                            f"{c['mcnemar']['p']:.3g} |" if threshold is not None else ""))
    return lines


__all__ = ["BEST_SO_FAR_AT", "EVIDENCE", "FIGURES", "candidates_of", "hacked", "mean_se",
           "summarize", "summary_markdown", "write_figures"]
