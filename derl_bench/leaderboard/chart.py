"""The leaderboards' PNG charts, ``leaderboards/plots/<benchmark>.png``: one per board."""

from __future__ import annotations

import math
from pathlib import Path

from derl_bench.evaluation.schema import DEFAULT_POLICY_INTERFACE
from derl_bench.leaderboard.board import Board

LEGEND_LINES = 20
"""At most this many legend entries a column; a longer board's legend takes more columns."""


def render_chart(board: Board, path: Path) -> None:
    """A grouped bar chart: one group per level, one bar per row, SE as error bars, and the
    legend below the axes in as many columns as its rows need (the image grows to hold it, so
    a board of many rows keeps its axes and every label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = len(board.rows)
    width = 0.8 / max(1, rows)
    columns = board.columns()
    legend_columns = max(1, math.ceil(rows / LEGEND_LINES))
    fig, ax = plt.subplots(figsize=(
        11.0 if len(columns) <= 3 and legend_columns <= 2 else 14.0, 4.5))
    # tab20's 20 colours in turn: the default cycle's 10 would give every tenth row one colour.
    colours = plt.get_cmap("tab20")
    for i, row in enumerate(board.rows):
        xs, heights, errs = [], [], []
        for j, (_, level, metric) in enumerate(columns):
            cell = row.metric_cells(metric).get(level)
            if cell is not None:
                xs.append(j - 0.4 + width * (i + 0.5))
                heights.append(100 * cell.mean)
                errs.append(100 * (cell.se or 0.0))
        label = f"{row.method} · {row.model}" + ("" if row.kind == "run" else " (reported)")
        if row.interface != DEFAULT_POLICY_INTERFACE:
            label += f" [{row.interface}]"
        reported = row.kind != "run"
        ax.bar(xs, heights, width, yerr=None if reported else errs, capsize=2, label=label,
               hatch="//" if reported else None, color=colours(i % colours.N))
    ax.set_xticks(range(len(columns)), [c[0] for c in columns])
    ax.set_ylim(0, 105)
    ax.set_ylabel("success rate (%)")
    ax.set_title(f"{board.title} ({board.env_id})")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08),
              ncol=legend_columns, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    # "tight" grows the saved image to the legend below the axes.
    fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
