"""A checkpoint that cannot be written stops the run with one line naming the checkpoint, why,
and the run's last good checkpoint (docs/guarantees.md); no hidden staging folder is left."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from derl_bench.cli import main
from derl_bench.grpo.checkpoint import STATE_FILE, checkpoint_problem

REPO = Path(__file__).resolve().parents[2]
TRAIN = {"name": "tiny", "env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 1,
         "group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8, "tensorboard": False,
         "progress": False, "meta_reward": "outcome"}


def _error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _first_step(tmp_path: Path) -> tuple[list[str], Path]:
    """A run with one checkpoint, step-1, and the command line that resumes it to step 2."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(TRAIN))
    run = tmp_path / "run"
    train = ["train", str(recipe), "--output", str(run)]
    assert main(train) == 0
    return [*train, "--resume", "steps=2"], run


def _can_create_in(folder: Path) -> bool:
    try:
        (folder / ".probe").mkdir()
    except OSError:
        return False
    (folder / ".probe").rmdir()
    return True


@contextlib.contextmanager
def _refusing_writes(folder: Path) -> Iterator[None]:
    """``folder`` refuses new entries while the block runs: by its permission bits, or, for
    root, whom they do not stop, by the immutable attribute."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    elif shutil.which("chattr") and subprocess.run(["chattr", "+i", str(folder)],
                                                   capture_output=True).returncode == 0:
        undo = ["chattr", "-i", str(folder)]
    else:
        pytest.skip("running as root without chattr: no folder here refuses a write")
    try:
        if _can_create_in(folder):
            pytest.skip("this file system lets the folder be written anyway")
        yield
    finally:
        subprocess.run(undo, check=True)


def test_a_file_where_the_checkpoint_goes_stops_the_run_naming_the_last_good_one(tmp_path,
                                                                                 capsys):
    resume, run = _first_step(tmp_path)
    checkpoints = run / "checkpoints"
    (checkpoints / "step-2").write_text("mine")
    capsys.readouterr()
    assert main(resume) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: cannot write checkpoint {checkpoints / 'step-2'} ({checkpoints / 'step-2'} is "
        f"a file); the run's last good checkpoint is {checkpoints / 'step-1'}: resume from it "
        "once the checkpoint can be written")
    # The file is not the run's to delete, and nothing half-written is left beside it.
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-1", "step-2"]
    assert (checkpoints / "step-2").read_text() == "mine"
    assert checkpoint_problem(checkpoints / "step-1") is None
    # Doing what the message says continues the run.
    (checkpoints / "step-2").unlink()
    assert main(resume) == 0
    assert checkpoint_problem(checkpoints / "step-2") is None


def test_a_checkpoints_folder_that_refuses_writes_is_named_not_its_staging_folder(tmp_path,
                                                                                 capsys):
    resume, run = _first_step(tmp_path)
    checkpoints = run / "checkpoints"
    capsys.readouterr()
    with _refusing_writes(checkpoints):
        assert main(resume) == 2
    line = _error_line(capsys.readouterr().err)
    assert re.fullmatch(
        re.escape(f"error: cannot write checkpoint {checkpoints / 'step-2'} ({checkpoints}: ")
        + "(Permission denied|Operation not permitted)"
        + re.escape(f"); the run's last good checkpoint is {checkpoints / 'step-1'}: resume "
                    "from it once the checkpoint can be written"), line), line
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-1"]


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        # A write past the limit then fails with EFBIG, as one on a full disk fails with
        # ENOSPC, instead of SIGXFSZ killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("outgrown", ["model.safetensors", STATE_FILE])
def test_a_checkpoint_file_that_cannot_be_written_whole_stops_the_run_in_one_line(
        tmp_path, outgrown):
    """The weights are written by safetensors and the trainer state by torch, and each
    reports a failed write in its own way."""
    resume, run = _first_step(tmp_path)
    checkpoints = run / "checkpoints"
    sizes = {p.name: p.stat().st_size for p in (checkpoints / "step-1").iterdir()}
    others = max(size for name, size in sizes.items() if name != STATE_FILE)
    if outgrown == STATE_FILE:
        assert sizes[STATE_FILE] > others + 1
        limit = others + 1
    else:
        assert sizes["model.safetensors"] == others
        limit = others // 2
    done = subprocess.run([sys.executable, "-m", "derl_bench", *resume], cwd=REPO,
                          capture_output=True, text=True, preexec_fn=_file_size_limit(limit))
    assert done.returncode == 2, done.stderr
    assert _error_line(done.stderr) == (
        f"error: cannot write checkpoint {checkpoints / 'step-2'} ({checkpoints}: File too "
        f"large); the run's last good checkpoint is {checkpoints / 'step-1'}: resume from it "
        "once the checkpoint can be written")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-1"]
