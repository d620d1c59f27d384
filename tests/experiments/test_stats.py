"""The boards' statistics: no p-value without a spread, Holm families, MDEs under the correction."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from derl_bench.experiments.evidence import comparisons, generation_table
from derl_bench.experiments.proxy.report import summarize, summary_markdown
from derl_bench.experiments.stats import (
    corrected_mde,
    describe,
    holm,
    paired_difference,
    t_p_value,
)

SEEDS = (0, 1, 2)


def test_a_difference_without_spread_has_no_p_value():
    # 0.1 points on every seed: no t statistic exists, so no test, not p = 0.
    assert t_p_value(-0.001, 0.0, 3) is None
    assert t_p_value(0.0, 0.0, 3) is None
    assert t_p_value(0.2, 0.1, 1) is None
    p = t_p_value(0.15, 0.0289, 4)
    assert p is not None and 0.01 < p < 0.02


def test_holm_leaves_an_untestable_comparison_out_of_its_family():
    real = paired_difference([0.5, 0.6, 0.7, 0.6], [0.4, 0.4, 0.5, 0.5])
    floor = paired_difference([0.0] * 4, [0.001] * 4)
    assert floor["se"] == 0
    alone, = holm([real])
    with_floor, untested = holm([real, floor])
    # The floor costs the real comparison nothing: it is corrected as if alone.
    assert with_floor["p_holm"] == alone["p_holm"] and with_floor["family"] == 1
    assert (with_floor["holm_low"], with_floor["holm_high"]) == (alone["holm_low"],
                                                               alone["holm_high"])
    assert untested["p"] is None and untested["p_holm"] is None
    assert untested["holm_low"] is None and "zero variance" in untested["test"]
    assert describe(untested) == "-0.1 (no test: zero variance)"


def test_the_mde_a_corrected_comparison_reports_is_the_one_under_the_correction():
    a = paired_difference([0.5, 0.6, 0.7, 0.6], [0.4, 0.4, 0.5, 0.5])
    b = paired_difference([0.5, 0.6, 0.7, 0.6], [0.5, 0.7, 0.6, 0.6])
    c = paired_difference([0.3, 0.6, 0.7, 0.2], [0.5, 0.7, 0.6, 0.6])
    corrected = holm([a, b, c])
    for raw, d in zip((a, b, c), corrected, strict=True):
        assert d["mde_holm"] == corrected_mde(raw, 3) > raw["mde"]
        assert f"MDE {100 * d['mde_holm']:.1f} under the correction" in describe(d)
        assert f"MDE {100 * raw['mde']:.1f} " not in describe(d)


def _row(method, seed, late, picked, l0=0.5):
    """A run with per-seed picked re-train scores (``picked``: level -> mean)."""
    return {"method": method, "seed": seed, "generation_mean": [0.0, late],
            "generation_best": [0.0, late], "validation_by_generation": [0.0, late],
            "best_expr": "outcome", "best_validation": late, "candidates": [],
            "generations": [{}, {}], "eval": {lvl: {"mean": l0} for lvl in ("L0", "L1", "L2")},
            "picked": {"expr": "outcome", **{lvl: {"scores": [v], "mean": v}
                                             for lvl, v in picked.items()}}}


def _board() -> list[dict]:
    """Four methods on three seeds; L1 is a floor (0 for every policy), and on L2 outcome
    scores 0.1 points on every seed where every search scores 0."""
    l0 = {"derl": [0.90, 0.86, 0.88], "derl-frozen": [0.80, 0.91, 0.84],
          "random": [0.91, 0.89, 0.90], "outcome": [0.77, 0.76, 0.78]}
    late = {"derl": [0.40, 0.36, 0.44], "derl-frozen": [0.20, 0.26, 0.22],
            "random": [0.25, 0.24, 0.27], "outcome": [0.76, 0.76, 0.77]}
    return [_row(m, s, late[m][s], {"L0": l0[m][s], "L1": 0.0,
                                    "L2": 0.001 if m == "outcome" else 0.0})
            for m in l0 for s in SEEDS]


def test_the_primary_family_is_the_picked_l0_and_the_mechanism():
    rows = _board()
    methods = ["derl", "derl-frozen", "random", "outcome"]
    found = {c["minus"]: c for c in comparisons(rows, methods, 1)}
    primary = [found[m]["picked_L0"] for m in ("derl-frozen", "random", "outcome")]
    primary.append(found["derl-frozen"]["endpoint"])
    # Recomputed here from the per-seed values: the family is exactly these four.
    by = {(r["method"], r["seed"]): r for r in rows}
    raw = [paired_difference([by["derl", s]["picked"]["L0"]["mean"] for s in SEEDS],
                             [by[m, s]["picked"]["L0"]["mean"] for s in SEEDS])
           for m in ("derl-frozen", "random", "outcome")]
    raw.append(paired_difference([by["derl", s]["generation_mean"][1] for s in SEEDS],
                                 [by["derl-frozen", s]["generation_mean"][1] for s in SEEDS]))
    for got, want in zip(primary, holm(raw), strict=True):
        assert got["holm_family"] == "primary" and got["family"] == 4
        assert (got["p_holm"], got["holm_low"], got["holm_high"], got["mde_holm"]) == (
            want["p_holm"], want["holm_low"], want["holm_high"], want["mde_holm"])
    # L1/L2 and the other endpoints are corrected apart; floors have no test at all.
    assert found["random"]["endpoint"]["holm_family"] == "secondary"
    assert found["random"]["picked_L2"]["holm_family"] == "secondary"
    assert found["random"]["picked_L1"]["p_holm"] is None
    assert found["outcome"]["picked_L2"]["p_holm"] is None


def _result(rows: list[dict]) -> dict:
    config = {"outer_steps": 2, "population": 8, "validation_episodes": 500, "seeds": list(SEEDS),
              "endpoint_from": 1, "workers": 2, "base": {"steps": 10, "format_dropout": 0.0},
              "inner": {"steps": 20, "prompts_per_step": 8, "group_size": 8,
                        "learning_rate": 3e-4}}
    methods = ["derl", "derl-frozen", "random", "outcome"]
    return {"config": config, "env_id": "derl/DigitsHack-v0", "wall_time_s": 60.0, "base": {},
            "summary": summarize(rows, None, 1), "comparisons": comparisons(rows, methods, 1),
            "generations": generation_table(rows, ["outcome"]), "runs": rows}


def test_the_board_says_no_test_for_a_floor_and_prints_the_corrected_mde(tmp_path):
    result = _result(_board())
    text = summary_markdown(result, tmp_path)
    line = next(x for x in text.splitlines() if x.startswith("| derl − outcome | +11"))
    assert "Holm p 0;" not in line and "Holm p 0 " not in line
    assert line.count("no test: zero variance") == 2  # L1 (0 vs 0) and L2 (0 vs 0.1)
    c = next(c for c in result["comparisons"] if c["minus"] == "outcome")
    assert c["picked_L0"]["mde_holm"] == pytest.approx(corrected_mde(c["picked_L0"], 4))
    assert f"MDE {100 * c['picked_L0']['mde_holm']:.1f} under the correction" in line


def test_the_optimizer_plot_of_a_board_without_a_learning_method_draws_without_a_warning(
        tmp_path):
    import warnings

    from derl_bench.experiments.evidence import plot_optimizer

    table = {"random": [{"generation": 0, "mean_score": 0.1}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns for a legend with nothing in it
        plot_optimizer(table, tmp_path / "optimizer.png")
    assert (tmp_path / "optimizer.png").stat().st_size > 0


def _brute_sign_flip(differences: list[float]) -> float:
    observed = abs(sum(differences))
    patterns = list(itertools.product([-1, 1], repeat=len(differences)))
    extreme = sum(abs(sum(s * d for s, d in zip(signs, differences, strict=True)))
                  >= observed - 1e-9 for signs in patterns)
    return extreme / len(patterns)


@pytest.mark.parametrize("differences", [
    [28.0, 28.0, 0.0, -28.0, 28.0, 0.0, 28.0, 28.0, 0.0, 28.0],  # a board's trinomial seeds
    [0.3, -1.2, 2.5, 0.7, 1.1],
    [5.0, 5.0, 5.0, 5.0],
    [-3.0, 1.0, 1.0, 1.0],
])
def test_the_sign_flip_test_is_exact_on_small_cases(differences):
    from derl_bench.experiments.stats import sign_flip_test

    result = sign_flip_test(differences)
    nonzero = [d for d in differences if d != 0]
    # zeros carry no sign: the patterns are those of the nonzero differences
    assert result["exact"] and result["patterns"] == 2 ** len(nonzero)
    assert result["p"] == pytest.approx(_brute_sign_flip(nonzero))


def test_the_sign_flip_test_draws_patterns_beyond_its_exact_size():
    from derl_bench.experiments.stats import EXACT_SIGN_FLIPS, sign_flip_test

    differences = [1.0] * (EXACT_SIGN_FLIPS + 4)
    result = sign_flip_test(differences, seed=3)
    assert not result["exact"]
    # every sign positive is 1 pattern in 2^20, twice for both signs: p is near its floor
    assert result["p"] < 1e-3 and result == sign_flip_test(differences, seed=3)
    mixed = [1.0, -1.0] * ((EXACT_SIGN_FLIPS + 4) // 2)
    assert sign_flip_test(mixed)["p"] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(("only_a", "only_b", "same"), [(0, 0, 10), (7, 0, 3), (5, 2, 3),
                                                        (1, 6, 0), (3, 3, 4)])
def test_the_exact_mcnemar_test_is_the_binomial_tail_of_the_discordant_seeds(only_a, only_b,
                                                                             same):
    from derl_bench.experiments.stats import mcnemar_exact

    a = [True] * only_a + [False] * only_b + [True] * same
    b = [False] * only_a + [True] * only_b + [True] * same
    result = mcnemar_exact(a, b)
    assert (result["only_a"], result["only_b"]) == (only_a, only_b)
    n = only_a + only_b
    # the two-sided exact binomial test at 1/2: outcomes no more likely than the observed
    observed = math.comb(n, only_a) / 2 ** n
    p = sum(math.comb(n, i) / 2 ** n for i in range(n + 1)
            if math.comb(n, i) / 2 ** n <= observed + 1e-12)
    assert result["p"] == pytest.approx(min(1.0, p))
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar_exact(a, b[:-1])


def test_holm_p_is_the_adjustment_holm_gives_paired_differences():
    from derl_bench.experiments.stats import holm, holm_p, paired_difference, t_p_value

    rng = np.random.default_rng(0)
    for _ in range(20):
        family = [paired_difference(rng.normal(0.3 * k, 1.0, 6).tolist(), [0.0] * 6)
                  for k in range(4)]
        ps = [t_p_value(d["mean"], d["se"], int(d["n"])) for d in family]
        assert [round(p, 5) for p in holm_p(ps)] == [r["p_holm"] for r in holm(family)]
    # monotone in the order of the raw p-values, never above 1, and m * p for the smallest
    assert holm_p([0.5, 0.001, 0.9]) == [1.0, 0.003, 1.0]


def test_a_summary_links_the_docs_and_its_boards_landscape_from_where_it_is_written(tmp_path):
    result = _result(_board())
    board = tmp_path / "leaderboards" / "digitshack"
    text = summary_markdown(result, board)
    assert "(../../docs/proxy.md)" in text and "(evidence/landscape.md)" in text
    # The controls' records folder, inside the board's evidence: the same files, from there.
    nested = summary_markdown(result, board / "evidence" / "controls")
    assert "(../../../../docs/proxy.md)" in nested and "(../../evidence/landscape.md)" in nested
    # Outside a leaderboards folder (a run's output), as a board's folder links them.
    assert summary_markdown(result, tmp_path / "runs" / "board") == text
