"""Progress output: every bar in derl_bench is made here, and third-party bars are hushed here.

On a terminal a bar redraws itself in place, as tqdm does. Anywhere else (a log file, a pipe,
a CI console) redrawing would fill the log with carriage-return frames, so the bar instead
writes one plain line when it starts, at most one every :data:`LOG_INTERVAL_S` seconds, and
one when it closes.

    >>> import io
    >>> log = io.StringIO()
    >>> for _ in progress_bar(range(3), desc="steps", file=log):
    ...     pass
    >>> lines = log.getvalue().splitlines()
    >>> (lines[0].startswith("steps:   0%"), lines[-1].startswith("steps: 100%"),
    ...  "\\r" in log.getvalue())
    (True, True, False)
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

from tqdm import tqdm
from tqdm.auto import tqdm as terminal_tqdm

LOG_INTERVAL_S = 30.0
"""Least time between two lines of a bar that writes to a log rather than a terminal."""


class LogBar(tqdm):
    """A tqdm bar for logs: each refresh is a line of its own; nothing is redrawn in place."""

    leave: bool | None  # tqdm's own attribute, set in its __init__

    @staticmethod
    def status_printer(file: IO[str]) -> Any:
        flush = getattr(file, "flush", lambda: None)

        def print_line(text: str) -> None:
            if text:
                file.write(text + "\n")
                flush()

        return print_line

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        # tqdm clears a bar by displaying "" and then writing "\r"; a log has nothing to clear.
        if msg == "":
            return False
        return bool(super().display(msg=msg, pos=0))

    def close(self) -> None:
        if not self.disable and self.leave is not False and hasattr(self, "sp"):
            self.display()
        # The closing line is written; tqdm's own closing would add a blank line or a "\r".
        self.leave = False
        super().close()


def is_terminal(file: IO[str] | None) -> bool:
    """Whether ``file`` (``None``: standard error, tqdm's default) is an interactive terminal."""
    file = sys.stderr if file is None else file
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):
        return False


def progress_bar(iterable: Iterable[Any] | None = None, *, file: IO[str] | None = None,
                 **kwargs: Any) -> tqdm:
    """A tqdm bar over ``iterable`` (or one updated by hand) that suits where it is written:
    tqdm's own on a terminal, a :class:`LogBar` anywhere else. ``kwargs`` are tqdm's."""
    if is_terminal(file):
        return terminal_tqdm(iterable, file=file, **kwargs)
    kwargs.setdefault("mininterval", LOG_INTERVAL_S)
    kwargs.setdefault("maxinterval", max(LOG_INTERVAL_S, kwargs["mininterval"]))
    # The rate over the whole run, not a moving average, is what a line read later should say.
    kwargs.setdefault("smoothing", 0.0)
    kwargs.setdefault("ascii", True)
    kwargs.setdefault("ncols", 100)
    return LogBar(iterable, file=file, **kwargs)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hide transformers' own bars ("Loading weights", "Writing model shards") while loading
    or saving a model, which would otherwise break a run's bar and fill its log."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


__all__ = ["LOG_INTERVAL_S", "LogBar", "is_terminal", "progress_bar", "quiet_transformers"]
