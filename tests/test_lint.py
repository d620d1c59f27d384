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
                           "benchmarks", "scripts", "leaderboards"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing():
    # the settings (files, strictness) are pyproject.toml's [tool.mypy]
    done = subprocess.run([_tool("mypy")], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_module_defines_a_function_or_class_twice():
    # ruff's F811 misses a second top-level `def` whose name the first is used by only inside
    # other functions: the later one silently replaces it for every caller
    import ast
    from collections import Counter

    twice = []
    for folder in ("derl_bench", "environments", "tests", "benchmarks", "scripts",
                   "leaderboards"):
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            names = Counter(node.name for node in tree.body
                            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef
                                          | ast.ClassDef))
            twice += [f"{path.relative_to(REPO)}: {name}" for name, n in names.items() if n > 1]
    assert not twice, twice
