"""The paper-budget proxy benchmark: its design, its evidence, its reward landscape, its
determinism."""

from __future__ import annotations

import json
import re

import pytest

from derl_bench.experiments.evidence import comparisons, endpoint, generation_table
from derl_bench.experiments.landscape import draw_rewards
from derl_bench.experiments.proxy import HAND_MADE, ProxyConfig, run_proxy, small
from derl_bench.families.arithmetic.env import generate_split
from derl_bench.family import resolve_family
from derl_bench.meta.probe import behaviour_key, probe_set
from derl_bench.reward import compile_reward

ENV = "derl/Arithmetic-v0"


def test_the_full_benchmark_runs_the_paper_budget_with_a_frozen_control():
    config = ProxyConfig()
    assert (config.outer_steps, config.population) == (20, 8)
    assert len(config.seeds) >= 5
    assert {"derl", "derl-frozen", "random", "revolve"} <= set(config.methods)
    assert set(config.methods) & set(HAND_MADE), "the best hand-made reward runs beside them"
    assert config.endpoint_from == 10


def test_a_config_reads_its_task_from_the_family_it_resolved_and_small_keeps_it():
    from derl_bench.experiments.proxy.config import config_json
    from derl_bench.family import resolve_family
    from derl_bench.reward.planted import planted_reward

    config = ProxyConfig(env_id="derl/DigitsHack-v0")
    assert config.family is resolve_family("derl/DigitsHack-v0")
    assert config.validation_episodes == config.family.card["proxy"]["validation_episodes"]
    assert small(config).family is config.family
    assert "family" not in config_json(config)  # results.json keeps the env id, not the card
    assert planted_reward(config.env_id, config.family) == config.family.card["planted_reward"]


def test_validation_resolves_one_problem_in_a_thousand():
    config = ProxyConfig()
    assert config.validation_episodes >= 1000
    problems = generate_split("validation")
    assert len(problems) >= config.validation_episodes
    assert len({p.problem_id for p in problems}) == len(problems)
    eval_ids = {p.problem_id for level in ("L0-eval", "L1-eval", "L2-eval")
                for p in generate_split(level)}
    assert not eval_ids & {p.problem_id for p in problems}


def _row(method, seed, means, l0, candidates=(), generations=None):
    return {"method": method, "seed": seed, "generation_mean": list(means),
            "eval": {"L0": {"mean": l0}}, "candidates": list(candidates),
            "generations": generations or [{} for _ in means]}


def test_the_endpoint_is_paired_by_seed_over_the_late_generations():
    rows = [_row("derl", 0, [0.0, 0.2, 0.4], 0.05), _row("derl", 1, [0.0, 0.3, 0.3], 0.07),
            _row("derl-frozen", 0, [0.0, 0.1, 0.1], 0.04),
            _row("derl-frozen", 1, [0.0, 0.1, 0.2], 0.05)]
    assert endpoint(rows[0], 1) == pytest.approx(0.3)
    (c,) = comparisons(rows, ["derl", "derl-frozen"], 1)
    assert c["minus"] == "derl-frozen" and c["seeds"] == [0, 1]
    assert c["endpoint"]["mean"] == pytest.approx(0.175)
    assert c["L0"]["mean"] == pytest.approx(0.015)
    assert c["endpoint"]["mde"] > 0


def test_the_generation_table_counts_structures_primitives_and_repeats():
    candidates = [
        {"generation": 0, "status": "scored", "structure": "linear", "score": 0.25,
         "primitives": ["outcome"], "repeat": False},
        {"generation": 0, "status": "scored", "structure": "veto",
         "primitives": ["outcome", "format_boxed"], "repeat": True},
        {"generation": 0, "status": "invalid", "structure": None, "primitives": None,
         "repeat": False},
        {"generation": 0, "status": "constant", "structure": "bounded", "primitives": [],
         "repeat": False},
    ]
    rows = [_row("derl", 0, [0.1], 0.0, candidates, [{"meta/kl": 0.5}]),
            _row("derl", 1, [0.3], 0.0, [], [{"meta/kl": 1.5}])]
    (entry,) = generation_table(rows, ["outcome", "format_boxed"])["derl"]
    assert entry["mean_score"] == pytest.approx(0.2) and entry["ci_low"] < 0.2
    assert entry["valid_share"] == 0.75 and entry["repeat_share"] == 0.25
    assert entry["constant_share"] == 0.25
    # Shares count the distinct proposals: the repeated veto is left out of them.
    assert entry["structure_share"]["linear"] == pytest.approx(1 / 2, abs=1e-4)
    assert entry["structure_share"]["veto"] == 0.0
    assert entry["structure_score"]["unbounded"] is None
    assert entry["structure_score"]["linear"] == 0.25
    assert entry["primitive_share"] == {"outcome": pytest.approx(1 / 2, abs=1e-4),
                                        "format_boxed": 0.0}
    assert entry["meta/kl"] == 1.0


def test_the_landscape_draws_distinct_non_constant_rewards():
    exprs, drawn = draw_rewards(30, seed=5)
    probe = probe_set(ENV, resolve_family(ENV))
    keys = [behaviour_key(compile_reward(e, env=ENV), probe) for e in exprs]
    assert None not in keys and len(set(keys)) == 30
    assert drawn["draws"] == 30 + drawn["constant"] + drawn["duplicate"]
    # Each kept reward carries its class's draws: shares can be stated over raw draws.
    assert set(drawn["weights"]) == set(exprs) and min(drawn["weights"].values()) >= 1
    assert sum(drawn["weights"].values()) == 30 + drawn["duplicate"]


def test_check_2_counts_a_reward_only_if_it_beats_each_hand_made_one_holm_across_rewards():
    from derl_bench.experiments.landscape import draw_share, judge

    hand = [{"expr": h, "hand_made": True, "scores": s} for h, s in
            (("h1", [0.50, 0.52, 0.48, 0.51, 0.49, 0.50]),
             ("h2", [0.40, 0.41, 0.39, 0.42, 0.38, 0.40]))]
    clear = {"expr": "clear", "hand_made": False, "scores": [0.70, 0.73, 0.69, 0.72, 0.71, 0.70]}
    # Beats h2 clearly but h1 only on average: its weakest comparison (against h1) decides.
    mixed = {"expr": "mixed", "hand_made": False, "scores": [0.60, 0.45, 0.58, 0.44, 0.62, 0.41]}
    flat = {"expr": "flat", "hand_made": False, "scores": [0.51, 0.53, 0.49, 0.52, 0.50, 0.51]}
    found = judge([clear, mixed, flat, *hand])
    assert found["better_each_holm"] == ["clear"]
    # flat - h1 is +0.01 on every seed: no spread, no test, so it cannot count, and it is
    # left out of the family (it costs the others no power).
    assert found["better_each_family"] == 2
    assert "flat" not in found["measurably_better"]
    share = draw_share({"drawn": {"draws": 200, "weights": {"clear": 4, "mixed": 9}}},
                       found["better_each_holm"])
    assert (share["winning_draws"], share["share"]) == (4, 0.02)
    assert share["ci"][0] < 0.02 < share["ci"][1]


def _without_times(text: str, out: str) -> object:
    data = json.loads(text.replace(out, "OUT"))

    def scrub(value):
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()
                    if k not in ("seconds", "wall_time_s")}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return scrub(data)


@pytest.mark.slow
def test_two_runs_of_the_small_proxy_with_two_workers_give_identical_results(tmp_path):
    results = []
    for name in ("a", "b"):
        out = str(tmp_path / name)
        config = small(ProxyConfig(output=out, workers=2))
        run_proxy(config, log=lambda *_: None)
        results.append(_without_times((tmp_path / name / "results.json").read_text(), out))
    assert results[0] == results[1]
    assert re.search(r"derl-frozen", json.dumps(results[0]))


def test_a_bad_optimizer_recipe_exits_2_before_anything_is_written(tmp_path, capsys):
    from derl_bench.cli import main

    out = tmp_path / "proxy"
    assert main(["proxy", "--small", "--output", str(out), "--optimizer", "bogus=1"]) == 2
    assert "bogus" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--workers", "0"], "argument --workers: must be at least 1, got 0"),
    (["--workers", "-1"], "argument --workers: must be at least 1, got -1"),
    (["--optimizer", "nokey"], "argument --optimizer: override 'nokey' is not KEY=VALUE"),
    # Twice over, a seed's or a method's runs would share their folders under runs/.
    (["--seeds", "0", "0", "--methods", "outcome"],
     "argument --seeds: 0 is given twice; give each once"),
    (["--methods", "outcome", "outcome"],
     "argument --methods: 'outcome' is given twice; give each once"),
])
def test_bad_proxy_arguments_exit_2_before_anything_is_written(tmp_path, capsys, args, message):
    from derl_bench.cli import main

    out = tmp_path / "proxy"
    with pytest.raises(SystemExit) as exit_:
        main(["proxy", "--small", "--output", str(out), *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_the_optimizer_recipe_reaches_only_the_meta_optimizers_methods(tmp_path):
    from derl_bench.experiments.proxy.run import meta_config_for

    config = ProxyConfig(output=str(tmp_path), optimizer_recipe={
        "protocol": "derl-official", "inner": {"reward_semantics": "derl"}})
    derl = meta_config_for(config, "derl", 0, "tiny", tmp_path)
    assert derl.protocol == "derl-official" and derl.optimizer.decoder == "whitelist"
    assert derl.inner.reward_semantics == "derl" and derl.outer_steps == 20
    randoms = meta_config_for(config, "random", 0, "tiny", tmp_path)
    assert randoms.protocol == "derl" and randoms.inner.reward_semantics != "derl-official"


def test_the_small_landscape_writes_its_table_plot_and_verdict(tmp_path):
    from derl_bench.cli import main

    out, board = tmp_path / "proxy", tmp_path / "board"
    assert main(["proxy", "--landscape", "--small", "--output", str(out),
                 "--records", str(board)]) == 0
    found = json.loads((board / "evidence" / "landscape.json").read_text())
    assert len(found["random"]) == 4 and set(found["hand_made"]) == set(HAND_MADE)
    assert found["best_hand_made"] in HAND_MADE.values()
    assert all(len(c["scores"]) == 1 for c in found["confirm"])
    assert (board / "evidence" / "landscape.png").stat().st_size > 0
    text = (board / "evidence" / "landscape.md").read_text()
    assert "measurably better" in text and "Clopper-Pearson" in text
    share = found["better_each_share"]
    assert share["draws"] == found["drawn"]["draws"] and 0 <= share["share"] <= 1


def test_a_board_grows_by_seeds_from_its_evidence_and_a_rerun_keeps_finished_runs(tmp_path):
    from dataclasses import replace

    from derl_bench.experiments.recompute import board_result, summary_renders

    board = tmp_path / "board"
    first = small(ProxyConfig(output=str(tmp_path / "a"), workers=1,
                              methods=["outcome", "random"]))
    run_proxy(first, records=board, log=lambda *_: None)
    assert {r["seed"] for r in board_result(board)["runs"]} == {0}
    # Another folder, another seed: the board's committed runs are taken from its evidence,
    # not trained again, and the result holds both seeds.
    logged: list[str] = []
    second = replace(first, output=str(tmp_path / "b"), seeds=[1])
    second.family = first.family
    result = run_proxy(second, records=board, log=logged.append)
    assert [(r["method"], r["seed"]) for r in result["runs"]] == [
        ("outcome", 0), ("outcome", 1), ("random", 0), ("random", 1)]
    assert result["config"]["seeds"] == [0, 1]
    assert {p.name for p in board.glob("*-s1-L0.json")} == {"outcome-s1-L0.json",
                                                            "random-s1-L0.json"}
    assert summary_renders(board) is True
    assert board_result(board)["summary"] == result["summary"]
    # Run again in the same folder: the two finished runs are kept, none is trained.
    logged.clear()
    again = run_proxy(second, records=board, log=logged.append)
    assert "2 runs finished before with the same settings: kept" in logged
    assert any(line.startswith("0 runs") for line in logged)
    assert again["summary"] == result["summary"]
    # A run with other settings takes nothing from either.
    other = replace(second, output=str(tmp_path / "c"), outer_steps=2)
    other.family = first.family
    assert run_proxy(other, log=lambda *_: None)["config"]["seeds"] == [1]
