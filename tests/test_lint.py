"""The code is ruff clean: CI checks it with the tests, not only contributors by hand."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff is not None, "ruff is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run([ruff, "check", "derl_bench", "tests", "benchmarks", "scripts"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
