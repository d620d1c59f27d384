"""Run logs: ``metrics.jsonl`` (one line per step), TensorBoard scalars and a learning curve.

The JSON lines are the source of truth; TensorBoard and the PNG are views of them. On resume
the log is cut back to the checkpoint's step, so the resumed run's log reads as one run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from derl_bench.files import write_jsonl_atomic

METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "learning_curve.png"


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The logged steps of a run, in order."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RunLogger:
    """Append step metrics to the run's logs, starting at ``start_step``."""

    def __init__(self, run_dir: str | Path, start_step: int = 0, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.history = [m for m in read_metrics(self.run_dir) if m["step"] < start_step]
        self._rewrite()
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step drops events a crashed run wrote after the checkpoint we resume from.
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=start_step)

    def _rewrite(self) -> None:
        write_jsonl_atomic(self.run_dir / METRICS_FILE, self.history)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record one training step."""
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        self.history.append(row)
        with (self.run_dir / METRICS_FILE).open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                if math.isfinite(float(value)):
                    self.writer.add_scalar(key, float(value), step)
            self.writer.flush()

    def plot(self) -> Path:
        """Write the learning curve (reward and success per step) and return its path."""
        return plot_curve(self.history, self.run_dir / CURVE_FILE, title=self.run_dir.name)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def plot_curve(history: Sequence[Mapping[str, Any]], path: str | Path,
               keys: tuple[str, ...] = ("reward/mean", "success/mean"), title: str = "") -> Path:
    """Plot ``keys`` against the step with matplotlib (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in keys:
        points = [(m["step"], m[key]) for m in history if key in m]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", markersize=3, label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("value")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    if ax.lines:
        ax.legend()
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
    return path
