"""One run per folder: a folder is held by one command at a time, and ``--overwrite`` replaces
only a derl-bench run (docs/guarantees.md)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from derl_bench.cli import main
from derl_bench.cli._runs import hold_output

REPO = Path(__file__).resolve().parents[1]
TRAIN = {"name": "tiny", "env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 1,
         "group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8, "tensorboard": False,
         "progress": False, "meta_reward": "outcome"}
META = {"name": "tiny-meta", "method": "derl", "outer_steps": 50, "population": 3,
        "validation_episodes": 2, "optimizer_max_new_tokens": 16, "optimizer_sft_examples": 16,
        "optimizer_sft_steps": 2, "eval_levels": [], "seed": 4, "progress": False,
        "executor": "local", "inner": {k: v for k, v in TRAIN.items()
                                       if k not in ("name", "meta_reward", "progress")}}
IN_USE = "is in use by another derl-bench command (pid {pid} "


def _recipe(tmp_path: Path, name: str, recipe: dict) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _start(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "derl_bench", *argv], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@pytest.fixture
def running() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start ``derl-bench ARGS`` in another process; each is killed (its whole process group)
    when the test ends."""
    started: list[subprocess.Popen] = []

    def start(*argv: str) -> subprocess.Popen:
        started.append(_start(*argv))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def _wait_for(predicate: Callable[[], bool], proc: subprocess.Popen,
              timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError("the run ended before it got there: " + proc.stdout.read())
        if time.monotonic() > deadline:
            raise AssertionError("the run never got there")
        time.sleep(0.05)


def test_overwrite_never_offers_to_delete_files_that_are_not_a_run(tmp_path, capsys):
    recipe = _recipe(tmp_path, "tiny.yaml", TRAIN)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["train", recipe, "--output", str(mine)]) == 2
    err = capsys.readouterr().err
    assert "holds files that are not a derl-bench run (notes.txt)" in err
    assert "choose another --output, or empty the folder" in err and "--overwrite" not in err
    # Following the advice the old message gave deletes nothing either.
    assert main(["train", recipe, "--output", str(mine), "--overwrite"]) == 2
    assert "holds files that are not a derl-bench run (notes.txt)" in capsys.readouterr().err
    # A config.yaml of one's own is not a run: a run also has its id.
    (mine / "config.yaml").write_text("lr: 3\n")
    assert main(["meta", _recipe(tmp_path, "meta.yaml", META), "--output", str(mine),
                 "--overwrite"]) == 2
    assert "not a derl-bench run (config.yaml, notes.txt)" in capsys.readouterr().err
    assert _tree(mine) == {"config.yaml": b"lr: 3\n", "notes.txt": b"keep me"}


def test_overwrite_of_a_running_train_is_refused_and_a_killed_one_is_free(tmp_path, capsys,
                                                                        running):
    recipe = _recipe(tmp_path, "tiny.yaml", TRAIN)
    run = tmp_path / "run"
    # It keeps every checkpoint, so the first one stays unless someone else deletes it.
    proc = running("train", recipe, "--output", str(run), "steps=10000",
                   "keep_checkpoints=10000")
    first = run / "checkpoints" / "step-1"
    _wait_for(lambda: (first / "trainer_state.pt").is_file(), proc)
    for flag in ("--overwrite", "--resume"):
        assert main(["train", recipe, "--output", str(run), flag, "steps=10000"]) == 2
        err = capsys.readouterr().err
        assert IN_USE.format(pid=proc.pid) in err, err
        assert f"train {recipe} --output {run} steps=10000 keep_checkpoints=10000)" in err
    assert (first / "trainer_state.pt").is_file() and proc.poll() is None
    # The OS lets go of a killed run's folder: the next command gets past the lock at once (to
    # the check of its model, which comes after it, so nothing of the run is touched).
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _tree(run)
    assert ".lock" in before  # the killed run's, naming it: taken over
    missing = tmp_path / "no-such-model"
    assert main(["train", recipe, "--output", str(run), "--overwrite", f"model={missing}"]) == 2
    assert f"no such model folder: {missing}" in capsys.readouterr().err
    assert _tree(run) == {k: v for k, v in before.items() if k != ".lock"}


def test_two_trains_started_together_into_a_new_folder_one_runs(tmp_path, running):
    recipe = _recipe(tmp_path, "tiny.yaml", TRAIN)
    run = tmp_path / "new"
    procs = [running("train", recipe, "--output", str(run)) for _ in range(2)]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    codes = sorted(proc.returncode for proc in procs)
    assert codes == [0, 2], outputs
    refused = outputs[[p.returncode for p in procs].index(2)]
    # Started together, the second finds the first still running (or, on a machine slow to
    # start it, already finished).
    assert "is in use by another derl-bench command" in refused \
        or "already holds another run" in refused, refused
    assert [json.loads(line)["step"] for line in
            (run / "metrics.jsonl").read_text().splitlines()] == [0]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1"]


def test_meta_resume_while_meta_runs_in_the_folder_is_refused(tmp_path, capsys, running):
    recipe = _recipe(tmp_path, "meta.yaml", META)
    out = tmp_path / "meta"
    proc = running("meta", recipe, "--output", str(out))
    _wait_for(lambda: (out / "run-id").is_file(), proc)
    before = (out / "run-id").read_text()
    assert main(["meta", recipe, "--output", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and IN_USE.format(pid=proc.pid) in err, err
    assert (out / "run-id").read_text() == before and proc.poll() is None


HOLD = """
import argparse, sys
from derl_bench.cli._runs import hold_output
with hold_output(sys.argv[1], argparse.Namespace(command_line="derl-bench held"),
                 whole=sys.argv[2] == "whole"):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.parametrize("command", ["proxy", "proposer-check", "demo", "sft", "agent-base"])
def test_every_command_that_writes_a_folder_refuses_a_held_one(tmp_path, capsys, command):
    out = tmp_path / "out"
    argv, whole = {
        "proxy": (["proxy", "--output", str(out), "--small"], False),
        "proposer-check": (["proposer-check", "--output", str(out), "--small"], False),
        "demo": (["demo", "--output", str(out)], False),
        "sft": (["model", "sft", str(out), "--env", "derl/Arithmetic-v0", "--steps", "1"],
                True),
        "agent-base": (["model", "agent-base", str(out)], True),
    }[command]
    # Another process holds the folder, as the command itself would.
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out), "whole" if whole else ""],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"the output folder {out} " + IN_USE.format(pid=holder.pid) in err, err
        assert "derl-bench held)" in err
    finally:
        holder.communicate("")
    assert holder.returncode == 0
    assert not out.exists()


def test_resume_into_a_run_of_the_other_command_is_refused_naming_its_kind(tmp_path, capsys,
                                                                          running):
    train_recipe = _recipe(tmp_path, "tiny.yaml", TRAIN)
    meta_recipe = _recipe(tmp_path, "meta.yaml", META)
    trained = tmp_path / "trained"
    assert main(["train", train_recipe, "--output", str(trained)]) == 0
    capsys.readouterr()
    before = _tree(trained)
    assert main(["meta", meta_recipe, "--output", str(trained), "--resume"]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --resume: {trained} holds a train run (config.yaml, run-id), not a "
        "reward-discovery (meta) run; resume it with derl-bench train, or give --output the "
        "folder of the meta run to resume")
    assert _tree(trained) == before
    # A reward-discovery run killed once it has started, as one left to be resumed is.
    searched = tmp_path / "searched"
    proc = running("meta", meta_recipe, "--output", str(searched))
    _wait_for(lambda: (searched / "run-id").is_file(), proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _tree(searched)
    assert main(["train", train_recipe, "--output", str(searched), "--resume"]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --resume: {searched} holds a meta run (config.yaml, run-id), not a train run; "
        "resume it with derl-bench meta, or give --output the folder of the train run to "
        "resume")
    assert _tree(searched) == {k: v for k, v in before.items() if k != ".lock"}


def _error_line(err: str) -> str:
    return [line for line in err.splitlines() if line.startswith("error: ")][-1]


MODEL_COMMANDS = {
    "model sft": ["model", "sft", "{out}", "--env", "derl/Arithmetic-v0", "--steps", "1"],
    "model agent-base": ["model", "agent-base", "{out}"],
}


@pytest.mark.parametrize("holder", sorted(MODEL_COMMANDS))
def test_a_train_into_a_folder_a_model_command_holds_is_refused_naming_it(tmp_path, capsys,
                                                                          holder):
    recipe = _recipe(tmp_path, "tiny.yaml", TRAIN)
    out = tmp_path / "out"
    # This process holds the folder as the model command does while it builds its model.
    held = argparse.Namespace(command_line=f"derl-bench {holder} {out}")
    with hold_output(out, held, whole=True):
        assert main(["train", recipe, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"the output folder {out} " + IN_USE.format(pid=os.getpid()) in err, err
        assert f"derl-bench {holder} {out})" in err
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


@pytest.mark.parametrize("command", sorted(MODEL_COMMANDS))
def test_a_model_command_into_a_folder_a_train_holds_is_refused_naming_it(tmp_path, capsys,
                                                                          command):
    out = tmp_path / "out"
    # This process holds the folder as train does while it runs.
    held = argparse.Namespace(command_line=f"derl-bench train tiny.yaml --output {out}")
    with hold_output(out, held):
        before = _tree(out)
        assert main([arg.format(out=out) for arg in MODEL_COMMANDS[command]]) == 2
        err = capsys.readouterr().err
        assert f"the output folder {out} " + IN_USE.format(pid=os.getpid()) in err, err
        assert f"derl-bench train tiny.yaml --output {out})" in err
        assert _tree(out) == before
    assert list(tmp_path.iterdir()) == []
