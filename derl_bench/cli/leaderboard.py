"""``derl-bench leaderboard``: validate submissions and render the boards.

    derl-bench leaderboard validate                      # every leaderboards/*/*.json
    derl-bench leaderboard validate my-result.json       # one file, any place
    derl-bench leaderboard render                        # README.md, plots/, index.html
    derl-bench leaderboard render --check                # fail if the committed board is stale
    derl-bench leaderboard run-here leaderboards/x/a.json  # list records the project ran
    derl-bench leaderboard schema                        # the record's JSON Schema
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from derl_bench.cli._errors import CommandError, require_output_folder

DEFAULT_DIR = Path("leaderboards")


def _board_dir(path: Path, write: bool = False) -> Path:
    """``--dir`` of a command that reads the board, if it is a folder (that can be written,
    for ``write``); a missing one is a mistake, not an empty board."""
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise CommandError(f"--dir: {path} {what} (the leaderboards folder, e.g. "
                           f"{DEFAULT_DIR})")
    return require_output_folder("--dir", path) if write else path


def register(subparsers: Any) -> None:
    """Add the ``leaderboard`` subcommand group."""
    p = subparsers.add_parser("leaderboard", help="validate submissions and render the boards",
                              description="Validate result records and render the leaderboards.")
    sub = p.add_subparsers(dest="leaderboard_command", metavar="ACTION", required=True)

    v = sub.add_parser("validate", help="check submissions; nothing in them is executed")
    v.add_argument("files", nargs="*", type=Path,
                   help="record files (default: every leaderboards/<benchmark>/*.json)")
    v.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="leaderboards folder")
    v.add_argument("--quiet", action="store_true", help="print only rejected files")
    v.set_defaults(func=run_validate)

    r = sub.add_parser("render", help="write README.md, plots/*.png and index.html")
    r.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                   help="leaderboards folder: one holding <benchmark>/ record folders, or an "
                   "empty or new one (any other folder is refused)")
    r.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    r.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if README.md or index.html is out of date")
    r.set_defaults(func=run_render)

    h = sub.add_parser("run-here", help="list run records as made by this project",
                       description="Record the digests of valid run records under --dir in "
                       "run-here.txt; the boards show them as 'run here', any other run "
                       "record as 'submitted'. Editing a listed record unlists it.")
    h.add_argument("files", nargs="+", type=Path, help="run records under --dir")
    h.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="leaderboards folder")
    h.set_defaults(func=run_run_here)

    s = sub.add_parser("schema", help="print the result record's JSON Schema")
    s.set_defaults(func=run_schema)


def run_validate(args: argparse.Namespace) -> int:
    """Exit 0 when every file is valid, 1 when any is rejected, 2 when there is nothing."""
    from derl_bench.leaderboard import validate_board, validate_files

    if args.files:
        # A named file that sits on the board under --dir is held to the board's rules; any
        # file's cited recipe is looked for in the repository that holds --dir.
        root = args.dir.resolve()
        reports = [*validate_files([p for p in args.files if p.resolve().parent.parent == root],
                                   board=True),
                   *validate_files([p for p in args.files if p.resolve().parent.parent != root],
                                   repository=root.parent)]
    else:
        reports = validate_board(_board_dir(args.dir))
    if not reports:
        raise CommandError(f"no submissions found under {args.dir}")
    rejected = 0
    for report in reports:
        path = report.path
        if report.ok:
            if not args.quiet:
                print(f"ok        {path}")
            continue
        rejected += 1
        print(f"REJECTED  {path}")
        for problem in report.problems:
            print(f"          - {problem}")
    print(f"{len(reports) - rejected} valid, {rejected} rejected", file=sys.stderr)
    return 1 if rejected else 0


def run_render(args: argparse.Namespace) -> int:
    """Render from the valid records; invalid ones are reported and left out."""
    from derl_bench.evaluation.record import read_run_here
    from derl_bench.leaderboard import validate_board
    from derl_bench.leaderboard.board import build_boards, evaluated_adapters
    from derl_bench.leaderboard.render import (
        board_texts,
        leaderboards_folder_problem,
        render_all,
    )

    if args.check:
        _board_dir(args.dir)  # it only reads: a missing folder is a mistake, not a stale board
    adapters = evaluated_adapters()
    if not args.check:
        problem = leaderboards_folder_problem(args.dir, adapters)
        if problem:
            raise CommandError(problem)
        require_output_folder("--dir", args.dir)
    records = []
    for report in validate_board(args.dir):
        if report.ok and report.record is not None:
            records.append((report.path.relative_to(args.dir), report.record))
        else:
            print(f"skipping invalid {report.path}: {'; '.join(report.problems)}",
                  file=sys.stderr)
    if args.check:
        boards = build_boards(records, read_run_here(args.dir), adapters)
        expected = board_texts(boards, args.dir)
        stale = [p for p, text in expected.items()
                 if not p.is_file() or p.read_text(encoding="utf-8") != text]
        for path in stale:
            print(f"out of date: {path} (run `derl-bench leaderboard render`)", file=sys.stderr)
        return 1 if stale else 0
    written = render_all(records, args.dir, charts=not args.no_charts, adapters=adapters)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    print(f"rendered {len(records)} records", file=sys.stderr)
    return 0


def run_run_here(args: argparse.Namespace) -> int:
    """Exit 0 when every file was listed; 2, listing nothing, when any is not a valid run
    record on a board under ``--dir``."""
    from derl_bench.evaluation.record import mark_run_here
    from derl_bench.leaderboard import validate_file

    root = _board_dir(args.dir, write=True).resolve()
    problems = []
    for path in args.files:
        report = validate_file(path, board=True)
        if path.resolve().parent.parent != root:
            problems.append(f"{path}: not a board record under {args.dir}")
        elif not report.ok or report.record is None:
            problems.append(f"{path}: invalid ({'; '.join(report.problems)})")
        elif report.record["kind"] != "run":
            problems.append(f"{path}: a {report.record['kind']} record was not run here")
    if problems:
        raise CommandError("\n".join(problems) if len(problems) == 1 else
                           "nothing listed:\n" + "\n".join(f"  {p}" for p in problems))
    print(f"listed {len(args.files)} records in {mark_run_here(args.dir, args.files)}")
    return 0


def run_schema(args: argparse.Namespace) -> int:
    from derl_bench.evaluation.schema import RESULT_SCHEMA

    print(json.dumps(RESULT_SCHEMA, indent=2))
    return 0
