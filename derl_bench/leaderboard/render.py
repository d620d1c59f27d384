"""Render the boards from the validated records: Markdown tables, PNG charts, a static HTML page.

The boards are :mod:`derl_bench.leaderboard.board`'s; :mod:`~derl_bench.leaderboard.markdown`
writes the README, :mod:`~derl_bench.leaderboard.chart` the charts and
:mod:`~derl_bench.leaderboard.page` the page. Only records that pass
:func:`~derl_bench.leaderboard.validate.validate_file` are rendered, and every string is
escaped for the format it lands in.

They are written only into a leaderboards folder (:func:`leaderboards_folder_problem`): one that
holds board folders (``<benchmark>/``, :func:`~derl_bench.family.board_folder`), a
``run-here.txt`` or a board rendered before, or an empty or new one; a README.md or index.html
that ``render`` did not write is never replaced.
"""

from __future__ import annotations

import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from derl_bench.evaluation.families import FamilyAdapter
from derl_bench.evaluation.record import RUN_HERE_FILE, read_run_here
from derl_bench.leaderboard.board import Board, build_boards, evaluated_adapters
from derl_bench.leaderboard.chart import render_chart
from derl_bench.leaderboard.markdown import GENERATED, collect_citations, render_markdown
from derl_bench.leaderboard.page import PAGE_TITLE, render_html

RENDERED = {"README.md": GENERATED, "index.html": f"<title>{PAGE_TITLE}</title>"}
"""The text files ``render`` writes, each with text that only a rendered one holds near its
top."""


def _rendered(path: Path) -> bool:
    """Whether ``path`` is a regular file that ``render`` wrote (a link is not followed)."""
    if not stat.S_ISREG(path.lstat().st_mode):
        return False
    with path.open("rb") as fh:
        head = fh.read(8192).decode("utf-8", "replace")
    return RENDERED[path.name] in head


def leaderboards_folder_problem(folder: Path,
                                adapters: Sequence[FamilyAdapter] | None = None) -> str | None:
    """Why ``render`` may not write into ``folder``, else None: it is a file; it holds a
    README.md or index.html that ``render`` did not write; or it holds other things and
    nothing of a board. ``adapters``: the boards' evaluation rules (default:
    :func:`~derl_bench.leaderboard.board.evaluated_adapters`)."""
    if not folder.exists():
        return None
    if not folder.is_dir():
        return f"{folder} is not a folder"
    foreign = [name for name in RENDERED
               if (folder / name).is_symlink()
               or ((folder / name).exists() and not _rendered(folder / name))]
    advice = ("give --dir a leaderboard folder (one holding <benchmark>/ record folders, such "
              "as leaderboards/) or an empty or new folder")
    if foreign:
        return (f"{folder} is not a leaderboard folder: its {' and '.join(foreign)} "
                f"{'was' if len(foreign) == 1 else 'were'} not written by `derl-bench "
                f"leaderboard render` and would be replaced; {advice}")
    entries = {p.name for p in folder.iterdir()}
    if adapters is None:
        adapters = evaluated_adapters()
    benchmarks = {adapter.benchmark for adapter in adapters}
    if not entries or entries & (benchmarks | {RUN_HERE_FILE, *RENDERED}):
        return None
    return (f"{folder} is not a leaderboard folder: it holds no <benchmark>/ record folder, "
            f"{RUN_HERE_FILE} or rendered board, but other files; {advice}")


STUDY = Path("study") / "README.md"
"""A board's study under its record folder: the scripts, the plans stated before the runs and
the measurements behind its run-here rows, which the rendered board links to."""


def board_texts(boards: Sequence[Board], out_dir: Path) -> dict[Path, str]:
    """The text files :func:`render_all` writes under ``out_dir`` for ``boards``
    (path -> text)."""
    studies = {b.benchmark for b in boards if (out_dir / b.benchmark / STUDY).is_file()}
    return {out_dir / "README.md": render_markdown(boards, collect_citations(boards), studies),
            out_dir / "index.html": render_html(boards)}


def render_all(records: Sequence[tuple[Path, dict[str, Any]]], out_dir: Path,
               charts: bool = True,
               adapters: Sequence[FamilyAdapter] | None = None) -> dict[Path, str]:
    """Render every output under ``out_dir`` (a leaderboards folder: see
    :func:`leaderboards_folder_problem`, which the caller checks first); returns the text files
    written (path -> text). ``adapters``: the boards' evaluation rules, as
    :func:`~derl_bench.leaderboard.board.build_boards` takes them."""
    boards = build_boards(records, read_run_here(out_dir), adapters)
    texts = board_texts(boards, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    if charts:
        for board in boards:
            render_chart(board, out_dir / "plots" / f"{board.benchmark}.png")
    return texts
