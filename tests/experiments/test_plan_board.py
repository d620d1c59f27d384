"""scripts/plan_board.py: a board's plan from a landscape's evidence."""

from __future__ import annotations

import json
import sys

import pytest

from tests.scripts import load_script


def _plan_module():
    return load_script("scripts/plan_board.py")


def _landscape(winners: int) -> dict:
    # 100 raw draws: 60 constant, 30 in a class at 5%, `winners` in a class at 50% and the
    # rest in a class at 20%; two confirmed rewards give the per-seed spread.
    rest = 40 - 30 - winners
    return {
        "drawn": {"constant": 60, "weights": {"low": 30, "win": winners, "mid": rest}},
        "random": [{"expr": "low", "scores": [0.04, 0.06]},
                   {"expr": "win", "scores": [0.5, 0.5]},
                   {"expr": "mid", "scores": [0.2, 0.2]}],
        "confirm": [{"expr": "win", "scores": [0.45, 0.55, 0.5, 0.5]},
                    {"expr": "mid", "scores": [0.15, 0.25, 0.2, 0.2]}],
        "better_each_share": {"share": winners / 100},
    }


def test_the_plan_follows_the_evidence_and_prints_the_same_twice(tmp_path, capsys, monkeypatch):
    plan = _plan_module()
    common, rare = plan.plan(_landscape(8), 32, 5), plan.plan(_landscape(1), 32, 5)
    assert common["hit_rate"] == pytest.approx(1 - 0.92 ** 32)
    # rarer winners: a lower hit rate and a lower picked reward, more spread over seeds
    assert rare["hit_rate"] < common["hit_rate"]
    assert 0.05 <= rare["picked_mean"] < common["picked_mean"] <= 0.5
    assert rare["picked_sd"] > common["picked_sd"] > 0
    mdes = list(rare["mde"].values())
    assert all(a > b for a, b in zip(mdes[:-1], mdes[1:], strict=True))  # more seeds, smaller
    # a wider Holm family asks for more
    assert plan.plan(_landscape(1), 32, 10)["mde"][5] > rare["mde"][5]
    path = tmp_path / "landscape.json"
    path.write_text(json.dumps(_landscape(3)))
    monkeypatch.setattr(sys, "argv", ["plan_board.py", str(path), "--searches", "2000"])
    printed = []
    for _ in range(2):
        plan.main()
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and "| 5 |" in printed[0]
