"""The repository's scripts (``scripts/``, ``benchmarks/``) as modules, for their tests: they
are files run by path, not modules of the package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(path: str) -> ModuleType:
    """The script at ``path`` (relative to the repository root), imported under its stem."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, REPO / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
