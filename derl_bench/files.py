"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Every write goes to a temporary file beside the target (named by the process, so two
processes never share one) and is renamed over it::

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a" / "x.json"
    >>> write_json_atomic(path, {"n": 1}); path.read_text()
    '{\\n  "n": 1\\n}\\n'
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` (creating its folder) through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: str | Path, payload: Any, indent: int = 2) -> None:
    """Write ``payload`` as JSON (values JSON does not know are written as strings)."""
    write_text_atomic(path, json.dumps(payload, indent=indent, ensure_ascii=False,
                                       default=str) + "\n")


def write_jsonl_atomic(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write one JSON object per line."""
    write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n"
                                    for row in rows))


def output_file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be written as a file (it is a folder, or a file stands where one of
    its folders would be), else None; checked before a long job, not after it."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder; give a file name"
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{path} cannot be written: {parent} is a file"
    return None


__all__ = ["output_file_problem", "write_json_atomic", "write_jsonl_atomic", "write_text_atomic"]
