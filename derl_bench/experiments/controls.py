"""The controls' test: can a task's board rank searchers known to be better or worse than
random search? (the DigitsBalance study, "Controls: can the DigitsBalance board see a better
searcher?")

From a proxy run's ``results.json`` holding ``random`` and the controls at the same seeds, the
primary family (Holm over its comparisons) is ``control-planted - random`` and ``random -
control-negative``, each the picked reward re-trained on L0, paired by seed; ``control-one-part
- random`` is a family of its own (:data:`FAMILIES`). Beside each: the
exact sign-flip test of the per-seed differences (:func:`~derl_bench.experiments.stats.
sign_flip_test`) and the exact McNemar test of "the pick found the class"
(:func:`~derl_bench.experiments.stats.mcnemar_exact`), a pick finding it when its re-trained
L0 mean is at least ``threshold``. ``python -m derl_bench.experiments.controls RESULTS.json``
prints them.

    >>> rows = [{"method": m, "seed": s, "picked": {"L0": {"mean": v}}}
    ...         for s in range(4) for m, v in (("random", 0.3), ("control-negative", 0.05),
    ...                                        ("control-planted", 0.55 + 0.01 * s))]
    >>> found = control_comparisons({"runs": rows}, threshold=0.193)
    >>> [(c["name"], round(c["mean"], 1), c["found"]) for c in found]
    [('control-planted - random', 26.5, [4, 4]), ('random - control-negative', 25.0, [4, 0])]

A proxy run without DERL rows renders this family in its ``summary.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from derl_bench.experiments.stats import holm, mcnemar_exact, paired_difference, sign_flip_test

PRIMARY: tuple[tuple[str, str], ...] = (("control-planted", "random"),
                                        ("random", "control-negative"))
"""The primary family: each pair is (the searcher predicted better, the one predicted worse)."""

FAMILIES: dict[str, tuple[tuple[str, str], ...]] = {
    "primary": PRIMARY,
    "one-part": (("control-one-part", "random"),),
}
"""Each family of comparisons, Holm-corrected within itself: the primary family, and the
one-part control, stated after the primary family's results as its own family of one."""

FOUND_CLASS: dict[str, float] = {"derl/DigitsBalance-v0": 0.193}
"""Per task, the threshold for "the pick found the class". DigitsBalance's is midway between
the two levels its board's picks re-train to (32.7% for a pick that pays ``digit_recall``,
5.9% for any other); a task without one gets no McNemar test."""


def control_pairs(methods: set[str]) -> dict[str, list[tuple[str, str]]]:
    """Per family of :data:`FAMILIES`, its pairs whose two methods are both in ``methods``
    (families with none left out).

    >>> control_pairs({"random", "control-negative", "control-one-part", "derl"})
    {'primary': [('random', 'control-negative')], 'one-part': [('control-one-part', 'random')]}
    """
    found = {name: [(a, b) for a, b in pairs if a in methods and b in methods]
             for name, pairs in FAMILIES.items()}
    return {name: pairs for name, pairs in found.items() if pairs}


def picked_l0(result: Mapping[str, Any]) -> dict[str, dict[int, float]]:
    """Per method, per seed: the picked reward's re-trained L0 mean (a method whose every
    proposal was constant picked nothing, and is left out at that seed)."""
    out: dict[str, dict[int, float]] = {}
    for row in result["runs"]:
        level = ((row.get("picked") or {}).get("L0") or {})
        if "mean" in level:
            out.setdefault(row["method"], {})[int(row["seed"])] = float(level["mean"])
    return out


def control_comparisons(result: Mapping[str, Any], pairs: Sequence[tuple[str, str]] = PRIMARY,
                        threshold: float | None = None) -> list[dict[str, Any]]:
    """Each pair's difference in points (the first method minus the second, paired over the
    seeds both picked at), Holm-corrected together, with the sign-flip test and, given a
    ``threshold``, the McNemar test of finding the class and how many seeds each method found
    it on (``found``)."""
    scores = picked_l0(result)
    rows: list[dict[str, Any]] = []
    for better, worse in pairs:
        seeds = sorted(set(scores.get(better, {})) & set(scores.get(worse, {})))
        a = [100 * scores[better][s] for s in seeds]
        b = [100 * scores[worse][s] for s in seeds]
        if not seeds:
            raise ValueError(f"no seed holds picks of both {better} and {worse}")
        found: dict[str, Any] = {}
        if threshold is not None:
            found_a = [v >= 100 * threshold for v in a]
            found_b = [v >= 100 * threshold for v in b]
            found = {"mcnemar": mcnemar_exact(found_a, found_b),
                     "found": [sum(found_a), sum(found_b)]}
        rows.append({"name": f"{better} - {worse}", "seeds": seeds,
                     **paired_difference(a, b),
                     "sign_flip": sign_flip_test([x - y for x, y in zip(a, b, strict=True)]),
                     **found, "means": [sum(a) / len(a), sum(b) / len(b)]})
    corrected = holm([{k: float(r[k]) for k in ("mean", "se", "ci_low", "ci_high", "mde")}
                      | {"n": int(r["n"])} for r in rows])
    return [{**r, **c} for r, c in zip(rows, corrected, strict=True)]


def control_lines(found: Sequence[Mapping[str, Any]]) -> list[str]:
    """:func:`control_comparisons` in words, one line per comparison."""
    lines = []
    for c in found:
        interval = ("no test" if c.get("holm_low") is None else
                    f"Holm 95% [{c['holm_low']:+.1f}, {c['holm_high']:+.1f}], "
                    f"p_holm {c['p_holm']:.3g}")
        hits = (f"; found the class on {c['found'][0]} and {c['found'][1]} seeds, McNemar p "
                f"{c['mcnemar']['p']:.3g}" if "found" in c else "")
        lines.append(
            f"{c['name']}: {c['mean']:+.1f} points over {c['n']} seeds ({c['means'][0]:.1f} "
            f"vs {c['means'][1]:.1f}); {interval}; MDE {c['mde']:.1f}; sign-flip p "
            f"{c['sign_flip']['p']:.3g}{hits}")
    return lines


__all__ = ["FAMILIES", "FOUND_CLASS", "PRIMARY", "control_comparisons", "control_lines",
           "control_pairs", "picked_l0"]


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    result = json.loads(Path(sys.argv[1]).read_text())
    threshold = FOUND_CLASS.get(result.get("env_id", ""))
    for family, pairs in control_pairs({row["method"] for row in result["runs"]}).items():
        print(f"{family} family (Holm within it):")
        for line in control_lines(control_comparisons(result, pairs, threshold)):
            print(f"  {line}")
