"""The code is ruff clean and type-checks: CI checks both with the tests, not only contributors
by hand."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found is not None, f"{name} is a dev dependency: pip install -e '.[dev]'"
    return found


def test_ruff_finds_nothing():
    done = subprocess.run([_tool("ruff"), "check", "derl_bench", "environments", "tests",
                           "benchmarks", "scripts"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing():
    # the settings (files, strictness) are pyproject.toml's [tool.mypy]
    done = subprocess.run([_tool("mypy")], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
