"""Leaderboards built from submitted result records.

``leaderboards/<benchmark>/*.json`` holds one record per submission.
:func:`~derl_bench.leaderboard.validate.validate_file` checks a file without executing anything
in it; :func:`~derl_bench.leaderboard.render.render_all` writes ``leaderboards/README.md``
(:mod:`~derl_bench.leaderboard.markdown`), the PNG charts under ``leaderboards/plots/``
(:mod:`~derl_bench.leaderboard.chart`) and the sortable page ``leaderboards/index.html``
(:mod:`~derl_bench.leaderboard.page`, with its ``page.css`` and ``page.js``) from the boards of
:mod:`~derl_bench.leaderboard.board`.

    >>> from pathlib import Path
    >>> validate_file(Path("/no/such/file.json")).ok
    False
"""

from derl_bench.leaderboard.board import build_boards
from derl_bench.leaderboard.markdown import render_markdown
from derl_bench.leaderboard.page import render_html
from derl_bench.leaderboard.render import render_all
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
