"""The leaderboards' PNG charts, ``leaderboards/plots/<benchmark>.png``: one per board."""

from __future__ import annotations

from pathlib import Path

from derl_bench.evaluation.schema import DEFAULT_POLICY_INTERFACE
from derl_bench.leaderboard.board import Board


def render_chart(board: Board, path: Path) -> None:
    """A grouped bar chart: one group per level, one bar per row, SE as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / max(1, len(board.rows))
    columns = board.columns()
    fig, ax = plt.subplots(figsize=(11.0 if len(columns) <= 3 else 14.0, 4.5))
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
               hatch="//" if reported else None)
    ax.set_xticks(range(len(columns)), [c[0] for c in columns])
    ax.set_ylim(0, 105)
    ax.set_ylabel("success rate (%)")
    ax.set_title(f"{board.title} ({board.env_id})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
