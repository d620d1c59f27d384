"""What a reward-discovery run shows while and after it runs: the progress bar of a generation,
``summary.json``, the learning curve (``curve.png``) and the reward-structure table
(``structure.json``, ``structure.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from derl_bench.family import Family
from derl_bench.files import write_json_atomic
from derl_bench.meta.config import MetaConfig
from derl_bench.meta.types import MetaResult
from derl_bench.meta.workers import InnerJob

STRUCTURE_KINDS = ("linear", "bounded", "veto", "unbounded")


class GenerationProgress:
    """A bar per generation: candidates done, the inner runs now running, best so far."""

    def __init__(self, config: MetaConfig, generation: int, total: int, done: int,
                 best: float, zero_adv: int) -> None:
        from derl_bench.progress import progress_bar

        self.running: set[int] = set()
        self.best, self.zero_adv = best, zero_adv
        self.bar = progress_bar(total=total, initial=done, leave=True,
                                desc=f"{config.name} ({config.method}) gen {generation + 1}/"
                                     f"{config.outer_steps}")
        self._show()

    def _show(self) -> None:
        running = ",".join(f"c{i:02d}" for i in sorted(self.running)) or "-"
        self.bar.set_postfix_str(f"running {running} | best {max(self.best, 0.0):.3f} | "
                                 f"zero-adv gens {self.zero_adv}")

    def start(self, job: InnerJob) -> None:
        self.running.add(job.index)
        self._show()

    def done(self, index: int, best: float | None = None) -> None:
        self.running.discard(index)
        if best is not None:
            self.best = max(self.best, best)
        self.bar.update(1)
        self._show()

    def close(self) -> None:
        self.bar.close()


def structure_table(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per generation: the share of each reward structure among the valid candidates that
    ran, and their mean validation score (the paper's analysis of what the search favours)."""
    rows = []
    for generation in sorted({c["generation"] for c in candidates}):
        ran = [c for c in candidates if c["generation"] == generation
               and c.get("structure") and c.get("status") == "scored"]
        row: dict[str, Any] = {"generation": generation, "n": len(ran)}
        for kind in STRUCTURE_KINDS:
            scores = [c["score"] for c in ran if c["structure"] == kind]
            row[f"{kind}_share"] = len(scores) / len(ran) if ran else 0.0
            row[f"{kind}_mean_score"] = float(np.mean(scores)) if scores else None
        rows.append(row)
    return rows


def write_summary(config: MetaConfig, result: MetaResult, family: Family) -> None:
    """``summary.json``: the run's best reward and policy, its counts and every generation;
    ``family`` is the inner env's."""
    env_id = config.inner.env_id
    write_json_atomic(config.run_dir / "summary.json", {
        "name": config.name, "method": config.method, "env_id": env_id,
        "domain": family.spec.domain,
        "best_expr": result.best_expr,
        "best_validation_score": result.best_score if result.best_expr is not None else None,
        "best_checkpoint": result.best_checkpoint,
        "zero_advantage_generations": result.zero_advantage_generations,
        "failed_inner_runs": sum(c.get("status") == "failed" for c in result.candidates),
        "constant_rewards": sum(c.get("status") == "constant" for c in result.candidates),
        "headline": result.headline,
        "generations": result.generations,
    })


def write_report(config: MetaConfig, result: MetaResult, family: Family) -> None:
    """Everything a finished generation updates: the summary, the curve, the structure table
    (``family``: the inner env's)."""
    out = config.run_dir
    write_summary(config, result, family)
    plot_curve(out / "curve.png", result.generations, f"{config.name} ({config.method})")
    rows = structure_table(result.candidates)
    write_json_atomic(out / "structure.json", rows)
    plot_structure(out / "structure.png", rows)


def plot_curve(path: Path, generations: list[dict[str, Any]], title: str) -> None:
    """Best-so-far and generation-mean validation success against the generation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [g["generation"] for g in generations]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(steps, [g["best_so_far"] for g in generations], marker="o", label="best so far")
    ax.plot(steps, [g["mean_score"] for g in generations], marker=".", label="generation mean")
    ax.set_xlabel("generation")
    ax.set_ylabel("validation success")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_structure(path: Path, rows: list[dict[str, Any]]) -> None:
    """The structure table: each kind's share of the candidates, and its mean score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    steps = [r["generation"] for r in rows]
    bottom = np.zeros(len(rows))
    for kind in STRUCTURE_KINDS:
        share = np.array([r[f"{kind}_share"] for r in rows])
        left.bar(steps, share, bottom=bottom, label=kind)
        bottom += share
        means = [r[f"{kind}_mean_score"] for r in rows]
        points = [(s, m) for s, m in zip(steps, means, strict=True) if m is not None]
        if points:
            right.plot(*zip(*points, strict=True), marker="o", label=kind)
    left.set_xlabel("generation")
    left.set_ylabel("share of candidates")
    left.legend(fontsize=7)
    right.set_xlabel("generation")
    right.set_ylabel("mean validation success")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


__all__ = ["STRUCTURE_KINDS", "GenerationProgress", "plot_curve", "plot_structure",
           "structure_table", "write_report", "write_summary"]
