"""The ALFWorld agent study (leaderboards/alfworld/study/): each script at a small size, and
the committed figures recomputed from the committed records."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from tests.scripts import REPO, load_script

STUDY = "leaderboards/alfworld/study"
BOARD = REPO / "leaderboards" / "alfworld"


def _log(path, outcomes):
    path.write_text("".join(json.dumps({"index": i, "success": won}) + "\n"
                            for i, won in enumerate(outcomes)))


def test_paired_counts_each_games_two_outcomes_and_holm_corrects_the_levels(tmp_path):
    pilot = load_script(f"{STUDY}/pilot.py")
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
    pilot = load_script(f"{STUDY}/pilot.py")
    _log(tmp_path / "ref-L0.jsonl", [True, False])
    _log(tmp_path / "new-L0.jsonl", [True, False, True])
    args = argparse.Namespace(names=["ref", "new"], levels=["L0"], evidence=str(tmp_path))
    with pytest.raises(SystemExit, match="not of the same games"):
        pilot.paired(args)
    assert not (tmp_path / "paired.json").exists()


def _record(path, rate):
    path.write_text(json.dumps({"results": {"successes": round(rate * 200), "n": 200}}))


def test_lift_takes_each_base_from_its_finals_and_holm_corrects_the_bases(tmp_path):
    from derl_bench.experiments.stats import holm, paired_difference

    pilot = load_script(f"{STUDY}/pilot.py")
    for level, weak, strong in (("L0", 0.3, 0.8), ("L1", 0.2, 0.75)):
        _record(tmp_path / f"weak-base-{level}.json", weak)
        _record(tmp_path / f"strong-base-{level}.json", strong)
    for seed, (a, b) in {9: (0.45, 0.5), 10: (0.4, 0.35), 11: (0.5, 0.3)}.items():
        _record(tmp_path / f"weak-s{seed}-L0.json", a)
        _record(tmp_path / f"weak-s{seed}-L1.json", b)
    for seed in (9, 10, 11, 12):
        _record(tmp_path / f"strong-s{seed}-L0.json", 0.8 + seed / 200)
        _record(tmp_path / f"strong-s{seed}-L1.json", 0.75)
    args = argparse.Namespace(groups=["weak", "strong"], level="L0", beside=["L1"],
                              evidence=str(tmp_path))
    assert pilot.lift(args) == 0
    groups = json.loads((tmp_path / "lift.json").read_text())["groups"]
    weak, strong = groups["weak"], groups["strong"]
    assert weak["L0"]["seeds"] == [9, 10, 11] and strong["L0"]["seeds"] == [9, 10, 11, 12]
    expected = holm([paired_difference([45.0, 40.0, 50.0], [30.0] * 3),
                     paired_difference([84.5, 85.0, 85.5, 86.0], [80.0] * 4)])
    assert weak["L0"]["final_minus_base"] == pytest.approx(expected[0])
    assert strong["L0"]["final_minus_base"] == pytest.approx(expected[1])
    assert weak["L0"]["final_minus_base"]["mean"] == pytest.approx(15.0)
    # the level beside is not corrected: it carries no Holm figures
    assert weak["L1"]["final_minus_base"]["mean"] == pytest.approx(
        (50 + 35 + 30) / 3 - 20, abs=1e-3)
    assert "p_holm" not in weak["L1"]["final_minus_base"]


def test_lift_takes_each_run_minus_its_own_builds_base(tmp_path):
    from derl_bench.experiments.stats import paired_difference

    pilot = load_script(f"{STUDY}/pilot.py")
    _record(tmp_path / "weak-base-L0.json", 0.3)
    _record(tmp_path / "weak-base-build3-L0.json", 0.4)
    for seed, share in {9: 0.45, 10: 0.4, 13: 0.5, 14: 0.55}.items():
        _record(tmp_path / f"weak-s{seed}-L0.json", share)
    (tmp_path / "builds.json").write_text(json.dumps({"weak": {"build3": [13, 14]}}))
    args = argparse.Namespace(groups=["weak"], level="L0", beside=[], evidence=str(tmp_path))
    assert pilot.lift(args) == 0
    row = json.loads((tmp_path / "lift.json").read_text())["groups"]["weak"]["L0"]
    assert row["bases"] == [30.0, 30.0, 40.0, 40.0]
    assert row["base"] == {"first": 30.0, "build3": 40.0}
    expected = paired_difference([45.0, 40.0, 50.0, 55.0], [30.0, 30.0, 40.0, 40.0])
    assert row["final_minus_base"]["mean"] == pytest.approx(12.5)
    assert row["final_minus_base"]["mean"] == pytest.approx(expected["mean"])
    (tmp_path / "weak-base-build3-L0.json").unlink()
    with pytest.raises(SystemExit, match="needs weak-base-build3-L0.json"):
        pilot.lift(args)


def test_lift_corrects_groups_of_several_pilots_together(tmp_path):
    # The goal's two halves come from two pilots' folders; one lift.json corrects them together.
    from derl_bench.experiments.stats import holm, paired_difference

    pilot = load_script(f"{STUDY}/pilot.py")
    first, second, out = tmp_path / "pilot8", tmp_path / "pilot10", tmp_path / "goal"
    for folder, group, base, finals in ((first, "weak", 0.3, (0.45, 0.4, 0.5)),
                                        (second, "dyn", 0.8, (0.85, 0.87, 0.84))):
        folder.mkdir()
        _record(folder / f"{group}-base-L0.json", base)
        for seed, share in enumerate(finals):
            _record(folder / f"{group}-s{seed}-L0.json", share)
    args = argparse.Namespace(groups=[f"{first}:weak", f"{second}:dyn"], level="L0",
                              beside=[], evidence=str(out))
    assert pilot.lift(args) == 0
    groups = json.loads((out / "lift.json").read_text())["groups"]
    expected = holm([paired_difference([45.0, 40.0, 50.0], [30.0] * 3),
                     paired_difference([85.0, 87.0, 84.0], [80.0] * 3)])
    assert groups["weak"]["L0"]["final_minus_base"] == pytest.approx(expected[0])
    assert groups["dyn"]["L0"]["final_minus_base"] == pytest.approx(expected[1])
    assert groups["dyn"]["L0"]["final_minus_base"]["family"] == 2
    assert not (first / "lift.json").exists() and not (second / "lift.json").exists()
    args.groups = [f"{first}:weak", f"{second}:weak"]
    with pytest.raises(SystemExit, match="weak: named twice"):
        pilot.lift(args)
    args.groups = [f"{first}:weak", f"{first}:dyn"]
    with pytest.raises(SystemExit, match=f"dyn L0: needs its base .* in {first}"):
        pilot.lift(args)


def test_tails_counts_the_lost_episodes_that_end_in_a_cycle(tmp_path):
    pilot = load_script(f"{STUDY}/pilot.py")
    episodes = [{"success": True, "actions": ["go to a", "go to b"] * 6},
                {"success": False, "actions": ["look"] + ["go to a", "go to b"] * 6},
                {"success": False, "actions": [f"go to {i}" for i in range(30)]}]
    (tmp_path / "base-L0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    args = argparse.Namespace(names=["base"], levels=["L0"], evidence=str(tmp_path))
    assert pilot.tails(args) == 0
    assert json.loads((tmp_path / "tails.json").read_text()) == {
        "base": {"L0": {"lost": 2, "cycled": 1}}}


def test_lift_refuses_a_group_without_its_base(tmp_path):
    pilot = load_script(f"{STUDY}/pilot.py")
    _record(tmp_path / "weak-s9-L0.json", 0.4)
    args = argparse.Namespace(groups=["weak"], level="L0", beside=[], evidence=str(tmp_path))
    with pytest.raises(SystemExit, match="needs weak-base-L0.json"):
        pilot.lift(args)


def _argv(monkeypatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", ["script", *args])


def _board_copy(tmp_path: Path) -> Path:
    """The ALFWorld board's records in a folder of their own, where a report may write."""
    board = tmp_path / "board"
    (board / "evidence").mkdir(parents=True)
    for record in BOARD.glob("*.json"):
        shutil.copy(record, board / record.name)
    return board


def test_the_board_report_recomputes_the_committed_comparison(tmp_path, monkeypatch):
    board = _board_copy(tmp_path)
    study = load_script(f"{STUDY}/board.py")
    _argv(monkeypatch, "report", "--board", str(board))
    assert study.main() == 0
    written = json.loads((board / "evidence" / "comparison.json").read_text())
    assert written == json.loads((BOARD / "evidence" / "comparison.json").read_text())


def test_the_derl_report_recomputes_the_committed_comparison(tmp_path, monkeypatch):
    board = _board_copy(tmp_path)
    for search in (BOARD / "evidence").glob("*-s*/search.json"):
        target = board / "evidence" / search.parent.name
        target.mkdir()
        shutil.copy(search, target / "search.json")
    monkeypatch.syspath_prepend(str(REPO / STUDY))  # derl.py reads board.py's recipe
    study = load_script(f"{STUDY}/derl.py")
    _argv(monkeypatch, "report", "--board", str(board))
    assert study.main() == 0
    written = json.loads((board / "evidence" / "derl-comparison.json").read_text())
    assert written == json.loads((BOARD / "evidence" / "derl-comparison.json").read_text())
    assert set(written["picks"]) == {f"{m}-s{s}" for m in ("derl", "derl-frozen", "random")
                                     for s in (0, 1, 2)}


def test_the_pilot_lift_recomputes_the_seventh_pilots(tmp_path):
    evidence = BOARD / "evidence" / "pilot7"
    for record in evidence.glob("*.json"):
        if record.name != "lift.json":
            shutil.copy(record, tmp_path / record.name)
    committed = json.loads((evidence / "lift.json").read_text())
    pilot = load_script(f"{STUDY}/pilot.py")
    args = argparse.Namespace(groups=list(committed["groups"]), level=committed["level"],
                              beside=["L1"], evidence=str(tmp_path))
    assert pilot.lift(args) == 0
    assert json.loads((tmp_path / "lift.json").read_text()) == committed


def test_a_pilot_runs_and_reports_at_a_small_size(tmp_path, data_root):
    from derl_bench.policies.command_model import init_command_model

    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    pilot = load_script(f"{STUDY}/pilot.py")
    runs, evidence = tmp_path / "runs", tmp_path / "evidence"
    small = ["steps=2", "games_per_step=1", "group_size=2", "pool=2", "validation_every=2",
             "curve_games=2", "validation_games=2", "envs=2", "max_episode_steps=3"]
    assert pilot.run(argparse.Namespace(base=str(base), runs=str(runs), arms=["long-lr2e-4"],
                                        seeds=[0], workers=1, set=small)) == 0
    assert (runs / "long-lr2e-4-s0" / "result.json").is_file(), (
        runs / "long-lr2e-4-s0.log").read_text()[-2000:]
    assert pilot.report(argparse.Namespace(runs=str(runs), arms=["long-lr2e-4"], seeds=[0],
                                           evidence=str(evidence))) == 0
    arm = json.loads((evidence / "summary.json").read_text())["arms"]["long-lr2e-4"]
    assert [p["step"] for p in arm["curve"]] == [0, 2] and arm["runs"] == 1
    assert (evidence / "long-lr2e-4-s0" / "metrics.jsonl").is_file()


def test_the_teacher_study_wins_the_first_games_and_writes_its_figures(tmp_path, data_root):
    study = load_script(f"{STUDY}/teacher.py")
    out = tmp_path / "teacher.json"
    assert study.main(["--levels", "L0", "--limit", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())["L0"]
    assert report["teacher"]["games"] == 2 and report["teacher"]["wins"] == 2
    assert report["teacher"]["labels_admissible"] and report["detour"]["games"] == 2


def test_the_agreement_diagnostic_scores_a_model_against_its_teacher(tmp_path, data_root):
    from derl_bench.policies.command_model import init_command_model

    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    study = load_script(f"{STUDY}/diagnostics.py")
    found = study.agreement(str(base), "L0", limit=2)
    # the teacher's history is forced, so its games are won whatever the student predicts
    assert found["games"] == 2 and found["teacher_success"] == 1.0
    assert found["states"] == sum(k["states"] for k in found["by_kind"].values()) > 0
    assert 0.0 <= found["top1_agreement"] <= 1.0


@pytest.mark.parametrize(("recipe", "run"), [
    ("alfworld-commands-weak-320.yaml", "pilot8/weak/long-lr2e-4-s9"),
    ("alfworld-commands-2l-320.yaml", "pilot9/twolayer/long-lr2e-4-s9"),
    ("alfworld-commands-dagger-dyn-160.yaml", "pilot10/dyn/long-lr2e-4-s17")])
def test_a_stated_recipe_is_what_its_pilot_ran(recipe: str, run: str):
    import yaml

    from derl_bench.grpo.commands import command_config_from_dict

    ran = yaml.safe_load(
        (REPO / "leaderboards/alfworld/evidence" / run / "config.yaml").read_text())
    stated = yaml.safe_load((REPO / "baselines" / recipe).read_text())
    # a run's own fields (its seed and folder) aside, and the recipe's new name
    own = {"seed": ran["seed"], "output_dir": ran["output_dir"], "name": stated["name"]}
    assert command_config_from_dict({**stated, **own}) == command_config_from_dict(
        {**{k: v for k, v in ran.items() if k != "data_root"}, **own})


def test_rewards_compares_each_reward_with_outcome_by_seed_and_holm_corrects_them(tmp_path):
    from derl_bench.experiments.stats import holm, paired_difference

    pilot = load_script(f"{STUDY}/pilot.py")
    rates = {"outcome": (0.40, 0.45, 0.50), "average": (0.40, 0.40, 0.45),
             "progress": (0.50, 0.55, 0.55)}
    for name, shares in rates.items():
        for seed, share in zip((9, 10, 11), shares, strict=True):
            _record(tmp_path / f"{name}-s{seed}-L0.json", share)
            _record(tmp_path / f"{name}-s{seed}-L1.json", share / 2)
    _record(tmp_path / "progress-s12-L0.json", 0.9)  # a seed outcome lacks: not compared
    args = argparse.Namespace(rewards=["outcome", "average", "progress"], level="L0",
                              beside=["L1"], runs=None, evidence=str(tmp_path))
    assert pilot.rewards(args) == 0
    found = json.loads((tmp_path / "rewards.json").read_text())
    assert found["rewards"]["progress"]["L0"]["seeds"] == [9, 10, 11]
    expected = holm([paired_difference([40.0, 40.0, 45.0], [40.0, 45.0, 50.0]),
                     paired_difference([50.0, 55.0, 55.0], [40.0, 45.0, 50.0])])
    assert found["comparisons"]["average"]["L0"] == pytest.approx(expected[0])
    assert found["comparisons"]["progress"]["L0"] == pytest.approx(expected[1])
    assert found["comparisons"]["progress"]["L1"]["mean"] == pytest.approx(12.5 / 3, abs=1e-3)
    assert "p_holm" not in found["comparisons"]["progress"]["L1"]
    args.rewards = ["average", "outcome"]
    with pytest.raises(SystemExit, match="outcome first"):
        pilot.rewards(args)


def _small_recipe(path: Path, **changes: object) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({
        "name": "small", "trainer": "commands", "env_id": "derl/ALFWorld-v0", "level": "L0",
        "model": "base", "meta_reward": "success", "steps": 2, "games_per_step": 1,
        "group_size": 2, "pool": 2, "envs": 2, "num_threads": 1, "max_episode_steps": 4,
        "validation_games": 0, "learning_rate": 1e-3, **changes}))
    return path


def test_a_search_runs_at_a_committed_recipe_with_its_own_settings(tmp_path, data_root,
                                                                   monkeypatch):
    import yaml

    from derl_bench.policies.command_model import init_command_model

    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    recipe = _small_recipe(tmp_path / "recipe.yaml")
    monkeypatch.syspath_prepend(str(REPO / STUDY))  # derl.py reads board.py's recipe
    study = load_script(f"{STUDY}/derl.py")
    for name in ("BOARD", "EVIDENCE", "RECIPE_FILE", "TAG"):
        monkeypatch.setattr(study.board, name, getattr(study.board, name))
    saved = dict(study.GRPO)
    try:
        study.board.use_recipe(str(recipe))
        study._use_board(str(tmp_path / "board"), False, "small")
        study._use_search(argparse.Namespace(search_set=["steps=1"], quick=False, generations=1,
                                             population=2, validation_games=2))
        found = study.search("random", 0, tmp_path / "runs", str(base), workers=1)
    finally:  # the board module is shared with the other tests of this process
        study.GRPO.clear()
        study.GRPO.update(saved)
    assert (found["recipe_file"], found["search_set"], found["budget"]) == (
        str(recipe), {"steps": 1}, {"outer_steps": 1, "population": 2})
    assert [c["status"] for c in found["candidates"]] == ["scored", "scored"]
    # filed under the tag's name, beside the board's untagged rows
    saved_search = tmp_path / "board" / "evidence" / "random-small-s0" / "search.json"
    assert json.loads(saved_search.read_text()) == found
    for index in (0, 1):
        ran = yaml.safe_load((tmp_path / "runs" / "random-s0" / "search" / "inner" /
                              f"g000-c{index:02d}" / "config.yaml").read_text())
        # the recipe's numbers, the search's own steps, and its validation games
        assert (ran["steps"], ran["learning_rate"], ran["validation_games"]) == (1, 1e-3, 2)


def test_a_record_names_the_command_model_by_its_parameters(tmp_path):
    from transformers import AutoModelForCausalLM

    from derl_bench.policies.command_model import CommandModelSpec, init_command_model

    study = load_script(f"{STUDY}/board.py")
    names = set()
    for layers in (1, 2):
        folder = init_command_model(tmp_path / f"l{layers}", "derl/ALFWorld-v0",
                                    CommandModelSpec(num_hidden_layers=layers))
        model = AutoModelForCausalLM.from_pretrained(folder)
        count = sum(p.numel() for p in model.parameters())
        names.add(study.model_name(folder))
        assert study.model_name(folder) == f"command-lm-{count // 1000}k"
    assert len(names) == 2  # the layers count, so two models never share a row's name


def test_a_board_record_carries_the_models_policy_interface(tmp_path, data_root, monkeypatch):
    from derl_bench.leaderboard.validate import validate_file
    from derl_bench.policies.command_model import CommandModelSpec, init_command_model

    study = load_script(f"{STUDY}/board.py")
    monkeypatch.setattr(study, "BOARD", tmp_path)
    model = init_command_model(tmp_path / "tried", "derl/ALFWorld-v0",
                               CommandModelSpec(num_hidden_layers=1), view="tried")
    path = study._record(model, "L2", "teacher-dagger-small", 0, "built", None, None)
    record = json.loads(path.read_text())
    # the view the model was built for, not the board's first interface
    assert record["policy_interface"] == "compact-tried-constrained"
    assert record["model"] == study.model_name(model) and not validate_file(path).problems


@pytest.mark.parametrize(("changes", "message"), [
    ({"trainer": "compact"}, "not a command policy's recipe"),
    ({"group_size": 0}, "group_size"),
])
def test_a_recipe_the_board_cannot_train_is_refused(tmp_path, monkeypatch, changes, message):
    study = load_script(f"{STUDY}/board.py")
    before = dict(study.GRPO)
    with pytest.raises(SystemExit, match=message):
        study.use_recipe(str(_small_recipe(tmp_path / "recipe.yaml", **changes)))
    assert study.GRPO == before and study.RECIPE_FILE is None


def test_a_leg_trains_on_at_most_the_games_its_base_was_not_taught_on(tmp_path, data_root,
                                                                     monkeypatch):
    # A recipe's pool is chosen for L0; L2's training split (types 1-4) is smaller, so a leg
    # from an L2 base takes every game that base was not taught on, and cites that pool.
    from derl_bench.envs.items import split_items
    from derl_bench.family import resolve_family

    study = load_script(f"{STUDY}/board.py")
    base = tmp_path / "base"
    base.mkdir()
    (base / "dagger.json").write_text(json.dumps({"pool": list(range(200))}))
    monkeypatch.setitem(study.GRPO, "pool", 3000)
    l2 = len(split_items(resolve_family(study.ENV_ID), study.ENV_ID, "train", "L2"))
    assert l2 - 200 < 3000
    assert study.leg_grpo(str(base), "L2") == {**study.GRPO, "pool": l2 - 200}
    assert study.leg_grpo(str(base), "L0") == study.GRPO


def test_a_board_run_continues_its_own_checkpoint_and_replaces_another(tmp_path, data_root):
    from derl_bench.grpo.commands import CommandGRPOConfig
    from derl_bench.policies.command_model import init_command_model

    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    study = load_script(f"{STUDY}/board.py")
    small = {"steps": 2, "games_per_step": 1, "group_size": 2, "pool": 2, "envs": 2,
             "num_threads": 1, "max_episode_steps": 4, "validation_games": 0, "save_every": 1,
             "meta_reward": "sum(new_location)", "learning_rate": 1e-3}
    run = tmp_path / "run"

    def config(**changes):
        return CommandGRPOConfig(model=str(base), output_dir=str(run),
                                 env_id="derl/ALFWorld-v0", **{**small, **changes})

    def rows():
        return (run / "metrics.jsonl").read_text().splitlines()

    study.train_run(config(steps=1), "short")
    first = rows()
    (run / "result.json").unlink()  # as if stopped after its step-1 checkpoint
    study.train_run(config(), "continued")  # the same settings: goes on from step 1
    assert rows()[0] == first[0]
    assert [json.loads(r).get("step") for r in rows()] == [1, 2]
    study.train_run(config(), "finished")  # its result is there: nothing runs
    assert rows()[0] == first[0]
    (run / "result.json").unlink()
    study.train_run(config(learning_rate=5e-5), "other")  # another recipe's folder: replaced
    assert rows()[0] != first[0]
    assert json.loads((run / "result.json").read_text())["config"]["learning_rate"] == 5e-5
