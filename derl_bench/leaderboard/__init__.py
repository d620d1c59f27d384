"""Leaderboards built from submitted result records.

``leaderboards/<benchmark>/*.json`` holds one record per submission.
:func:`~derl_bench.leaderboard.validate.validate_file` checks a file without executing anything
in it; :func:`~derl_bench.leaderboard.render.render_all` writes ``leaderboards/README.md``, the
PNG charts under ``leaderboards/plots/`` and the sortable page ``leaderboards/index.html``.

    >>> from pathlib import Path
    >>> validate_file(Path("/no/such/file.json")).ok
    False
"""

from derl_bench.leaderboard.render import build_boards, render_all, render_html, render_markdown
from derl_bench.leaderboard.validate import (
    Report,
    SubmissionError,
    code_problems,
    load_submission,
    parse_strict,
    problems_in_text,
    record_problems,
    submission_files,
    validate_board,
    validate_file,
    validate_files,
)

__all__ = [
    "Report",
    "SubmissionError",
    "build_boards",
    "code_problems",
    "load_submission",
    "parse_strict",
    "problems_in_text",
    "record_problems",
    "render_all",
    "render_html",
    "render_markdown",
    "submission_files",
    "validate_board",
    "validate_file",
    "validate_files",
]
