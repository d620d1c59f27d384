"""Atomic file writes, and the checks of a command's files made before its work starts.

A write leaves a reader the old file or the new one, never half of either.

Every write goes to a temporary file beside the target (named by the process, so two
processes never share one) and is renamed over it::

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a" / "x.json"
    >>> write_json_atomic(path, {"n": 1}); path.read_text()
    '{\\n  "n": 1\\n}\\n'

The checks come first so that nothing is computed and then lost: an input must be a regular
file that can be read (a FIFO would block its reader, a device such as ``/dev/zero`` never
ends), an output must not be a folder and its folder must be writable.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
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


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n} bytes"


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def input_file_problem(path: str | Path, max_bytes: int | None = None) -> str | None:
    """Why ``path`` cannot be read as an input file, else None: it does not exist, is a
    folder, is not a regular file (a FIFO blocks its reader, a device such as ``/dev/zero``
    never ends), cannot be read, or is over ``max_bytes`` (for a file that is read whole).
    A symbolic link is judged by what it points to.

        >>> input_file_problem("/dev/zero")
        '/dev/zero is not a regular file (a character device)'
    """
    path = Path(path)
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return f"{path} does not exist"
    except OSError as err:
        return f"{path} cannot be read ({err.strerror or err})"
    if stat.S_ISDIR(info.st_mode):
        return f"{path} is a folder, not a file"
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "a special file")
        return f"{path} is not a regular file ({kind})"
    if max_bytes is not None and info.st_size > max_bytes:
        return f"{path} is {_size(info.st_size)}, more than the {_size(max_bytes)} it may be"
    if not os.access(path, os.R_OK):
        return f"{path} cannot be read (permission denied)"
    return None


def _writable_problem(folder: Path) -> str | None:
    """Why no file can be created in the existing ``folder``, else None. A file is created
    and removed, because permission bits say nothing to root, and a read-only mount, a
    pseudo-filesystem such as /sys or an ACL can refuse what ``os.access`` allows."""
    try:
        handle, name = tempfile.mkstemp(prefix=".derl-bench-write-check-", dir=folder)
    except OSError as err:
        return f"{folder} is not writable ({err.strerror or err})"
    os.close(handle)
    os.unlink(name)
    return None


def _existing_ancestor(path: Path) -> Path:
    return next((parent for parent in path.parents if parent.exists()), Path("."))


def output_file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be written as a file (it is a folder, a file stands where one of
    its folders would be, or that folder is not writable), else None; checked before a long
    job, not after it."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder; give a file name"
    parent = _existing_ancestor(path)
    if not parent.is_dir():
        return f"{path} cannot be written: {parent} is a file"
    problem = _writable_problem(parent)
    return f"{path} cannot be written: {problem}" if problem else None


def output_folder_problem(path: str | Path) -> str | None:
    """Why files cannot be written into the folder ``path`` (created if it does not exist):
    it is a file, a file stands where one of its folders would be, or the nearest existing
    folder is not writable; else None."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder"
    parent = path if path.is_dir() else _existing_ancestor(path)
    if not parent.is_dir():
        return f"{path} cannot be created: {parent} is a file"
    problem = _writable_problem(parent)
    return f"{path} cannot be written: {problem}" if problem else None


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file (after resolving links, or as hard links)."""
    a, b = Path(a), Path(b)
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # either does not exist yet: only the resolved names can tell
        return False


__all__ = ["input_file_problem", "output_file_problem", "output_folder_problem", "same_file",
           "write_json_atomic", "write_jsonl_atomic", "write_text_atomic"]
