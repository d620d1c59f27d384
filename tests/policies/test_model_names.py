"""What a model name means (docs/guarantees.md): an existing folder is a model folder; a name
that looks like a path (``./``, ``../``, ``/``, ``~``, or a first part that exists here) is a
path and must exist; anything else is a hub id, refused at once when neither the local cache
nor the hub has it. A run takes its folder only once its model has loaded."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from derl_bench.cli import main

REPO = Path(__file__).resolve().parents[2]
TRAIN = {"name": "tiny", "env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 1,
         "group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8, "tensorboard": False,
         "progress": False, "meta_reward": "outcome"}
EVALUATE = ["evaluate", "--env", "derl/Arithmetic-v0", "--level", "L0", "--limit", "2",
            "--no-progress"]


def _recipe(folder: Path) -> str:
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(TRAIN))
    return str(path)


def _error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _closed_port() -> int:
    """A local port nothing listens on: a hub there refuses every connection at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _derl_bench(*argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``derl-bench ARGS`` in a process of its own, with the hub settings ``env`` (the hub
    library reads them once, when it is imported) and offline mode off."""
    environ = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    return subprocess.run([sys.executable, "-m", "derl_bench", *argv], cwd=cwd,
                          env={**environ, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("model", ["./x/y", "runs/nothing/model", "runs/nothing"])
def test_a_missing_model_path_is_refused_before_the_run_folder_is_written(
        tmp_path, monkeypatch, capsys, model):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()  # the first part of runs/nothing/... exists: it is a path
    recipe = _recipe(tmp_path)
    assert main(["train", recipe, "--output", "out", f"model={model}"]) == 2
    assert _error_line(capsys.readouterr().err) == f"error: no such model folder: {model}"
    assert main([*EVALUATE, "--policy", f"llm:{model}", "--output", "rec.json"]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --policy: no such model folder: {model}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "tiny.yaml"]
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_hub_id_outside_the_cache_is_refused_in_offline_mode(tmp_path, capsys):
    # The test session runs with HF_HUB_OFFLINE=1 (conftest.py), as an offline machine would.
    out = tmp_path / "out"
    assert main(["train", _recipe(tmp_path), "--output", str(out),
                 "model=some/missing-folder"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith("error: no such model folder: some/missing-folder; as a Hugging "
                           "Face hub id it is not in the local cache (")
    assert line.endswith(", and HF_HUB_OFFLINE is set")
    assert not out.exists()


def test_a_hub_id_is_refused_when_the_hub_cannot_be_reached(tmp_path):
    out = tmp_path / "out"
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    done = _derl_bench("train", _recipe(tmp_path), "--output", str(out),
                       "model=some/missing-folder", cwd=tmp_path, HF_ENDPOINT=endpoint,
                       HF_HOME=str(tmp_path / "hf"))
    assert done.returncode == 2, done.stderr
    line = _error_line(done.stderr)
    assert line.startswith("error: no such model folder: some/missing-folder; as a Hugging "
                           f"Face hub id it is not in the local cache ({tmp_path / 'hf'}")
    assert f"and the hub ({endpoint}) cannot be reached (" in line
    assert "Retrying" not in done.stderr
    assert not out.exists()


def test_a_hub_id_in_the_local_cache_trains_when_the_hub_cannot_be_reached(tmp_path):
    # The hub cache's layout: a snapshot of the repo's files, and the ref that names it.
    assert main(["model", "init-tiny", str(tmp_path / "tiny")]) == 0
    repo = tmp_path / "hf" / "hub" / "models--local--tiny"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "snapshots").mkdir(parents=True)
    (tmp_path / "tiny").rename(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    done = _derl_bench("train", _recipe(tmp_path), "--output", str(tmp_path / "out"),
                       "model=local/tiny", cwd=tmp_path, HF_HOME=str(tmp_path / "hf"),
                       HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    assert done.returncode == 0, done.stderr
    assert "Retrying" not in done.stderr  # read from the cache, not after the hub's retries
    assert yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())["model"] == "local/tiny"


@pytest.mark.parametrize("damage", ["cut short", "garbage"])
def test_a_model_that_does_not_load_leaves_no_run_behind(tmp_path, capsys, damage):
    model = tmp_path / "model"
    assert main(["model", "init-tiny", str(model)]) == 0
    weights = model / "model.safetensors"
    if damage == "cut short":
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        weights.write_bytes(b"\x07" * 5000)
    recipe, out = _recipe(tmp_path), tmp_path / "out"
    capsys.readouterr()
    assert main(["train", recipe, "--output", str(out), f"model={model}"]) == 2
    assert _error_line(capsys.readouterr().err).startswith(
        f"error: the model folder {model} cannot be loaded: SafetensorError: ")
    assert not out.exists()  # no config.yaml, no run-id: nothing to refuse a re-run
    out.mkdir()  # a folder made empty beforehand stays so
    assert main(["train", recipe, "--output", str(out), f"model={model}"]) == 2
    assert [p.name for p in out.iterdir()] == []
    # The next try, with a model that loads, is not refused.
    assert main(["train", recipe, "--output", str(out)]) == 0
    assert (out / "run-id").is_file() and (out / "checkpoints" / "step-1").is_dir()
