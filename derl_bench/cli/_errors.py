"""How a command refuses: one line ``error: ...`` on stderr and exit status 2.

A command raises, and :func:`derl_bench.cli.main` prints. What it prints that way is an
*expected* error, :func:`expected_message`: a :class:`CommandError`, an ``OSError`` (a missing
or unreadable file, permission denied, a read-only file system, no space left), an error class
of derl-bench's own (a rejected recipe, Meta-Reward, output folder, resume, ...), a gymnasium
error, or torch's refusal of a device (CUDA not available, an unknown device string, out of
memory). Anything else is a bug, and keeps its traceback.

The ``require_*`` checks of files run before a command's work starts, so an input that would
block or never end, or an output that cannot be written, is refused before anything is
computed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from derl_bench.files import (
    input_file_problem,
    output_file_problem,
    output_folder_problem,
    same_file,
)

RECIPE_MAX_BYTES = 16 * 2**20
"""A recipe is a few lines of YAML; anything near this size is not one, and is read whole."""


class CommandError(Exception):
    """A command's input is refused; the message says what and, where it can, what to do."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where SIGINT raises :class:`KeyboardInterrupt`, so that a command
    killed either way cleans up the same (staging folders, worker processes)."""


def require_input(option: str, path: str | Path, max_bytes: int | None = None) -> Path:
    """``path`` if it is a regular file that can be read (at most ``max_bytes``), else
    :class:`CommandError` naming ``option``."""
    problem = input_file_problem(path, max_bytes)
    if problem:
        raise CommandError(f"{option}: {problem}")
    return Path(path)


def require_output(option: str, path: str | Path) -> Path:
    """``path`` if a file can be written there, else :class:`CommandError` naming ``option``."""
    problem = output_file_problem(path)
    if problem:
        raise CommandError(f"{option}: {problem}")
    return Path(path)


def require_output_folder(option: str, path: str | Path) -> Path:
    """``path`` if files can be written into it (it may not exist yet), else
    :class:`CommandError` naming ``option``."""
    problem = output_folder_problem(path)
    if problem:
        raise CommandError(f"{option}: {problem}")
    return Path(path)


def require_distinct(paths: dict[str, str | Path | None]) -> None:
    """Refuse two options that name one file: one would overwrite the other (or a recipe)."""
    given = [(option, path) for option, path in paths.items() if path is not None]
    for i, (first, a) in enumerate(given):
        for second, b in given[i + 1:]:
            if same_file(a, b):
                raise CommandError(f"{first} and {second} name the same file ({b}); give "
                                   "each its own")


_DEVICE = re.compile(
    r"not compiled with \w+ enabled|not linked with support for \w+ devices"
    r"|device type at start of device string|invalid device (ordinal|string)"
    r"|found no nvidia driver|no cuda gpus are available|cuda driver initialization failed"
    r"|cuda (is )?not available|cuda unavailable|no cuda-capable device", re.IGNORECASE)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _os_message(exc: OSError) -> str:
    if not exc.strerror:  # raised with a message of its own
        return str(exc) or type(exc).__name__
    if exc.filename is None:
        return exc.strerror
    where = str(exc.filename) + ("" if exc.filename2 is None else f" -> {exc.filename2}")
    return f"{where}: {exc.strerror}"


def _is_ours(exc: BaseException) -> bool:
    return any(cls.__module__.split(".")[0] == "derl_bench" for cls in type(exc).__mro__)


def _torch_message(exc: BaseException) -> str | None:
    torch = sys.modules.get("torch")
    if torch is None:  # not imported, so it raised nothing
        return None
    out_of_memory = getattr(torch, "OutOfMemoryError", None)
    if out_of_memory is not None and isinstance(exc, out_of_memory):
        return _first_line(exc)
    if isinstance(exc, AssertionError | RuntimeError) and _DEVICE.search(str(exc)):
        return f"{_first_line(exc)} (--device cpu, or device: cpu in a recipe, runs on the CPU)"
    return None


def expected_message(exc: BaseException) -> str | None:
    """What to print for ``exc`` after ``error:``, or None when it is a bug (a traceback)."""
    if isinstance(exc, CommandError):
        return str(exc)
    if _is_ours(exc):
        if isinstance(exc, KeyError) and exc.args:  # str() of a KeyError quotes its message
            return str(exc.args[0])
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError):
        return _os_message(exc)
    gym_error = sys.modules.get("gymnasium.error")
    if gym_error is not None and isinstance(exc, gym_error.Error):
        return str(exc) or type(exc).__name__
    return _torch_message(exc)


RESEND_AFTER_S = 0.05
"""How long after a SIGTERM was swallowed by a finaliser it is sent again."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in this process, once: a second
    SIGTERM kills at once, as it did before. Worker processes forked meanwhile keep dying of
    SIGTERM at once, so that a pool can stop them.

    A signal that lands inside a finaliser (a ``__del__``, a weakref callback) would raise
    there, where Python only prints the exception and goes on, and the command would run to
    its end. Such a :class:`Terminated` is caught as it is printed and sent again, so that it
    is raised where the command's own code is running, a moment later."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals; an embedding caller keeps its own
        return
    owner = os.getpid()

    def terminate(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    printed = sys.unraisablehook

    def resend_if_swallowed(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, Terminated) and os.getpid() == owner:
            signal.signal(signal.SIGTERM, terminate)
            # Sent from here, it would be handled, and swallowed, in this hook; from a thread
            # a moment later it lands in the command's code (or in another finaliser, and
            # comes back here).
            again = threading.Timer(RESEND_AFTER_S, os.kill, (owner, signal.SIGTERM))
            again.daemon = True
            again.start()
            return
        printed(unraisable)

    previous = signal.signal(signal.SIGTERM, terminate)
    sys.unraisablehook = resend_if_swallowed
    try:
        yield
    finally:
        sys.unraisablehook = printed
        signal.signal(signal.SIGTERM, previous)
