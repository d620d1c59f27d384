"""The evaluation protocol on the real envs: eval sets, seeds, policies, records, the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from derl_bench.cards import read_manifest, sha256_lines
from derl_bench.cli import main
from derl_bench.evaluation import (
    Policy,
    PolicyError,
    adapter_for,
    evaluate,
    load_policy,
    sample_entries,
)
from derl_bench.evaluation.record import file_sha256
from derl_bench.families.scienceworld.adapter import SCIENCEWORLD_SAMPLE
from derl_bench.leaderboard import problems_in_text

REPO = Path(__file__).resolve().parents[2]


def answer_with_the_last_number(observation: str, info: dict[str, Any]) -> str:
    """A user policy for the ``module:function`` spec."""
    numbers = [w.strip(".,?$") for w in observation.split() if w.strip(".,?$").isdigit()]
    return f"The answer is {numbers[-1] if numbers else 0}."


class AlwaysLook(Policy):
    """A user policy class for the ``module:Class`` spec."""

    def act(self, slot: int, observation: str, info: dict[str, Any]) -> str:
        return "look"


# -- eval sets ------------------------------------------------------------------------------------

def test_sample_is_fixed_ordered_and_independent_of_the_rest():
    entries = [f"task-{i}\t{i}" for i in range(500)]
    first = sample_entries(entries, 50, seed=0)
    assert first == sample_entries(list(entries), 50, seed=0)
    assert first == sorted(first, key=entries.index)  # manifest order kept
    assert len(set(first)) == 50
    assert sample_entries(entries, 50, seed=1) != first
    # an entry's membership depends only on itself and the seed
    assert set(sample_entries(entries[:250], 25, seed=0)) <= set(entries[:250])
    assert sample_entries(entries, 1000, seed=0) == entries


def test_eval_sets_match_the_card_manifests():
    alf = adapter_for("derl/ALFWorld-v0")
    assert [alf.level(lv).manifest.count for lv in ("L0", "L1", "L2")] == [140, 134, 38]
    l2 = alf.eval_set("L2")
    assert list(l2.entries) == read_manifest("alfworld", "L2-eval")
    assert l2.describe()["selection"] == "all"
    sci = adapter_for("derl/ScienceWorld-v0").eval_set("L0")
    described = sci.describe()
    assert described["selection"] == "sample" and described["size"] == SCIENCEWORLD_SAMPLE
    assert described["manifest_count"] == 1661
    assert described["episodes_sha256"] == sha256_lines(list(sci.entries))
    assert set(sci.entries) <= set(read_manifest("scienceworld", "L0-eval"))


def test_math_levels_come_from_the_card(data_root):
    gsm = adapter_for("derl/GSM8K-v0")
    assert list(gsm.levels()) == ["L0"]
    eval_set = gsm.eval_set("L0")
    assert eval_set.size == 1319 and eval_set.entries[0] == "test/0"
    assert eval_set.describe()["episodes_sha256"] == gsm.level("L0").manifest.sha256
    assert adapter_for("derl/MATH-v0").eval_set("L0").size == 500


# -- runs -----------------------------------------------------------------------------------------

def test_math_oracle_solves_and_random_baseline_mostly_fails(data_root):
    record, results = evaluate("derl/MATH-v0", "L0", "oracle", limit=6)
    assert [r.success for r in results] == [True] * 6
    assert record["results"]["success_rate"] == {"mean": 1.0, "se": 0.0}
    record, results = evaluate("derl/GSM8K-v0", "L0", "random", limit=12)
    assert record["results"]["n"] == 12
    assert sum(r.success for r in results) <= 3
    assert all(r.steps == 1 for r in results)


def test_results_do_not_depend_on_the_number_of_envs(data_root):
    _, one = evaluate("derl/GSM8K-v0", "L0", "random", limit=6, keep_trajectories=True)
    _, three = evaluate("derl/GSM8K-v0", "L0", "random", limit=6, num_envs=3,
                        keep_trajectories=True, base_seed=0)
    assert [r.log_line() for r in one] == [r.log_line() for r in three]
    assert [r.seed for r in one] == list(range(6))
    _, other_seed = evaluate("derl/GSM8K-v0", "L0", "random", limit=6, base_seed=100,
                             keep_trajectories=True)
    assert [r.seed for r in other_seed] == list(range(100, 106))
    assert [r.actions for r in other_seed] != [r.actions for r in one]


def test_alfworld_oracle_wins_and_random_is_capped(data_root):
    record, results = evaluate("derl/ALFWorld-v0", "L2", "oracle", limit=2)
    assert all(r.success for r in results)
    assert record["results"]["per_task_type"]["pick_cool_then_place_in_recep"]["n"] == 2
    _, results = evaluate("derl/ALFWorld-v0", "L2", "random", limit=2, num_envs=2,
                          keep_trajectories=True)
    for r in results:
        assert r.steps <= 30
        assert r.success or r.steps == 30


def test_scienceworld_random_uses_valid_actions_and_reports_a_score(data_root):
    record, results = evaluate("derl/ScienceWorld-v0", "L2", "random", limit=2,
                               keep_trajectories=True)
    assert record["results"]["mean_score"] is not None
    for r in results:
        assert r.task_type == r.entry.split("\t")[0]
        assert 1 <= r.steps <= 30 and r.score is not None


def test_user_callable_and_class_policies(data_root):
    spec = "tests.evaluation.test_evaluation:answer_with_the_last_number"
    record, results = evaluate("derl/GSM8K-v0", "L0", spec, limit=3, keep_trajectories=True)
    assert record["method"] == spec and record["policy"] == spec
    assert all(r.actions[0].startswith("The answer is ") for r in results)
    assert load_policy("tests.evaluation.test_evaluation:AlwaysLook").act(0, "", {}) == "look"


def test_policy_from_a_file(tmp_path):
    path = tmp_path / "agent.py"
    path.write_text("def act(observation, info):\n    return 'go north'\n")
    assert load_policy(f"{path}:act").act(0, "", {}) == "go north"


@pytest.mark.parametrize("spec", ["nonexistent_module_xyz:f", "json:no_such_function",
                                  "not-a-spec", "/no/such/file.py:act", "json:__doc__"])
def test_bad_policy_specs_fail_clearly(spec):
    with pytest.raises(PolicyError):
        load_policy(spec)


def test_llm_policy_on_a_tiny_model(data_root, tmp_path):
    from derl_bench.policies import init_tiny_model
    from derl_bench.policies.model_files import model_digest

    path = init_tiny_model(tmp_path / "tiny")
    record, results = evaluate("derl/GSM8K-v0", "L0", f"llm:{path}", limit=2, num_envs=2,
                               keep_trajectories=True, max_new_tokens=8)
    assert record["model"] == Path(path).name and record["method"] == "llm"
    # named from where the command ran, and pinned by the folder's digest
    assert record["policy"] == f"llm:{Path(os.path.relpath(path)).as_posix()}"
    assert record["setup"]["checkpoint_sha256"] == model_digest(path)
    assert len(results) == 2 and all(isinstance(r.actions[0], str) for r in results)


# -- records and the CLI --------------------------------------------------------------------------

def test_cli_writes_record_and_trajectories(data_root, tmp_path, capsys):
    out, traj = tmp_path / "rec.json", tmp_path / "traj.jsonl"
    status = main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "oracle",
                   "--limit", "4", "--num-envs", "2", "--output", str(out),
                   "--trajectories", str(traj), "--no-progress"])
    assert status == 0
    record = json.loads(out.read_text())
    assert record["results"]["n"] == 4 and record["results"]["successes"] == 4
    assert record["versions"]["math-verify"] == "0.9.0"
    assert record["data_checksums"] == {
        "gsm8k/test.jsonl": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"}
    lines = [json.loads(line) for line in traj.read_text().splitlines()]
    assert [line["index"] for line in lines] == [0, 1, 2, 3]
    assert all(line["success"] and len(line["actions"]) == 1 for line in lines)
    # a --limit run is a quick check: a leaderboard rejects it for its n
    problems = problems_in_text(out.read_text())
    assert problems == ["$.results.n: n=4 is too small: the eval set has 1319 episodes"]


def test_cli_rejects_bad_input_without_writing(tmp_path, capsys):
    out = tmp_path / "rec.json"
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L2", "--policy", "random",
                 "--output", str(out)]) == 2
    assert "has no level 'L2'" in capsys.readouterr().err
    assert main(["evaluate", "--env", "derl/Nope-v0", "--level", "L0", "--policy", "random",
                 "--output", str(out)]) == 2
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "x:y",
                 "--output", str(out), "--limit", "1"]) == 2
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "random",
                 "--method", "<script>", "--output", str(out), "--limit", "1"]) == 2
    assert "--method" in capsys.readouterr().err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    # No --limit: the whole eval set would run first, and its results would then be lost.
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "random",
                 "--output", str(folder), "--no-progress"]) == 2
    assert f"--output: {folder} is a folder; give a file name" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("x")
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "random",
                 "--output", str(tmp_path / "rec.json"), "--no-progress",
                 "--trajectories", str(tmp_path / "a-file" / "log.jsonl")]) == 2
    assert "a-file is a file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "results"]
    assert list(folder.iterdir()) == []


def test_recipe_and_meta_reward_are_recorded(data_root, tmp_path, monkeypatch):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("lr: 1e-6\n")
    out = tmp_path / "rec.json"
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "random",
                 "--limit", "1", "--output", str(out), "--recipe", str(recipe),
                 "--meta-reward", "g1 + 0.5 * g2", "--method", "my method", "--model",
                 "tiny", "--no-progress"]) == 0
    record = json.loads(out.read_text())
    # a recipe outside the repository's recipe folders goes into the record
    assert record["recipe"]["name"] == "recipe.yaml" and len(record["recipe"]["sha256"]) == 64
    assert record["recipe"]["config"] == {"lr": "1e-6"}
    assert record["meta_reward"]["expression"] and len(record["meta_reward"]["hash"]) >= 8
    assert (record["method"], record["model"]) == ("my method", "tiny")
    # one under baselines/ is cited by its path, relative to the repository's root
    monkeypatch.chdir(REPO)  # where the command runs is the root a path is relative to
    kept = REPO / "baselines" / "gsm8k-outcome.yaml"
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "random",
                 "--limit", "1", "--output", str(out), "--recipe", str(kept),
                 "--no-progress"]) == 0
    assert json.loads(out.read_text())["recipe"] == {
        "name": kept.name, "sha256": file_sha256(kept), "path": f"baselines/{kept.name}"}


# -- degenerate policies and the two ScienceWorld metrics ---------------------------------------

def test_stall_policy_games_only_the_published_metric(data_root):
    record, results = evaluate("derl/ScienceWorld-v0", "L0", "stall", limit=3,
                               keep_trajectories=True)
    res = record["results"]
    assert res["metric"] == "strict" and res["successes"] == 0
    assert res["published"]["successes"] == 3
    assert res["published"]["success_rate"] == {"mean": 1.0, "se": 0.0}
    for r in results:
        assert r.published and not r.success and 0 < r.score < 100
        assert r.actions[-1] == "wait" and r.log_line()["published_success"] is True
    problems = problems_in_text(json.dumps(record))
    assert problems == ["$.results.n: n=3 is too small: the eval set has 100 episodes"]


def test_records_of_envs_without_a_published_metric_have_none(data_root):
    record, _ = evaluate("derl/GSM8K-v0", "L0", "oracle", limit=2)
    assert "published" not in record["results"] and record["results"]["metric"] == "strict"


def test_majority_policy_answers_the_train_splits_most_common_answer(data_root):
    from collections import Counter

    from derl_bench.families.math.env import load_problems

    policy = load_policy("majority", "derl/GSM8K-v0")
    counts = Counter(p.answer for p in load_problems("gsm8k", "train"))
    assert counts[policy.answer] == max(counts.values())
    record, results = evaluate("derl/GSM8K-v0", "L0", "majority", limit=40,
                               keep_trajectories=True)
    assert {r.actions[0] for r in results} == {f"\\boxed{{{policy.answer}}}"}
    test = load_problems("gsm8k", "test")[:40]
    assert record["results"]["successes"] == sum(p.answer == policy.answer for p in test)


@pytest.mark.parametrize(("spec", "env_id"), [("stall", "derl/GSM8K-v0"),
                                              ("stall", "derl/ALFWorld-v0"),
                                              ("majority", "derl/ScienceWorld-v0")])
def test_degenerate_policies_refuse_envs_they_cannot_game(spec, env_id):
    with pytest.raises(PolicyError, match=spec):
        load_policy(spec, env_id)


@pytest.mark.parametrize("env_id", ["derl/GSM8K-v0", "derl/Arithmetic-v0", "derl/ALFWorld-v0",
                                    "derl/ScienceWorld-v0"])
def test_success_is_the_cards_success_primitive(env_id):
    from derl_bench.evaluation.families import adapter_for

    adapter = adapter_for(env_id)
    name = adapter.spec.success_primitive
    for value in (0.0, 1.0):
        # every other signal says the opposite: only the primitive decides
        info = {"primitives": {name: value}, "won": not value, "success": not value,
                "score": 0.0}
        assert adapter.outcome(None, 1.0 - value, True, info)[0] is bool(value)
    with pytest.raises(KeyError, match=name):
        adapter.outcome(None, 1.0, True, {"won": True})
