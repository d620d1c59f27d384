"""``proxy`` writes only into folders of its own (docs/guarantees.md): an ``--output`` that
holds another command's output, or ``--records`` that are another board's folder, are refused
before any work, naming whose the folder is, and are left exactly as they were."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from derl_bench.cli import main
from derl_bench.leaderboard.validate import records_folder_problem

REPO = Path(__file__).resolve().parents[2]
TRAIN = {"name": "tiny", "env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 1,
         "group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8, "tensorboard": False,
         "progress": False, "meta_reward": "outcome"}


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder``: a file's bytes, a folder as None."""
    return {p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


def _error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def train_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished ``train`` run."""
    folder = tmp_path_factory.mktemp("train")
    recipe = folder / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(TRAIN))
    assert main(["train", str(recipe), "--output", str(folder / "run")]) == 0
    return folder / "run"


@pytest.fixture
def leaderboards(tmp_path: Path) -> Path:
    """A copy of the project's leaderboards folder with its GSM8K and Arithmetic boards."""
    boards = tmp_path / "leaderboards"
    for board in ("gsm8k", "arithmetic"):
        shutil.copytree(REPO / "leaderboards" / board, boards / board)
    shutil.copy(REPO / "leaderboards" / "run-here.txt", boards / "run-here.txt")
    return boards


def test_proxy_refuses_an_output_folder_that_holds_a_train_run(train_run, tmp_path, capsys):
    before = _tree(train_run)
    assert main(["proxy", "--small", "--output", str(train_run)]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --output: {train_run} holds a train run (config.yaml, run-id); proxy writes a "
        "folder of its own: choose an empty or a proxy folder")
    assert _tree(train_run) == before


def test_proxy_refuses_an_output_folder_that_holds_a_model(tmp_path, capsys):
    model = tmp_path / "model"
    assert main(["model", "init-tiny", str(model)]) == 0
    before = _tree(model)
    assert main(["proxy", "--small", "--output", str(model)]) == 2
    assert "holds a model (config.json); proxy writes a folder of its own" in (
        _error_line(capsys.readouterr().err))
    assert _tree(model) == before


def test_proxy_refuses_an_output_folder_that_is_a_board(leaderboards, tmp_path, capsys):
    before = _tree(leaderboards)
    assert main(["proxy", "--small", "--output", str(leaderboards / "gsm8k")]) == 2
    assert "holds the GSM8K board's result records (*.json)" in (
        _error_line(capsys.readouterr().err))
    assert main(["proxy", "--small", "--output", str(leaderboards)]) == 2
    assert "holds the leaderboards' list of records run here (run-here.txt)" in (
        _error_line(capsys.readouterr().err))
    assert _tree(leaderboards) == before


def test_proxy_refuses_records_for_another_boards_folder(leaderboards, tmp_path, capsys):
    before, out = _tree(leaderboards), tmp_path / "out"
    gsm8k = leaderboards / "gsm8k"
    assert main(["proxy", "--small", "--output", str(out), "--records", str(gsm8k)]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --records: records for derl/Arithmetic-v0 do not belong in the GSM8K board's "
        f"folder {gsm8k}; write them into {leaderboards / 'arithmetic'}, or a new folder")
    # every mode copies into the board folder, so every mode refuses it
    assert main(["proxy", "--small", "--landscape", "--output", str(out),
                 "--records", str(gsm8k)]) == 2
    assert "do not belong in the GSM8K board's folder" in _error_line(capsys.readouterr().err)
    # A board folder named for no benchmark is refused by `leaderboard validate` later: now.
    mine = leaderboards / "mine"
    assert main(["proxy", "--small", "--output", str(out), "--records", str(mine)]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --records: records for derl/Arithmetic-v0 on a board go into its folder "
        f"{leaderboards / 'arithmetic'}, not {mine}: `leaderboard validate` refuses a record "
        "outside its benchmark's folder")
    assert main(["proxy", "--small", "--output", str(out), "--records", str(leaderboards)]) == 2
    assert "holds the leaderboards' list of records run here (run-here.txt)" in (
        _error_line(capsys.readouterr().err))
    assert _tree(leaderboards) == before
    assert not out.exists()
    # The board's own folder, and a new folder of any name, take its records.
    assert records_folder_problem(leaderboards / "arithmetic", "derl/Arithmetic-v0") is None
    assert records_folder_problem(tmp_path / "board", "derl/Arithmetic-v0") is None


def test_proxy_refuses_records_into_a_train_run(train_run, tmp_path, capsys):
    before, out = _tree(train_run), tmp_path / "out"
    assert main(["proxy", "--small", "--output", str(out), "--records", str(train_run)]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --records: {train_run} holds a train run (config.yaml, run-id); records of "
        "derl/Arithmetic-v0 go into its board folder (leaderboards/arithmetic) or a new folder")
    assert _tree(train_run) == before
    assert not out.exists()
