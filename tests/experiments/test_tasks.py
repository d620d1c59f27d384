"""The reward-discovery tasks' experiments: fresh seeds, re-scoring, the planted check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from derl_bench.experiments.climb import ClimbConfig, UpwardConfig
from derl_bench.experiments.landscape import LANDSCAPE_OFFSET, LandscapeConfig
from derl_bench.experiments.planted import (
    CONFIRM_OFFSET,
    PILOT_OFFSET,
    RECONFIRM_OFFSET,
    PlantedConfig,
)
from derl_bench.experiments.proxy import ProxyConfig
from derl_bench.experiments.proxy.run import RETRAIN_OFFSET
from derl_bench.meta.search import SEED_STRIDE, fresh_seeds, slot_seed
from tests.scripts import load_script


def _rescore_module():
    return load_script("scripts/rescore_proposals.py")


def _every_fresh_seed() -> dict[str, list[int]]:
    proxy = ProxyConfig()
    planted = PlantedConfig()
    landscape = LandscapeConfig()
    return {
        "planted pilot": fresh_seeds(planted.pilot_seeds, PILOT_OFFSET),
        "planted confirmation": fresh_seeds(planted.seeds, CONFIRM_OFFSET),
        "planted further confirmation": fresh_seeds(planted.max_seeds, RECONFIRM_OFFSET),
        "landscape": landscape.seeds,
        "landscape confirmation": landscape.confirm_seeds,
        "climb": ClimbConfig().seeds,
        "upward step": UpwardConfig(evidence=[Path("runs.json")]).seeds,
        "re-scoring": _rescore_module().rescore_seeds(),
        **{f"picked re-training, seed {s}": fresh_seeds(proxy.retrain_seeds,
                                                        RETRAIN_OFFSET + 100 * s)
           for s in range(10)},
    }


def test_fresh_seeds_never_coincide_with_a_search_slot_or_with_each_other():
    fresh = _every_fresh_seed()
    used = [s for seeds in fresh.values() for s in seeds]
    assert len(used) == len(set(used)), "two experiments share a fresh seed"
    # Every slot of every search a benchmark runs: run seeds far beyond the defaults, every
    # slot a run of at most SEED_STRIDE inner runs can have.
    budget = ProxyConfig().budget
    assert budget < SEED_STRIDE
    slots = {slot_seed(seed, k) for seed in range(1000) for k in range(budget)}
    assert not slots & set(used)
    # The bound holds for any slot: a fresh seed is above the largest slot seed of any run
    # seed below 10,000.
    assert min(used) > slot_seed(9_999, SEED_STRIDE - 1)
    assert LANDSCAPE_OFFSET not in (PILOT_OFFSET, CONFIRM_OFFSET, RETRAIN_OFFSET)


def test_a_confirmation_that_would_reuse_the_pilots_seeds_is_refused():
    with pytest.raises(ValueError, match="reuse the pilot's seeds"):
        PlantedConfig(confirm_offset=PILOT_OFFSET + 1)
    assert PlantedConfig(confirm_offset=RECONFIRM_OFFSET).confirm_offset == RECONFIRM_OFFSET


def test_rescoring_and_the_primary_endpoint_use_at_least_three_fresh_seeds():
    assert len(_rescore_module().rescore_seeds()) >= 3
    assert ProxyConfig().retrain_seeds >= 3
    planted = PlantedConfig()
    assert planted.seeds >= 8 and planted.pilot_seeds >= 2


def test_the_planted_check_runs_end_to_end_and_writes_its_verdict(tmp_path):
    from derl_bench.cli import main

    # DigitsTrap's card also names the planted reward's parts, which the check must beat too.
    out = tmp_path / "trap"
    assert main(["proxy", "--env", "derl/DigitsTrap-v0", "--planted", "--small",
                 "--confirm-offset", str(RECONFIRM_OFFSET), "--workers", "1",
                 "--output", str(out)]) == 0
    result = json.loads((out / "planted" / "planted.json").read_text())
    assert result["planted"] == "digit_match * progress"
    # a further confirmation's seeds start where --confirm-offset says; the pilot's do not move
    assert result["confirm"]["seeds"] == fresh_seeds(2, RECONFIRM_OFFSET)
    assert result["pilot"]["seeds"] == fresh_seeds(2, PILOT_OFFSET)
    parts = {"digit_match", "progress", "their sum"}
    assert set(result["comparisons"]) == {"outcome", "outcome + format", "average"} | parts
    assert all(s >= 1_000_000_000 for s in result["confirm"]["seeds"])
    for name, c in result["comparisons"].items():
        assert c["part"] == (name in parts)
        # A comparison without a spread has no interval (holm_low None): it cannot pass.
        above = c["holm_low"] is not None and c["holm_low"] > 0
        if c["part"]:
            assert c["planned_mde"] is None and c["passes"] == above
        else:
            assert c["passes"] == (c["mean"] >= 3 * c["planned_mde"] and above)
    assert result["passes"] == all(c["passes"] for c in result["comparisons"].values())
    assert result["confirm"]["scores"].keys() == set(result["rewards"].values())
    text = (out / "planted" / "planted.md").read_text()
    assert "Holm" in text and "| their sum (part) |" in text


def test_the_climb_trains_neighbours_of_the_planted_reward_and_judges_by_draws(tmp_path):
    from derl_bench.cli import main

    out = tmp_path / "trap"
    assert main(["proxy", "--env", "derl/DigitsTrap-v0", "--climb", "--small",
                 "--workers", "1", "--output", str(out)]) == 0
    result = json.loads((out / "climb" / "climb.json").read_text())
    assert result["planted"]["expr"] == "digit_match * progress"
    drawn = result["drawn"]
    weights = [r["draws"] for r in result["neighbours"]]
    assert len(weights) == result["classes"] == 2
    assert sum(weights) + drawn["constant"] + drawn["same"] == drawn["draws"]
    best = result["hand_made"][result["best_hand_made"]]["mean"]
    assert best == max(r["mean"] for r in result["hand_made"].values())
    assert result["bar"] == "outcome"
    bar = result["hand_made"]["outcome"]["mean"]
    for r in result["neighbours"]:
        assert r["climbs"] == (r["mean"] > bar) and r["expr"] != result["planted"]["expr"]
    share = sum(r["draws"] for r in result["neighbours"] if r["climbs"]) / sum(weights)
    assert result["climbing_draw_share"] == round(share, 4)
    assert result["passes"] == (share >= 0.3)
    assert "Clopper-Pearson" in (out / "climb" / "climb.md").read_text()


def test_the_upward_step_starts_from_one_part_picks_and_trains_neighbours_paying_both(
        tmp_path):
    from derl_bench.cli import main
    from derl_bench.experiments.climb import paid_parts
    from derl_bench.family import resolve_family
    from derl_bench.meta.probe import probe_set
    from derl_bench.reward import compile_reward

    board = Path(__file__).resolve().parents[2] / "leaderboards/digitsbalance/evidence/runs.json"
    out = tmp_path / "balance"
    assert main(["proxy", "--env", "derl/DigitsBalance-v0", "--upward", str(board), "--small",
                 "--draws", "40", "--workers", "1", "--output", str(out)]) == 0
    result = json.loads((out / "upward" / "upward.json").read_text())
    assert result["parts"] == ["digit_recall", "length_fit"]
    assert result["first"] == ["digit_recall"]
    picked = [run["picked"]["expr"] for run in json.loads(board.read_text())["runs"]]
    probe = probe_set("derl/DigitsBalance-v0", resolve_family("derl/DigitsBalance-v0"))
    starts = [r["start"] for r in result["starts"]]
    assert len(starts) == 2 and all(s in picked for s in starts)
    for start in starts:
        assert paid_parts(compile_reward(start, domain=probe.env_id), probe,
                          ("digit_recall", "length_fit")) == ("digit_recall",)
    paying = stepping = 0
    for r in result["starts"]:
        drawn = r["drawn"]
        assert drawn["draws"] == 40 and drawn["pays_all"] == sum(n["draws"]
                                                                  for n in r["neighbours"])
        paying += drawn["pays_all"]
        for n in r["neighbours"]:
            assert paid_parts(compile_reward(n["expr"], domain=probe.env_id), probe,
                              ("digit_recall", "length_fit")) == ("digit_recall", "length_fit")
            assert n["steps_up"] == (n["mean"] > r["mean"]) and len(n["scores"]) == 1
            stepping += n["draws"] * n["steps_up"]
    assert (result["draws"], result["pays_all_draws"], result["steps_up_draws"]) == (
        80, paying, stepping)
    low, high = result["pays_all_ci"]
    assert low <= paying / 80 <= high
    assert "Clopper-Pearson" in (out / "upward" / "upward.md").read_text()


def test_the_upward_step_refuses_a_file_that_is_not_a_boards_runs(tmp_path, capsys):
    from derl_bench.cli import main

    wrong = tmp_path / "runs.json"
    wrong.write_text(json.dumps({"runs": [{"method": "random"}]}))
    out = tmp_path / "out"
    assert main(["proxy", "--env", "derl/DigitsBalance-v0", "--upward", str(wrong),
                 "--output", str(out)]) == 2
    assert "not a board's runs.json" in capsys.readouterr().err
    assert not (out / "upward").exists()


def test_the_screen_sorts_every_draw_into_one_class_on_the_base_samples(tmp_path):
    from derl_bench.cli import main
    from derl_bench.experiments.screen import CLASSES

    out = tmp_path / "trap"
    assert main(["proxy", "--env", "derl/DigitsTrap-v0", "--screen", "--small",
                 "--output", str(out)]) == 0
    result = json.loads((out / "screen" / "screen.json").read_text())
    assert result["traps"] == ["lead", "trail"] and result["samples"] == 16
    assert list(result["classes"]) == list(CLASSES)
    assert sum(c["draws"] for c in result["classes"].values()) == result["draws"] == 50
    for c in result["classes"].values():
        assert c["ci"][0] <= c["share"] <= c["ci"][1]
    assert "Clopper-Pearson" in (out / "screen" / "screen.md").read_text()


def test_a_multi_turn_env_is_refused_by_the_proxy(capsys):
    from derl_bench.cli import main

    assert main(["proxy", "--env", "derl/ALFWorld-v0", "--planted"]) == 2
    assert "single-step" in capsys.readouterr().err


def test_modes_measures_the_base_and_refuses_a_task_without_modes_before_training(
        tmp_path, capsys):
    from derl_bench.cli import main

    out = tmp_path / "hack"
    assert main(["proxy", "--env", "derl/DigitsHack-v0", "--modes", "--small",
                 "--output", str(out)]) == 0
    figures = json.loads((out / "modes.json").read_text())
    assert set(figures) == {"base (greedy)", "base (sampled)"}
    for f in figures.values():
        assert abs(sum(f["modes"].values()) - 1) < 1e-6 and 0 <= f["wrap_right"] <= 1
        assert set(f["primitives_by_mode"]) == set(f["modes"])
        for name, overall in f["primitives"].items():  # the per-mode means add up
            weighted = sum(f["modes"][m] * means[name]
                           for m, means in f["primitives_by_mode"].items())
            assert abs(weighted - overall) <= 1e-3 * max(1.0, abs(overall)), name
    assert main(["proxy", "--env", "derl/Arithmetic-v0", "--modes", "--small",
                 "--output", str(tmp_path / "arith")]) == 2
    assert "names no demonstration modes" in capsys.readouterr().err
    assert not (tmp_path / "arith" / "base-model").exists()
