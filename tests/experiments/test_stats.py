"""The boards' statistics: no p-value without a spread, MDEs under the correction."""

from __future__ import annotations

from derl_bench.experiments.stats import (
    corrected_mde,
    describe,
    holm,
    paired_difference,
    t_p_value,
)


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
