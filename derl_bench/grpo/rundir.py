"""One run per folder: whether a run may write into its output folder, checked before it does.

A command that writes a run folder holds the folder's lock (:class:`FolderLock`, an OS lock on
``<folder>/.lock``) from its first check to its last write, so no second command can start a
run there, resume it or replace it meanwhile; the OS drops the lock when its holder dies, so a
killed run can be resumed.

A folder that does not exist or is empty is free. A folder that holds a run (its
``config.yaml`` and ``run-id``) is refused unless the run continues it (``--resume``, which
then checks that the settings are the same) or replaces it (``--overwrite``). A folder holding
anything else is refused either way: ``--overwrite`` replaces only what a run wrote. An
overwrite removes the old run only when the caller says so, once the new run has passed its own
checks, so a recipe that is rejected deletes nothing::

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> claim_run_dir(out, resume=False, overwrite=False)   # empty: free
    False
    >>> _ = (out / "notes.txt").write_text("mine")
    >>> claim_run_dir(out, resume=False, overwrite=True)
    Traceback (most recent call last):
    ...
    derl_bench.grpo.rundir.RunDirError: ... that are not a derl-bench run (notes.txt); ...
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path
from types import TracebackType

import yaml

from derl_bench.files import write_text_atomic

RUN_MARKER = "config.yaml"
"""Every run (``train`` and ``meta``) writes its settings here first."""

RUN_ID_FILE = "run-id"
"""The run's id, written beside ``RUN_MARKER`` when the run starts; its checkpoints carry it,
so a resume can tell them from another run's."""

LOCK_FILE = ".lock"
"""The lock of a run folder, inside it; it names its holder (pid, host, command) while held."""


class RunDirError(ValueError):
    """The output folder cannot take this run: a file, or a folder holding something else."""


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a run's output folder (it is a file, or under one), else None."""
    for parent in (path, *path.parents):
        if parent.exists():
            return None if parent.is_dir() else f"the output {path} is not a folder: {parent} " \
                "is a file"
    return None


def is_run_dir(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a run this tool wrote: its ``config.yaml`` and ``run-id``
    (a file named ``config.yaml`` alone is too common to tell a run from a user's folder)."""
    run_dir = Path(run_dir)
    return (run_dir / RUN_MARKER).is_file() and (run_dir / RUN_ID_FILE).is_file()


def run_kind(run_dir: str | Path) -> str | None:
    """Which command's run ``run_dir`` holds (:func:`is_run_dir`): ``"meta"`` for reward
    discovery, whose settings hold the recipe of its ``inner`` runs, ``"train"`` for any other,
    ``"derl-bench"`` when its ``config.yaml`` cannot be read; None when it holds no run."""
    if not is_run_dir(run_dir):
        return None
    try:
        settings = yaml.safe_load((Path(run_dir) / RUN_MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return "derl-bench"
    if not isinstance(settings, dict):
        return "derl-bench"
    return "meta" if isinstance(settings.get("inner"), dict) else "train"


def claim_run_dir(run_dir: str | Path, *, resume: bool, overwrite: bool) -> bool:
    """Check that a run may write into ``run_dir``; writes nothing. Call it while holding the
    folder's :class:`FolderLock`, so that what it finds stays true.

    Returns True when the folder holds a run that ``overwrite`` is to replace (call
    :func:`clear_run_dir` once the new run has passed its checks). Raises
    :class:`RunDirError` naming what the folder holds and what to do.
    """
    run_dir = Path(run_dir)
    problem = output_problem(run_dir)
    if problem:
        raise RunDirError(problem)
    if resume and overwrite:
        raise RunDirError("--resume continues the run in the folder and --overwrite replaces "
                          "it: pass one of them")
    entries = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_FILE) \
        if run_dir.is_dir() else []
    if not entries or resume:
        return False
    if is_run_dir(run_dir):
        if overwrite:
            return True
        raise RunDirError(f"the output folder {run_dir} already holds another run; pass "
                          "--resume to continue it (with the same settings), --overwrite to "
                          "replace it, or choose another --output")
    # Only a run is replaced: files of the user's own are never offered for deletion.
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    raise RunDirError(f"the output folder {run_dir} holds files that are not a derl-bench run "
                      f"({shown}); choose another --output, or empty the folder yourself")


def clear_run_dir(run_dir: str | Path) -> None:
    """Remove everything in ``run_dir`` (an ``--overwrite`` whose new run passed its checks)
    but its lock, which the new run holds."""
    run_dir = Path(run_dir)
    for entry in list(run_dir.iterdir()) if run_dir.is_dir() else []:
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


_HELD: set[int] = set()
"""Descriptors of the locks this process holds."""


def _forget_held_locks() -> None:
    # A forked child shares the parent's lock; closing its copy does not release the
    # parent's, and keeps a child that outlives a killed command from holding the folder.
    for fd in list(_HELD):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_held_locks)


def _holder_text(command: str | None) -> str:
    if command is None:
        command = shlex.join(["derl-bench", *sys.argv[1:]])
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n"


def _describe_holder(text: str) -> str:
    try:
        holder = json.loads(text)
        return (f"pid {holder['pid']} on {holder['host']}, since {holder['started']}: "
                f"{holder['command']}")
    except (ValueError, TypeError, KeyError):
        return "a command that has not yet said who it is"


class FolderLock:
    """Hold a folder for one command: an exclusive ``flock`` on a lock file, ``<folder>/.lock``
    (or ``lock``, beside an output that appears whole at its end), taken without waiting. The
    lock file names its holder (``command``: the command line, by default this process's), so a
    refused command can say who has the folder.

    The OS drops the lock when its holder dies, however it dies: a stale lock file from a
    killed run is simply taken over. On release the lock file is removed, and so are the
    folders that taking it created, when nothing else was written in them::

        >>> import tempfile, pathlib
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> with FolderLock(out):
        ...     with FolderLock(out):
        ...         pass
        Traceback (most recent call last):
        ...
        derl_bench.grpo.rundir.RunDirError: ... is in use by another derl-bench command (pid ...
        >>> out.exists()
        False
    """

    def __init__(self, folder: str | Path, lock: str | Path | None = None,
                 command: str | None = None) -> None:
        self.folder = Path(folder)
        self.path = Path(lock) if lock is not None else self.folder / LOCK_FILE
        self.command = command
        self._fd: int | None = None
        self._created: list[Path] = []

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, or raise :class:`RunDirError` naming its holder."""
        home = self.path.parent
        self._created = [p for p in (home, *home.parents) if not p.exists()]
        text = _holder_text(self.command).encode()
        while True:
            try:
                home.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                continue  # a releasing holder removed the folder it had created: make it again
            except OSError as err:
                self._remove_created()
                raise RunDirError(f"cannot lock {self.path}: {err.strerror or err}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = _read_holder(fd)
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    self._remove_created()
                    raise RunDirError(f"cannot lock {self.path}: {err.strerror}") from None
                raise RunDirError(
                    f"the output folder {self.folder} is in use by another derl-bench command "
                    f"({holder}); wait for it to finish or stop it, or choose another output "
                    "folder") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, text, 0)
            # The file may have been released and removed between our open and our lock: then
            # we hold a lock on a file no one else can find, and must lock the new one.
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)
        self._fd = fd
        _HELD.add(fd)

    def release(self) -> None:
        """Remove the lock file and let the lock go; remove the folders taking it created if
        they hold nothing."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if os.path.samestat(os.fstat(fd), os.stat(self.path)):
                self.path.unlink()
        except FileNotFoundError:
            pass
        _HELD.discard(fd)
        os.close(fd)
        self._remove_created()

    def _remove_created(self) -> None:
        for folder in self._created:  # deepest first
            try:
                folder.rmdir()
            except OSError:
                return  # it holds something now, or another command took it
        self._created = []


def _read_holder(fd: int) -> str:
    # The holder writes its name right after taking the lock; a command that finds the lock
    # in that instant waits for the text briefly rather than report an unnamed holder.
    for _ in range(50):
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        if text.strip():
            return _describe_holder(text)
        time.sleep(0.01)
    return _describe_holder("")


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


__all__ = ["LOCK_FILE", "RUN_ID_FILE", "RUN_MARKER", "FolderLock", "RunDirError", "claim_run_dir",
           "clear_run_dir", "is_run_dir", "output_problem", "read_run_id", "run_kind",
           "start_run_id"]
