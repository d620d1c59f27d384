"""scripts/alfworld_pilot.py: the parts that read logs (the runs themselves are the pilots)."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from tests.scripts import load_script


def _log(path, outcomes):
    path.write_text("".join(json.dumps({"index": i, "success": won}) + "\n"
                            for i, won in enumerate(outcomes)))


def test_paired_counts_each_games_two_outcomes_and_holm_corrects_the_levels(tmp_path):
    pilot = load_script("scripts/alfworld_pilot.py")
    # L0: 6 games won by the other model only, 1 by the reference only; L1: 2 against 2
    _log(tmp_path / "ref-L0.jsonl", [True] * 3 + [False] * 6 + [True] + [False] * 2)
    _log(tmp_path / "new-L0.jsonl", [True] * 3 + [True] * 6 + [False] + [False] * 2)
    _log(tmp_path / "ref-L1.jsonl", [True, True, False, False, True])
    _log(tmp_path / "new-L1.jsonl", [False, False, True, True, True])
    args = argparse.Namespace(names=["ref", "new"], levels=["L0", "L1"],
                              evidence=str(tmp_path))
    assert pilot.paired(args) == 0
    levels = json.loads((tmp_path / "paired.json").read_text())["levels"]
    l0, l1 = levels["L0"], levels["L1"]
    assert (l0["games"], l0["ref"], l0["new"], l0["only new"], l0["only ref"]) == (
        12, 4, 9, 6, 1)
    # exact two-sided binomial tail of 1 in 7: 2 * (1 + 7) / 2**7
    assert math.isclose(l0["p"], 16 / 128)
    assert (l1["only new"], l1["only ref"], l1["p"]) == (2, 2, 1.0)
    assert math.isclose(l0["p_holm"], 2 * 16 / 128) and l1["p_holm"] == 1.0


def test_paired_refuses_logs_of_different_games(tmp_path):
    pilot = load_script("scripts/alfworld_pilot.py")
    _log(tmp_path / "ref-L0.jsonl", [True, False])
    _log(tmp_path / "new-L0.jsonl", [True, False, True])
    args = argparse.Namespace(names=["ref", "new"], levels=["L0"], evidence=str(tmp_path))
    with pytest.raises(SystemExit, match="not of the same games"):
        pilot.paired(args)
    assert not (tmp_path / "paired.json").exists()
