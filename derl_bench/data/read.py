"""Read JSON and JSON Lines files from the data root, naming the file (and line) that is
damaged.

A file cut short by an interrupted copy, or edited by hand, would otherwise fail with the bare
parser message ("Unterminated string starting at: line 1 column 50"), which says neither which
of thousands of files is at fault nor how to repair it::

    read_jsonl(root / "gsm8k" / "test.jsonl")
    # DataFileError: <root>/gsm8k/test.jsonl, line 1319: not valid JSON (Unterminated string
    # starting at: line 1 column 50 (char 49)); the data file is damaged: run `derl-bench data
    # verify gsm8k` to check the data root and `derl-bench data download gsm8k --force` to
    # fetch it again
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from derl_bench.data.root import COMPLETE_MARKER


class DataFileError(ValueError):
    """A file in the data root is damaged: it cannot be read or parsed, or it is not the file
    the data catalogue lists. The message names the file and how to repair it."""


def dataset_of(path: Path) -> str | None:
    """The dataset a file of the data root belongs to: the nearest folder above it that holds
    a finished download's marker (``None`` outside a data root)."""
    for folder in Path(path).parents:
        if (folder / COMPLETE_MARKER).is_file():
            return folder.name
    return None


def repair_hint(dataset: str | None) -> str:
    """How to find out what is wrong with a dataset and fetch it again."""
    name = f" {dataset}" if dataset else ""
    what = dataset or "<dataset>"
    return (f"run `derl-bench data verify{name}` to check the data root and "
            f"`derl-bench data download {what} --force` to fetch it again")


def damaged(path: Path, problem: str, line: int | None = None) -> DataFileError:
    """The error for a damaged data file: the file (and line), the problem and the repair."""
    where = f"{path}, line {line}" if line is not None else str(path)
    return DataFileError(f"{where}: {problem}; the data file is damaged: "
                         f"{repair_hint(dataset_of(path))}")


def _parse_error(err: ValueError) -> str:
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text ({err.reason} at byte {err.start})"
    return f"not valid JSON ({err})"


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; :class:`DataFileError` naming the file when it is not JSON
    (or not UTF-8). A missing file raises ``FileNotFoundError`` as usual."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError both
        raise damaged(path, _parse_error(err)) from None


def numbered_jsonl(path: Path) -> list[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of ``path``; :class:`DataFileError`
    naming the file and the line when one is not JSON (or not UTF-8)."""
    path = Path(path)
    rows = []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                rows.append((number, json.loads(raw.decode("utf-8"))))
            except ValueError as err:
                raise damaged(path, _parse_error(err), number) from None
    return rows


def read_jsonl(path: Path) -> list[Any]:
    """The values of the non-blank lines of ``path`` (see :func:`numbered_jsonl`)."""
    return [value for _, value in numbered_jsonl(path)]


__all__ = ["DataFileError", "damaged", "dataset_of", "numbered_jsonl", "read_json", "read_jsonl",
           "repair_hint"]
