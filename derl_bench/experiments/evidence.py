"""The proxy benchmark's evidence: the pre-stated endpoint, paired comparisons, and what each
search method proposed generation by generation.

The **primary endpoint** (stated in ``docs/proxy.md`` before the paper-budget run) is a
method's mean validation score of its proposals over generations ``endpoint_from`` to the last:
a search that learns proposes better rewards later, so its late proposals score higher than
those of a control that cannot learn. It is compared as DERL minus ``derl-frozen`` (and minus
random search and island evolution), paired by seed, with a 95% t interval and the minimal
detectable effect (:func:`~derl_bench.experiments.stats.paired_difference`). The
**secondary endpoint** is the final policy's eval success per level, compared the same way.

Per generation and method, over seeds: the proposals' mean score with a 95% band; the share of
proposals of each reward structure (linear, bounded, veto, unbounded) and using each
primitive, and each structure's mean score; the Meta-Optimizer's advantage statistics and KL
(absent for methods without one).

    >>> endpoint({"generation_mean": [0.0, 0.1, 0.3]}, 1)
    0.2
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from derl_bench.experiments.stats import holm, mean_ci, paired_difference
from derl_bench.meta.report import STRUCTURE_KINDS as STRUCTURES

OPTIMIZER_STATS = ("meta/advantage_abs_mean", "meta/advantage_max", "meta/kl",
                   "meta/kl_from_start")
LEVELS = ("L0", "L1", "L2")


def endpoint(row: dict[str, Any], start: int) -> float:
    """The primary endpoint of one run: the mean of its generations' mean proposal scores
    from generation ``start`` on (all generations when the run is shorter)."""
    values = row["generation_mean"][start:] or row["generation_mean"]
    return round(sum(values) / len(values), 6)


def rescored_endpoint(row: dict[str, Any]) -> float | None:
    """The run's mechanism endpoint with every proposal at its reward's score re-trained on
    fresh seeds (:func:`~derl_bench.experiments.rescore.fresh_endpoint`), where it was
    re-scored."""
    value = (row.get("rescored") or {}).get("endpoint")
    return None if value is None else float(value)


def comparisons(rows: Sequence[dict[str, Any]], methods: Sequence[str], start: int,
                subject: str = "derl") -> list[dict[str, Any]]:
    """``subject`` minus every other method: the endpoint and each level's eval success,
    paired by seed over the seeds both ran. Where both methods' proposals were re-scored on
    fresh seeds (the mechanism's, :data:`MECHANISM`), the endpoint compares the re-scored
    values (``endpoint_rescored`` is then true)."""
    by = {(r["method"], r["seed"]): r for r in rows}
    out = []
    for other in methods:
        if other == subject:
            continue
        seeds = sorted(s for m, s in by if m == subject and (other, s) in by)
        if not seeds:
            continue
        mine, theirs = [by[subject, s] for s in seeds], [by[other, s] for s in seeds]
        fresh = all(rescored_endpoint(r) is not None for r in mine + theirs)

        def value(row: dict[str, Any], fresh: bool = fresh) -> float:
            found = rescored_endpoint(row) if fresh else None
            return endpoint(row, start) if found is None else found

        entry: dict[str, Any] = {"method": subject, "minus": other, "seeds": seeds,
                                 "endpoint_rescored": fresh,
                                 "endpoint": paired_difference([value(r) for r in mine],
                                                               [value(r) for r in theirs])}
        for level in LEVELS:
            if all(level in r["eval"] for r in mine + theirs):
                entry[level] = paired_difference([r["eval"][level]["mean"] for r in mine],
                                                 [r["eval"][level]["mean"] for r in theirs])
            if all((r.get("picked") or {}).get(level) for r in mine + theirs):
                # The reward each method picked, re-trained on fresh seeds: what a user gets.
                entry[f"picked_{level}"] = paired_difference(
                    [r["picked"][level]["mean"] for r in mine],
                    [r["picked"][level]["mean"] for r in theirs])
        out.append(entry)
    return correct_together(out)


MECHANISM = ("derl", "derl-frozen")
"""The mechanism comparison: DERL minus its frozen copy on the proposals' mean score."""


CORRECTED = ("endpoint", "picked_L0", "picked_L1", "picked_L2")
"""The comparisons of a board that are Holm-corrected (:func:`family`)."""


def family(entry: dict[str, Any], key: str, primary_picked: bool) -> str:
    """Which Holm family a board's comparison ``key`` of ``entry`` belongs to.

    On a board with the primary endpoint (the picked reward re-trained, ``primary_picked``)
    the *primary* family is each method's picked reward on L0 and the mechanism (DERL minus
    derl-frozen on the proposals' mean); the picked reward on L1 and L2 and the proposals'
    mean against the other methods are the *secondary* family, reported beside it, so that
    they cost the primary comparisons no power. Without the primary endpoint (the arithmetic
    proxy, ``docs/proxy.md``) the proposals' mean against every method is the one family.

    >>> family({"method": "derl", "minus": "derl-frozen"}, "endpoint", True)
    'primary'
    >>> family({"method": "derl", "minus": "random"}, "endpoint", True)
    'secondary'
    >>> family({"method": "derl", "minus": "random"}, "picked_L2", True)
    'secondary'
    >>> family({"method": "derl", "minus": "random"}, "endpoint", False)
    'primary'
    """
    if not primary_picked or key == "picked_L0":
        return "primary"
    if key == "endpoint" and (entry["method"], entry["minus"]) == MECHANISM:
        return "primary"
    return "secondary"


def correct_together(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` with Holm's adjusted p-values, intervals and MDEs added to every comparison
    named in :data:`CORRECTED`, each :func:`family` corrected on its own; a comparison without
    a test (zero variance: e.g. every policy at a floor) is left out of its family and says so
    (:func:`~derl_bench.experiments.stats.holm`)."""
    primary_picked = any("picked_L0" in e for e in entries)
    keys = [(i, k) for i, e in enumerate(entries) for k in CORRECTED
            if k in e and e[k]["n"] >= 2]
    for name in ("primary", "secondary"):
        mine = [(i, k) for i, k in keys if family(entries[i], k, primary_picked) == name]
        for (i, k), adjusted in zip(mine, holm([entries[i][k] for i, k in mine]), strict=True):
            entries[i][k] = {**adjusted, "holm_family": name}
    return entries


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _share(values: list[bool]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def generation_table(rows: Sequence[dict[str, Any]], primitives: Sequence[str],
                     ) -> dict[str, list[dict[str, Any]]]:
    """Per method, one entry per generation, over seeds: the proposals' mean score (mean and
    95% band of the seeds' generation means), the share of valid *distinct* proposals (repeats
    of an earlier reward left out) of each structure and using each primitive, the share that
    repeated an earlier reward, and the mean of each Meta-Optimizer statistic the runs
    logged."""
    table: dict[str, list[dict[str, Any]]] = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        entries = []
        for g in range(max(len(r["generation_mean"]) for r in mine)):
            means = [r["generation_mean"][g] for r in mine if g < len(r["generation_mean"])]
            mean, low, high = mean_ci(means)
            proposals = [c for r in mine for c in r.get("candidates", [])
                         if c["generation"] == g]
            # Shares count distinct proposals: a repeat of an earlier reward measures how often
            # the search repeats itself (``repeat_share``), not what it proposes.
            valid = [c for c in proposals if c.get("structure") and not c.get("repeat")]
            entry: dict[str, Any] = {
                "generation": g, "seeds": len(means), "mean_score": round(mean, 4),
                "ci_low": round(low, 4), "ci_high": round(high, 4),
                "proposals": len(proposals),
                "valid_share": _share([bool(c.get("structure")) for c in proposals]),
                "repeat_share": _share([bool(c.get("repeat")) for c in proposals]),
                "constant_share": _share([c["status"] == "constant" for c in proposals]),
                "structure_share": {k: _share([c["structure"] == k for c in valid])
                                    for k in STRUCTURES},
                "structure_score": {k: _mean([c["score"] for c in valid if c["structure"] == k
                                              and c.get("score") is not None])
                                    for k in STRUCTURES},
                "primitive_share": {p: _share([p in (c.get("primitives") or [])
                                               for c in valid]) for p in primitives},
            }
            for stat in OPTIMIZER_STATS:
                values = [r["generations"][g][stat] for r in mine
                          if g < len(r.get("generations", [])) and stat in r["generations"][g]]
                if values:
                    entry[stat] = round(sum(values) / len(values), 6)
            entries.append(entry)
        table[method] = entries
    return table


def trains_a_run(candidate: dict[str, Any]) -> bool:
    """Whether a proposal trained an inner run: not a repeat of an earlier proposal (it keeps
    that run's score) and not constant on the probe set (status ``constant``: every episode
    would get the same reward, so GRPO has no advantage to follow and nothing is trained).
    A run that failed was trained (and scores 0).

    >>> trains_a_run({"status": "scored"}), trains_a_run({"status": "constant"})
    (True, False)
    >>> trains_a_run({"status": "scored", "repeat": True})
    False
    """
    return not candidate.get("repeat") and candidate.get("status") != "constant"


def best_so_far_curves(candidates: Sequence[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """Per method, one curve per seed: the best validation score its search has found after
    each inner run it trained, in the order it proposed (:func:`trains_a_run`: a repeated or
    constant proposal trains none; a failed run scores 0)::

        >>> best_so_far_curves([
        ...     {"method": "m", "seed": 0, "generation": 0, "index": 0, "score": 0.2},
        ...     {"method": "m", "seed": 0, "generation": 0, "index": 1, "score": 0.1},
        ...     {"method": "m", "seed": 0, "generation": 1, "index": 0, "score": 0.5,
        ...      "repeat": True},
        ...     {"method": "m", "seed": 0, "generation": 1, "index": 1, "score": 0.0,
        ...      "status": "constant"},
        ...     {"method": "m", "seed": 0, "generation": 1, "index": 2, "score": None}])
        {'m': [[0.2, 0.2, 0.2]]}
    """
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for c in candidates:
        runs.setdefault(c["method"], {}).setdefault(int(c["seed"]), []).append(c)
    curves: dict[str, list[list[float]]] = {}
    for method, seeds in runs.items():
        for seed in sorted(seeds):
            best, curve = 0.0, []
            for c in sorted(seeds[seed], key=lambda c: (c["generation"], c["index"])):
                if not trains_a_run(c):
                    continue
                best = max(best, float(c.get("score") or 0.0))
                curve.append(best)
            curves.setdefault(method, []).append(curve)
    return curves


def runs_to_reach(curve: Sequence[float], target: float) -> int | None:
    """How many inner runs a search spent before its best score first reached ``target``
    (``None``: it never did).

    >>> runs_to_reach([0.2, 0.6, 0.9], 0.6), runs_to_reach([0.2], 0.6)
    (2, None)
    """
    return next((k + 1 for k, best in enumerate(curve) if best >= target), None)


def best_so_far_table(candidates: Sequence[dict[str, Any]], target: float | None = None,
                      ) -> dict[str, dict[str, Any]]:
    """Per method, over seeds: the mean best-so-far score with its 95% band after each
    trained inner run, each seed's proposals and trained runs, and, given ``target`` (the
    planted reward's confirmed score), each seed's trained runs to reach it. The curve runs
    to the most runs any seed trained; a seed whose budget of proposals trained fewer keeps
    its last best (its search had ended), and one that trained none counts 0."""
    proposals: dict[str, dict[int, int]] = {}
    for c in candidates:
        seeds = proposals.setdefault(c["method"], {})
        seeds[int(c["seed"])] = seeds.get(int(c["seed"]), 0) + 1
    out: dict[str, dict[str, Any]] = {}
    for method, curves in best_so_far_curves(candidates).items():
        spent = max(len(c) for c in curves)
        points = []
        for k in range(spent):
            mean, low, high = mean_ci([c[min(k, len(c) - 1)] if c else 0.0 for c in curves])
            points.append({"runs": k + 1, "mean": round(mean, 4), "ci_low": round(low, 4),
                           "ci_high": round(high, 4)})
        out[method] = {"curve": points, "seeds": len(curves),
                       "proposals": [proposals[method][s] for s in sorted(proposals[method])],
                       "trained": [len(c) for c in curves]}
        if target is not None:
            out[method]["runs_to_reach"] = [runs_to_reach(c, target) for c in curves]
    return out


def planted_target(evidence: Path) -> float | None:
    """The planted reward's confirmed score (its mean over the planted check's confirmation
    seeds) from a task board's ``planted.json``; ``None`` where the board has none."""
    import json

    path = evidence / "planted.json"
    if not path.is_file():
        return None
    planted = json.loads(path.read_text())
    scores = planted["confirm"]["scores"][planted["planted"]]
    return sum(scores) / len(scores)


def plot_best_so_far(table: dict[str, dict[str, Any]], path: Path, dashed: Sequence[str] = (),
                     target: float | None = None) -> None:
    """The best validation score found so far against the inner runs trained, one line a
    method with its 95% band over seeds; ``target`` (the planted reward's confirmed score) as
    a horizontal line."""
    def mark_target(ax: Any) -> None:
        if target is not None:
            ax.axhline(100 * target, color="0.4", linestyle=":", label="planted reward")

    _plot_bands(path, {method: ([p["runs"] for p in e["curve"]], e["curve"], "mean")
                       for method, e in table.items()},
                dashed, "inner runs trained", "best validation success so far, %", "",
                mark_target)


def _plot_bands(path: Path, series: dict[str, tuple[list[int], list[dict[str, Any]], str]],
                dashed: Sequence[str], xlabel: str, ylabel: str, marker: str,
                decorate: Any = None) -> None:
    """One line per method (``x``, its points and the key of their value, each point with
    ``ci_low`` and ``ci_high``) with its band, in % ; ``decorate(ax)`` adds the rest."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for method, (x, points, key) in series.items():
        line, = ax.plot(x, [100 * p[key] for p in points],
                        "--" if method in dashed else "-", marker=marker or None, label=method)
        ax.fill_between(x, [100 * p["ci_low"] for p in points],
                        [100 * p["ci_high"] for p in points], color=line.get_color(),
                        alpha=0.15, linewidth=0)
    if decorate is not None:
        decorate(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend(ax, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _legend(ax: Any, **kwargs: Any) -> None:
    # A run with one generation, or no learning method, draws no labelled line on some axes:
    # matplotlib would warn for an empty legend.
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_scores(table: dict[str, list[dict[str, Any]]], path: Path, dashed: Sequence[str] = (),
                endpoint_from: int | None = None) -> None:
    """The proposals' mean validation score per generation, one line a method with its 95%
    band over seeds; ``dashed`` methods (hand-made rewards) are dashed; the endpoint's
    generations are shaded."""
    def shade_endpoint(ax: Any) -> None:
        if endpoint_from is not None:
            ax.axvspan(endpoint_from - 0.5, max(len(e) for e in table.values()) - 0.5,
                       color="0.9", zorder=0, label="primary endpoint")

    _plot_bands(path, {method: ([e["generation"] for e in entries], entries, "mean_score")
                       for method, entries in table.items()},
                dashed, "generation", "proposals' mean validation success, %", ".",
                shade_endpoint)


def plot_composition(table: dict[str, list[dict[str, Any]]], path: Path,
                     primitives: Sequence[str]) -> None:
    """Per method (a column each): the share of valid proposals of each reward structure per
    generation (top), the share using each primitive (bottom)."""
    plt = _plt()
    methods = list(table)
    fig, axes = plt.subplots(2, len(methods), figsize=(2.6 * len(methods), 5.2),
                             sharey="row", squeeze=False)
    for col, method in enumerate(methods):
        entries = table[method]
        x = [e["generation"] for e in entries]
        bottom = [0.0] * len(entries)
        top = axes[0][col]
        for kind in STRUCTURES:
            share = [e["structure_share"][kind] for e in entries]
            top.bar(x, share, bottom=bottom, label=kind, width=0.9)
            bottom = [b + s for b, s in zip(bottom, share, strict=True)]
        top.set_title(method, fontsize=9)
        low = axes[1][col]
        for name in primitives:
            low.plot(x, [e["primitive_share"][name] for e in entries], label=name)
        low.set_xlabel("generation")
    axes[0][0].set_ylabel("share by structure")
    axes[1][0].set_ylabel("share using primitive")
    _legend(axes[0][-1], fontsize=6)
    _legend(axes[1][-1], fontsize=5)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_optimizer(table: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """The Meta-Optimizer's per-generation statistics, mean over seeds: the mean absolute
    advantage of its update, and KL per token to the pre-update policy and to the cold start."""
    plt = _plt()
    learners = {m: e for m, e in table.items() if any(OPTIMIZER_STATS[0] in x for x in e)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    for method, entries in learners.items():
        x = [e["generation"] for e in entries if OPTIMIZER_STATS[0] in e]
        left.plot(x, [e[OPTIMIZER_STATS[0]] for e in entries if OPTIMIZER_STATS[0] in e],
                  marker=".", label=method)
        for stat, style in (("meta/kl", ":"), ("meta/kl_from_start", "-")):
            right.plot(x, [e.get(stat, 0.0) for e in entries if OPTIMIZER_STATS[0] in e],
                       style, label=f"{method}: {stat.removeprefix('meta/')}")
    left.set_xlabel("generation")
    left.set_ylabel("mean |advantage|")
    right.set_xlabel("generation")
    # A converged Meta-Optimizer sits hundreds of nats from its cold start on its own tokens,
    # while an update moves it by thousandths: only a log scale shows both.
    right.set_yscale("symlog", linthresh=1e-3)
    right.set_ylabel("KL per token (symmetric log scale)")
    _legend(left, fontsize=7)
    _legend(right, fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


__all__ = ["CORRECTED", "MECHANISM", "OPTIMIZER_STATS", "STRUCTURES", "comparisons",
           "correct_together", "endpoint", "family", "generation_table", "rescored_endpoint",
           "best_so_far_curves", "best_so_far_table", "planted_target", "plot_best_so_far",
           "plot_composition", "plot_optimizer", "plot_scores", "runs_to_reach", "trains_a_run"]
