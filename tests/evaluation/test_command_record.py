"""Records of command policies: an ``evaluate_commands`` result and its episodes become a run
record of the compact-constrained interface that validates on a board; what is not a pass over
the level's eval games is refused, by the builder and by ``derl-bench evaluate --commands``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from derl_bench.cli import main
from derl_bench.evaluation import adapter_for
from derl_bench.evaluation.commands import summarise
from derl_bench.evaluation.record import (
    command_record,
    file_sha256,
    recipe_block,
    recipe_digest,
)
from derl_bench.evaluation.schema import COMPACT_CONSTRAINED
from derl_bench.leaderboard import validate_file
from derl_bench.policies.model_files import model_digest
from derl_bench.rollout.commands import CommandEpisode, CommandStep

ALFWORLD = "derl/ALFWorld-v0"


def _episodes(level: str, wins: int = 3) -> list[CommandEpisode]:
    """One episode per game of the level's eval set, in order; every ``wins``-th won."""
    step = CommandStep(ids=([], []), commands=["look"], chosen=0, log_prob=0.0, label=None,
                       actor="policy")
    entries = adapter_for(ALFWORLD).eval_set(level).entries
    return [CommandEpisode({"index": i}, game, game.split("/")[1].split("-")[0],
                           [step] * (4 + i % 27 if i % wins == 0 else 30),
                           won=i % wins == 0, truncated=i % wins != 0)
            for i, game in enumerate(entries)]


def _evaluation(episodes: list[CommandEpisode], level: str = "L0") -> dict[str, Any]:
    """What ``evaluate_commands`` returns for these episodes."""
    return {"level": level, "split": "eval", **summarise(episodes), "seconds": 41.5}


def _board_file(tmp_path: Path, record: dict[str, Any], name: str) -> Path:
    path = tmp_path / "leaderboards" / "alfworld" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2), encoding="utf-8")
    return path


BASE = {"method": "teacher-dagger", "model": "tiny-command-633k",
        "model_dir": "runs/alfworld/base", "checkpoint": "final weights of DAgger round 4",
        "env": ALFWORLD}


@pytest.mark.parametrize("level", ["L0", "L2"])
def test_a_full_evaluation_makes_a_record_that_validates_on_a_board(data_root, tmp_path, level,
                                                                    capsys):
    episodes = _episodes(level)
    record = command_record(_evaluation(episodes, level), episodes, seed=0, **BASE)
    assert record["policy_interface"] == COMPACT_CONSTRAINED
    assert record["kind"] == "run" and "protocol" not in record  # the strict protocol
    assert record["method"] == "teacher-dagger (seed 0)"
    assert record["policy"] == "commands:runs/alfworld/base,greedy"
    assert record["meta_reward"] is None and record["recipe"] is None
    results = record["results"]
    won = sum(e.won for e in episodes)
    assert (results["n"], results["successes"]) == (len(episodes), won)
    assert results["mean_steps"] == sum(e.length for e in episodes) / len(episodes)
    assert results["wall_time_s"] == 41.5
    assert sum(b["n"] for b in results["per_task_type"].values()) == len(episodes)
    assert record["setup"]["checkpoint"] == BASE["checkpoint"]
    assert record["data_checksums"] == adapter_for(ALFWORLD).data_checksums(
        adapter_for(ALFWORLD).eval_set(level))
    path = _board_file(tmp_path, record, f"teacher-dagger-s0-{level}.json")
    assert validate_file(path).problems == []
    assert main(["leaderboard", "validate", "--dir", str(tmp_path / "leaderboards")]) == 0
    assert "ok " in capsys.readouterr().out


def test_a_trained_method_records_its_meta_reward_recipe_and_seed(data_root, tmp_path):
    episodes = _episodes("L0")
    config = {"lr": 1e-4, "group": 8, "meta_reward": "success"}
    record = command_record(_evaluation(episodes), episodes, method="derl", seed=2,
                            meta_reward="success + 0.1 * env_reward", recipe=config,
                            level="L0", **{k: v for k, v in BASE.items() if k != "method"})
    assert record["method"] == "derl (seed 2)"
    assert set(record["meta_reward"]) == {"expression", "hash"}
    assert record["recipe"] == recipe_block(config)
    assert validate_file(_board_file(tmp_path, record, "derl-s2-L0.json")).problems == []
    # the board's file name must name the seed
    assert any("-s2-L0.json" in p for p in
               validate_file(_board_file(tmp_path, record, "derl-L0.json")).problems)


def test_recipe_blocks_cite_the_files_the_repository_keeps_and_embed_the_rest(tmp_path):
    kept = tmp_path / "baselines" / "base.yaml"
    evidence = tmp_path / "leaderboards" / "alfworld" / "evidence" / "base.yaml"
    elsewhere = tmp_path / "runs" / "base.yaml"
    for path in (kept, evidence, elsewhere):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("lr: 0.001\n")
    assert recipe_block(kept, repository=tmp_path) == {
        "name": "base.yaml", "sha256": file_sha256(kept), "path": "baselines/base.yaml"}
    assert recipe_block(evidence, benchmark="alfworld", repository=tmp_path)["path"] == (
        "leaderboards/alfworld/evidence/base.yaml")
    embedded = {"name": "base.yaml", "sha256": recipe_digest({"lr": 0.001}),
                "config": {"lr": 0.001}}
    assert recipe_block(elsewhere, repository=tmp_path) == embedded
    # another board's evidence is not this record's: its recipe goes into the record
    assert recipe_block(evidence, benchmark="gsm8k", repository=tmp_path) == embedded
    assert recipe_block({"b": 1, "a": 2}) == recipe_block({"a": 2, "b": 1})
    assert recipe_block({"a": 1}) != recipe_block({"a": 2})
    elsewhere.write_text("- a list\n")
    with pytest.raises(ValueError, match="holds no mapping"):
        recipe_block(elsewhere, repository=tmp_path)


def test_a_model_folder_is_named_where_the_command_ran_and_pinned_by_its_digest(
        data_root, tmp_path, monkeypatch):
    folder = tmp_path / "runs" / "grpo-s0" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "trainer_state.json").write_text('{"at": "/home/me"}')  # not the policy
    monkeypatch.chdir(tmp_path)
    episodes = _episodes("L0")
    record = command_record(_evaluation(episodes), episodes, seed=0,
                            **{**BASE, "model_dir": folder})
    assert record["policy"] == "commands:runs/grpo-s0/model,greedy"
    digest = record["setup"]["checkpoint_sha256"]
    assert digest == model_digest(folder) and len(digest) == 64
    (folder / "trainer_state.json").write_text("{}")
    assert model_digest(folder) == digest
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert model_digest(folder) != digest
    assert validate_file(_board_file(tmp_path, record, "teacher-dagger-s0-L0.json")).ok


def _swap(episodes: list[CommandEpisode]) -> list[CommandEpisode]:
    return [episodes[1], episodes[0], *episodes[2:]]


@pytest.mark.parametrize(("name", "change", "reason"), [
    ("validation-split", lambda ev, eps: ({**ev, "split": "validation"}, eps), "eval split"),
    ("other-level", lambda ev, eps: ({**ev, "level": "L1"}, eps), "the L1 eval set"),
    ("games-out-of-order", lambda ev, eps: (ev, _swap(eps)), "game 0 of the L0 eval set"),
    ("episodes-of-another-evaluation", lambda ev, eps: (ev, eps[:-1]), "not the episodes"),
    ("no-episodes", lambda ev, eps: (ev, []), "no episodes"),
    ("too-many-episodes", lambda ev, eps: ({**ev, "games": len(eps) + 1},
                                           [*eps, eps[0]]), "has 140 games"),
])
def test_the_builder_refuses_what_is_not_a_pass_over_the_eval_games(data_root, name, change,
                                                                    reason):
    episodes = _episodes("L0")
    evaluation, episodes = change(_evaluation(episodes), episodes)
    if name == "too-many-episodes":
        evaluation["won"] = sum(e.won for e in episodes)
    with pytest.raises(ValueError, match=reason):
        command_record(evaluation, episodes, **BASE)


@pytest.mark.parametrize(("changes", "reason"), [
    ({"level": "L2"}, "level 'L2', but the evaluation is of level 'L0'"),
    ({"env": "derl/GSM8K-v0"}, "offers no 'compact-constrained'"),
    ({"checkpoint": ""}, "which weights"),
    ({"method": "$(rm -rf /)"}, r"\$.method"),
    ({"model_dir": "runs/my model"}, r"\$.policy"),
])
def test_the_builder_refuses_bad_arguments(data_root, changes, reason):
    episodes = _episodes("L0")
    with pytest.raises(ValueError, match=reason):
        command_record(_evaluation(episodes), episodes, **{**BASE, **changes})


@pytest.fixture(scope="module")
def command_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A command model with random weights (its play is arbitrary; the plumbing is real)."""
    import torch

    from derl_bench.policies.command_model import init_command_model

    torch.set_num_threads(1)  # the evaluations below run in this process

    return Path(init_command_model(tmp_path_factory.mktemp("models") / "tiny-command", ALFWORLD))


def test_a_short_real_evaluation_becomes_a_record(data_root, command_model, tmp_path):
    from derl_bench.evaluation.commands import evaluate_commands

    episodes: list[CommandEpisode] = []
    evaluation = evaluate_commands(command_model, "L0", env=ALFWORLD, limit=2, envs=2,
                                   episodes_out=episodes)
    record = command_record(evaluation, episodes, seed=0, **{**BASE, "model_dir": command_model})
    assert record["results"]["n"] == 2
    assert record["results"]["mean_steps"] == sum(e.length for e in episodes) / 2
    assert record["policy"] == f"commands:{Path(os.path.relpath(command_model)).as_posix()},greedy"
    assert record["setup"]["checkpoint_sha256"] == model_digest(command_model)
    # a partial pass is a record, but not one a board takes
    problems = validate_file(_board_file(tmp_path, record, "teacher-dagger-s0-L0.json")).problems
    assert problems == ["$.results.n: n=2 is too small: the eval set has 140 episodes"]


def test_the_cli_evaluates_a_command_model_and_writes_its_record(data_root, command_model,
                                                                 tmp_path, capsys):
    out, log = tmp_path / "rec.json", tmp_path / "episodes.jsonl"
    status = main(["evaluate", "--env", ALFWORLD, "--level", "L0", "--commands",
                   str(command_model), "--method", "teacher-dagger", "--train-seed", "1",
                   "--model", "tiny-command-633k", "--checkpoint", "final", "--limit", "2",
                   "--num-envs", "2", "--output", str(out), "--trajectories", str(log)])
    assert status == 0, capsys.readouterr().err
    record = json.loads(out.read_text())
    assert (record["method"], record["model"], record["results"]["n"]) == (
        "teacher-dagger (seed 1)", "tiny-command-633k", 2)
    assert record["policy_interface"] == COMPACT_CONSTRAINED
    assert "[compact-constrained]" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes.jsonl", "rec.json"]
    # the per-episode log: one line a game, in the split's order, agreeing with the record
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["index"] for line in lines] == [0, 1]
    assert sum(line["success"] for line in lines) == record["results"]["successes"]
    for line in lines:
        assert len(line["actions"]) == len(line["log_probs"]) == line["steps"] <= 30
        assert line["truncated"] == (not line["success"] and line["steps"] == 30)


@pytest.mark.parametrize(("extra", "reason"), [
    ([], "needs --method"),
    (["--method", "x", "--env-swap", "derl/GSM8K-v0"], "has no command policies"),
    (["--method", "x", "--protocol", "rlvmr"], "strict protocol"),
    (["--method", "x", "--seed", "3"], "--seed does not apply"),
    (["--method", "x", "--temperature", "0"], "--temperature must be a number > 0"),
    (["--method", "x", "--temperature", "nan"], "--temperature must be a number > 0"),
    (["--method", "x", "--temperature", "1", "--seed", "-1"], "seed must be a whole number >= 0"),
    (["--method", "x", "--folder", "missing"], "is not a folder"),
    (["--method", "$(reboot)"], "--method"),
    (["--method", "x", "--folder", "my model"], "the policy spec"),
    (["--method", "x", "--folder", "model!"], "the model name"),
])
def test_the_cli_refuses_bad_input_with_status_2(command_model, tmp_path, capsys, extra,
                                                 reason):
    env, folder = ALFWORLD, str(command_model)
    if "--env-swap" in extra:
        env = extra[extra.index("--env-swap") + 1]
        extra = extra[:extra.index("--env-swap")]
    if "--folder" in extra:
        folder = str(tmp_path / extra[extra.index("--folder") + 1])
        if not folder.endswith("missing"):  # a folder that exists, named as a board cannot
            Path(folder).mkdir()
        extra = extra[:extra.index("--folder")]
    extra = [str(tmp_path / a) if a.endswith(".jsonl") else a for a in extra]
    status = main(["evaluate", "--env", env, "--level", "L0", "--commands", folder,
                   "--checkpoint", "final", "--output", str(tmp_path / "rec.json"), *extra])
    assert status == 2
    assert reason in capsys.readouterr().err
    assert not (tmp_path / "rec.json").exists()


@pytest.mark.parametrize(("name", "damage", "why"), [
    ("model.safetensors", lambda data: data[: len(data) // 2],
     "incomplete metadata, file not fully covered"),
    ("tokenizer.json", lambda data: b"", "not JSON: Expecting value at line 1"),
    ("config.json", lambda data: data[:-10], "not JSON"),
])
def test_the_cli_names_a_damaged_file_of_the_command_model(data_root, command_model, tmp_path,
                                                           capsys, name, damage, why):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(command_model, folder)
    (folder / name).write_bytes(damage((folder / name).read_bytes()))
    out = tmp_path / "rec.json"
    status = main(["evaluate", "--env", ALFWORLD, "--level", "L0", "--commands", str(folder),
                   "--method", "teacher-dagger", "--checkpoint", "final", "--limit", "1",
                   "--no-progress", "--output", str(out)])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith(f"error: the command model cannot be loaded: {folder / name} is "
                          f"damaged (") and why in err
    assert len(err.splitlines()) == 1
    assert not out.exists()


def test_the_cli_samples_a_command_model_at_a_temperature_seeded(data_root, command_model,
                                                                 tmp_path, capsys):
    """``--temperature`` draws every command; the spec records the temperature and the seed,
    and the same seed plays the same episodes again."""
    def sampled(seed: int, name: str) -> dict:
        out = tmp_path / name
        status = main(["evaluate", "--env", ALFWORLD, "--level", "L0", "--commands",
                       str(command_model), "--method", "grpo-outcome", "--checkpoint", "final",
                       "--limit", "2", "--num-envs", "2", "--temperature", "1",
                       "--seed", str(seed), "--no-progress", "--output", str(out)])
        assert status == 0, capsys.readouterr().err
        return json.loads(out.read_text())

    first, again, other = sampled(5, "a.json"), sampled(5, "b.json"), sampled(6, "c.json")
    folder = Path(os.path.relpath(command_model)).as_posix()
    assert first["policy"] == f"commands:{folder},temperature=1,seed=5"
    assert other["policy"].endswith(",temperature=1,seed=6")
    def played(record: dict) -> dict:
        return {k: v for k, v in record["results"].items() if k != "wall_time_s"}

    assert played(first) == played(again)
    assert (first["seeds"]["base"], other["seeds"]["base"]) == (5, 6)


def test_temperature_goes_with_commands_only(capsys):
    status = main(["evaluate", "--env", "derl/Arithmetic-v0", "--level", "L0", "--policy",
                   "random", "--temperature", "1", "--limit", "1"])
    assert status == 2 and "--temperature goes with --commands" in capsys.readouterr().err


def test_train_seed_goes_with_commands_only(tmp_path, capsys):
    status = main(["evaluate", "--env", "derl/Arithmetic-v0", "--level", "L0", "--policy",
                   "random", "--train-seed", "0", "--limit", "1"])
    assert status == 2 and "--train-seed goes with --commands" in capsys.readouterr().err


def test_goal_progress_is_recorded_beside_success(data_root, tmp_path):
    """Agents' secondary endpoint: the goal progress at each episode's end, its mean over the
    eval set and per task type, in a record that validates (an L2 policy can make progress
    on a held-out type without finishing it)."""
    def ending(progress: float, won: bool) -> CommandStep:
        return CommandStep(ids=([], []), commands=["look"], chosen=0, log_prob=0.0,
                           label=None, actor="policy",
                           primitives={"success": float(won), "goal_progress": progress})

    episodes = _episodes("L2")
    for i, episode in enumerate(episodes):
        episode.steps = [*episode.steps[:-1], ending(1.0 if episode.won else (i % 3) / 3,
                                                     episode.won)]
    record = command_record(_evaluation(episodes, "L2"), episodes, seed=0, **BASE)
    progress = record["results"]["goal_progress"]
    finals = [1.0 if e.won else (i % 3) / 3 for i, e in enumerate(episodes)]
    assert progress["mean"] == pytest.approx(sum(finals) / len(finals))
    assert progress["se"] > 0
    for task_type, block in record["results"]["per_task_type"].items():
        mine = [f for f, e in zip(finals, episodes, strict=True) if e.task_type == task_type]
        assert block["goal_progress"] == pytest.approx(sum(mine) / len(mine))
    assert validate_file(_board_file(tmp_path, record, "teacher-dagger-s0-L2.json")).problems == []
    # Episodes that do not report it leave the field out (success alone, as before).
    plain = _episodes("L2")
    assert "goal_progress" not in command_record(_evaluation(plain, "L2"), plain, seed=0,
                                                 **BASE)["results"]
