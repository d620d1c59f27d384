"""End to end on GSM8K and MATH with the tiny model: train, checkpoint, log, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from derl_bench.cli import main
from derl_bench.grpo import load_config, train
from derl_bench.grpo.runlog import read_metrics

REPO = Path(__file__).resolve().parents[2]

BASELINES = REPO / "baselines"
# A reward that differs between samples even for a random model, so every step really updates.
VARYING = "meta_reward=outcome - 0.01 * response_length"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_run_outputs(run: Path, steps: int) -> list[dict]:
    metrics = read_metrics(run)
    assert [m["step"] for m in metrics] == list(range(steps))
    for key in ("reward/mean", "success/mean", "kl", "entropy", "clip_fraction",
                "length/completion_mean"):
        assert key in metrics[-1]
    assert (run / "checkpoints" / f"step-{steps}" / "model.safetensors").is_file()
    assert (run / "checkpoints" / f"step-{steps}" / "trainer_state.pt").is_file()
    assert (run / "learning_curve.png").read_bytes()[:8] == PNG_MAGIC
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    return metrics


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run / "checkpoints" / f"step-{step}" / "model.safetensors")


def test_gsm8k_resume_continues_the_same_run(data_root, tmp_path):
    recipe = str(BASELINES / "gsm8k-outcome.yaml")
    split = tmp_path / "split"
    assert main(["train", recipe, "--output", str(split), "steps=2", "progress=false",
                 VARYING]) == 0
    assert main(["train", recipe, "--output", str(split), "--resume", "steps=3",
                 "progress=false", VARYING]) == 0
    resumed = assert_run_outputs(split, 3)
    assert sorted(p.name for p in (split / "checkpoints").iterdir()) == ["step-2", "step-3"]

    straight = train(load_config(recipe, [f"output_dir={tmp_path / 'straight'}", "steps=3",
                                          "progress=false", VARYING]))
    for a, b in zip(straight, resumed, strict=True):
        assert a["reward/mean"] == b["reward/mean"] and a["loss"] == pytest.approx(b["loss"])
    assert any(m["loss"] != 0 for m in resumed) and resumed[-1]["kl"] > 0
    final, reference = weights(split, 3), weights(tmp_path / "straight", 3)
    assert all(torch.equal(final[k], reference[k]) for k in final)
    assert not all(torch.equal(final[k], weights(split, 2)[k]) for k in final)


@pytest.mark.parametrize("recipe", ["math-outcome", "math-average", "gsm8k-average",
                                    "gsm8k-outcome-format", "math-outcome-format"])
def test_math_recipes_run(data_root, tmp_path, recipe):
    run = tmp_path / recipe
    assert main(["train", str(BASELINES / f"{recipe}.yaml"), "--output", str(run), "steps=1",
                 "progress=false"]) == 0
    [metrics] = assert_run_outputs(run, 1)
    assert 0.0 <= metrics["reward/mean"] <= 1.0
    saved = json.loads(json.dumps(load_config(run / "config.yaml").to_dict()))
    assert saved["env_id"].startswith("derl/") and saved["steps"] == 1


def test_trl_grpo_trainer_path_trains_and_resumes(data_root, tmp_path):
    recipe = str(BASELINES / "gsm8k-average.yaml")
    run = tmp_path / "trl"
    common = ["--output", str(run), "trainer=trl", "progress=false", "tensorboard=false",
              "max_new_tokens=16", VARYING]
    assert main(["train", recipe, "steps=1", *common]) == 0
    assert (run / "trl" / "checkpoint-1").is_dir()
    assert main(["train", recipe, "--resume", "steps=2", *common]) == 0
    metrics = read_metrics(run)
    assert [m["step"] for m in metrics] == [0, 1]
    assert all({"reward/mean", "success/mean", "kl", "entropy"} <= m.keys() for m in metrics)
    assert metrics[1]["kl"] > 0  # the resumed step trained away from the reference
    assert (run / "trl" / "checkpoint-2").is_dir()
    assert (run / "learning_curve.png").read_bytes()[:8] == PNG_MAGIC


def test_bad_requests_are_rejected_without_writing(data_root, tmp_path, capsys):
    recipe = str(BASELINES / "gsm8k-outcome.yaml")
    fresh = tmp_path / "fresh"
    assert main(["train", recipe, "--output", str(fresh), "--resume"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["train", recipe, "--output", str(fresh), "meta_reward=outcome +"]) == 2
    assert main(["train", recipe, "--output", str(fresh), "group_size=1"]) == 2
    assert main(["train", recipe, "--output", str(fresh), "no_such_key=3"]) == 2
    assert main(["train", str(tmp_path / "missing.yaml")]) == 2
    assert not fresh.exists()

    run = tmp_path / "run"
    assert main(["train", recipe, "--output", str(run), "steps=1", "progress=false"]) == 0
    before = (run / "metrics.jsonl").read_text()
    assert main(["train", recipe, "--output", str(run), "--resume", "steps=2",
                 "meta_reward=g2"]) == 2
    assert "meta_reward" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_text() == before
    # A damaged config.yaml cannot be compared with: the resume is refused, naming it.
    (run / "config.yaml").write_text("steps: [\n")
    assert main(["train", recipe, "--output", str(run), "--resume", "steps=2"]) == 2
    assert f"{run / 'config.yaml'} is damaged" in capsys.readouterr().err
    assert (run / "config.yaml").read_text() == "steps: [\n"
    assert (run / "metrics.jsonl").read_text() == before
    # An empty recipe is refused before anything is written.
    (tmp_path / "empty.yaml").write_text("")
    assert main(["train", str(tmp_path / "empty.yaml"), "--output", str(fresh)]) == 2
    assert "is empty" in capsys.readouterr().err
    assert not fresh.exists()


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_folder_belongs_to_one_run(data_root, tmp_path, capsys):
    recipe = str(BASELINES / "gsm8k-outcome.yaml")
    run = tmp_path / "run"
    common = ["progress=false", "tensorboard=false", "max_new_tokens=8"]
    assert main(["train", recipe, "--output", str(run), "steps=1", *common]) == 0
    capsys.readouterr()
    before = _tree(run)
    # Another run into the same folder is refused before anything is touched ...
    assert main(["train", recipe, "--output", str(run), "steps=1", "seed=7", *common]) == 2
    assert "already holds another run" in capsys.readouterr().err
    # ... so is a run whose inputs are wrong, even with --overwrite ...
    for bad in ("env_kwargs={level: L9}", "env_kwargs={no_such_kwarg: 1}",
                f"model={tmp_path / 'no-such-model'}"):
        assert main(["train", recipe, "--output", str(run), "--overwrite", bad, *common]) == 2
    err = capsys.readouterr().err
    assert f"no such model folder: {tmp_path / 'no-such-model'}" in err
    assert "Traceback" not in err
    assert _tree(run) == before
    # ... and a folder of unrelated files is not reused either.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["train", recipe, "--output", str(mine), "steps=1", *common]) == 2
    assert "files that are not a derl-bench run (notes.txt)" in capsys.readouterr().err
    assert _tree(mine) == {"notes.txt": b"keep me"}
    # --overwrite replaces the old run once the new one has passed its checks.
    assert main(["train", recipe, "--output", str(run), "--overwrite", "steps=1", "seed=7",
                 *common]) == 0
    assert load_config(run / "config.yaml").seed == 7
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1"]
    file_output = tmp_path / "a-file"
    file_output.write_text("x")
    assert main(["train", recipe, "--output", str(file_output / "run"), *common]) == 2
    assert "is a file" in capsys.readouterr().err


def test_resume_refuses_another_runs_checkpoint(data_root, tmp_path, capsys):
    import shutil

    import numpy as np

    from derl_bench.grpo.checkpoint import load_trainer_state

    recipe = str(BASELINES / "gsm8k-outcome.yaml")
    common = ["progress=false", "tensorboard=false", "max_new_tokens=8"]
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    assert main(["train", recipe, "--output", str(theirs), "steps=2", *common]) == 0
    assert main(["train", recipe, "--output", str(ours), "steps=1", *common]) == 0
    our_id, their_id = ((run / "run-id").read_text().strip() for run in (ours, theirs))
    assert our_id != their_id
    assert load_trainer_state(ours / "checkpoints" / "step-1")["run_id"] == our_id
    # Another run's later checkpoint in the folder is not continued under this run's config.
    foreign = ours / "checkpoints" / "step-2"
    shutil.copytree(theirs / "checkpoints" / "step-2", foreign)
    before = _tree(ours)
    assert main(["train", recipe, "--output", str(ours), "--resume", "steps=3", *common]) == 2
    err = capsys.readouterr().err
    assert f"{foreign} belongs to run {their_id}" in err and f"holds run {our_id}" in err
    assert _tree(ours) == before
    # A checkpoint from before checkpoints carried a run id resumes, with a warning, and the
    # run gets an id that its later checkpoints carry.
    shutil.rmtree(foreign)
    (ours / "run-id").unlink()
    state = load_trainer_state(ours / "checkpoints" / "step-1")
    del state["run_id"]
    state["rng"]["numpy"] = np.random.get_state()  # as such checkpoints held it
    torch.save(state, ours / "checkpoints" / "step-1" / "trainer_state.pt")
    assert main(["train", recipe, "--output", str(ours), "--resume", "steps=2", *common]) == 0
    assert "written before checkpoints carried their run's id" in capsys.readouterr().err
    new_id = (ours / "run-id").read_text().strip()
    assert load_trainer_state(ours / "checkpoints" / "step-2")["run_id"] == new_id


def test_a_damaged_checkpoint_is_named_with_the_last_good_one(data_root, tmp_path, capsys):
    recipe = str(BASELINES / "gsm8k-outcome.yaml")
    run = tmp_path / "run"
    common = ["--output", str(run), "progress=false", "tensorboard=false", "max_new_tokens=8",
              "save_every=1", "keep_checkpoints=2"]
    assert main(["train", recipe, "steps=2", *common]) == 0
    first, last = run / "checkpoints" / "step-1", run / "checkpoints" / "step-2"
    for name in ("trainer_state.pt", "model.safetensors"):
        intact = (last / name).read_bytes()
        for damaged in (intact[: len(intact) // 2], b"garbage" * 40):
            (last / name).write_bytes(damaged)
            before = _tree(run)
            assert main(["train", recipe, "--resume", "steps=3", *common]) == 2
            err = capsys.readouterr().err
            assert f"{last / name} is damaged" in err, err
            assert f"the last good checkpoint is {first}: delete {last}" in err
            assert "weights_only" not in err and "Traceback" not in err
            assert _tree(run) == before
        (last / name).write_bytes(intact)
    state = (first / "trainer_state.pt").read_bytes()
    (first / "trainer_state.pt").write_bytes(state[:100])
    (last / "model.safetensors").write_bytes(b"")
    assert main(["train", recipe, "--resume", "steps=3", *common]) == 2
    assert "no earlier checkpoint of the run is intact" in capsys.readouterr().err
    # Going back to the last good checkpoint, as the message says, continues the run.
    (first / "trainer_state.pt").write_bytes(state)
    import shutil

    shutil.rmtree(last)
    assert main(["train", recipe, "--resume", "steps=2", *common]) == 0
    assert [m["step"] for m in read_metrics(run)] == [0, 1]
