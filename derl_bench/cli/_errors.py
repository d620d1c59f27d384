"""How a command refuses: one line ``error: ...`` on stderr and exit status 2.

A command raises, and :func:`derl_bench.cli.main` prints. What it prints that way is an
*expected* error, :func:`expected_message`: a :class:`CommandError`, an ``OSError`` (a missing
or unreadable file, permission denied, a read-only file system, no space left), an error class
of derl-bench's own (a rejected recipe, Meta-Reward, output folder, resume, ...), a gymnasium
error, or torch's refusal of a device (CUDA not available, an unknown device string, out of
memory). Anything else is a bug, and keeps its traceback.
"""

from __future__ import annotations

import re
import sys


class CommandError(Exception):
    """A command's input is refused; the message says what and, where it can, what to do."""


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
