"""One run per folder: whether a run may write into its output folder, checked before it does.

A folder that does not exist or is empty is free. A folder that holds anything else, another
run or unrelated files, is refused unless the run continues it (``--resume``, which then checks
that the settings are the same) or replaces it (``--overwrite``). An overwrite removes the old
run only when the caller says so, once the new run has passed its own checks, so a recipe that
is rejected deletes nothing::

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> claim_run_dir(out, resume=False, overwrite=False)   # empty: free
    False
    >>> _ = (out / "notes.txt").write_text("mine")
    >>> claim_run_dir(out, resume=False, overwrite=False)
    Traceback (most recent call last):
    ...
    derl_bench.grpo.rundir.RunDirError: ... holds files that are not a run (notes.txt); ...
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from derl_bench.files import write_text_atomic

RUN_MARKER = "config.yaml"
"""Every run (``train`` and ``meta``) writes its settings here first."""

RUN_ID_FILE = "run-id"
"""The run's id, written beside ``RUN_MARKER`` when the run starts; its checkpoints carry it,
so a resume can tell them from another run's."""


class RunDirError(ValueError):
    """The output folder cannot take this run: a file, or a folder holding something else."""


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a run's output folder (it is a file, or under one), else None."""
    for parent in (path, *path.parents):
        if parent.exists():
            return None if parent.is_dir() else f"the output {path} is not a folder: {parent} " \
                "is a file"
    return None


def claim_run_dir(run_dir: str | Path, *, resume: bool, overwrite: bool) -> bool:
    """Check that a run may write into ``run_dir``; writes nothing.

    Returns True when the folder holds something that ``overwrite`` is to replace (call
    :func:`clear_run_dir` once the new run has passed its checks). Raises
    :class:`RunDirError` naming what the folder holds and what to pass.
    """
    run_dir = Path(run_dir)
    problem = output_problem(run_dir)
    if problem:
        raise RunDirError(problem)
    if resume and overwrite:
        raise RunDirError("--resume continues the run in the folder and --overwrite replaces "
                          "it: pass one of them")
    entries = sorted(p.name for p in run_dir.iterdir()) if run_dir.is_dir() else []
    if not entries or resume:
        return False
    if overwrite:
        return True
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    what = "another run" if RUN_MARKER in entries else f"files that are not a run ({shown})"
    raise RunDirError(f"the output folder {run_dir} already holds {what}; pass --resume to "
                      "continue it (with the same settings), --overwrite to replace it, or "
                      "choose another --output")


def clear_run_dir(run_dir: str | Path) -> None:
    """Remove everything in ``run_dir`` (an ``--overwrite`` whose new run passed its checks)."""
    run_dir = Path(run_dir)
    for entry in list(run_dir.iterdir()) if run_dir.is_dir() else []:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def read_run_id(run_dir: str | Path) -> str | None:
    """The id of the run in ``run_dir``; None for a folder without one (a run started before
    runs had ids, or none at all)."""
    path = Path(run_dir) / RUN_ID_FILE
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def start_run_id(run_dir: str | Path, resume: bool) -> str:
    """Give the run in ``run_dir`` its id: a new one for a new run; a resumed run keeps its own
    (a run started before runs had ids gets one now, so its later checkpoints carry it)::

        >>> import tempfile
        >>> out = tempfile.mkdtemp()
        >>> first = start_run_id(out, resume=False)
        >>> start_run_id(out, resume=True) == first, start_run_id(out, resume=False) == first
        (True, False)
    """
    current = read_run_id(run_dir) if resume else None
    if current is None:
        current = uuid.uuid4().hex
        write_text_atomic(Path(run_dir) / RUN_ID_FILE, current + "\n")
    return current


__all__ = ["RUN_ID_FILE", "RUN_MARKER", "RunDirError", "claim_run_dir", "clear_run_dir",
           "output_problem", "read_run_id", "start_run_id"]
