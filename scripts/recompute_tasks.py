"""Recompute every figure of docs/tasks.md and the tasks' studies from their committed evidence.

    python scripts/recompute_tasks.py                          # every task board
    python scripts/recompute_tasks.py leaderboards/digitshack  # one board

For each board (default: every ``leaderboards/<task>/`` whose evidence holds a planted check)
it prints check 1, check 2, the modes and the board's figures, each recomputed from the
per-seed numbers in ``evidence/`` (``derl_bench.experiments.recompute``), and says which figures
a board's evidence does not hold. It exits 1 when a board's ``summary.md`` is not exactly what
its evidence renders.
"""

from __future__ import annotations

import sys
from pathlib import Path

from derl_bench.experiments.recompute import CONTROLS, summary_renders, task_figures

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    if any(a.startswith("-") for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    tasks = (REPO / "leaderboards").glob("*/evidence/planted.json")
    boards = [Path(a) for a in argv] if argv else sorted(p.parent.parent for p in tasks)
    status = 0
    for board in boards:
        if not board.is_dir():
            print(f"{board}: no such board", file=sys.stderr)
            return 2
        print(f"## {board.name}")
        for line in task_figures(board):
            print(line)
        for folder in (board, board / "evidence" / CONTROLS):
            if summary_renders(folder) is False:
                status = 1
        print()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
