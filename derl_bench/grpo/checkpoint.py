"""Checkpoints: the model and tokenizer (``save_pretrained``), optimiser and RNG state.

A checkpoint is a directory ``<run>/checkpoints/step-<n>`` holding everything needed to continue
the run after step ``n - 1``: the model loads with ``from_pretrained`` like any other, and
``trainer_state.pt`` holds the optimiser, the step, the RNG states and the id of the run that
wrote it (:data:`~derl_bench.grpo.rundir.RUN_ID_FILE`), so a resume never continues another
run's checkpoint. It is written to a temporary name and renamed, so a crash never leaves a half
checkpoint that looks whole.
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl_bench.grpo.rundir import read_run_id
from derl_bench.progress import quiet_transformers

STATE_FILE = "trainer_state.pt"


class ResumeError(RuntimeError):
    """``--resume`` was asked for but the run cannot be continued as it was."""


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: str | Path, step: int, model: Any, tokenizer: Any,
                    optimizer: torch.optim.Optimizer | dict[str, Any] | None,
                    keep: int = 2) -> Path:
    """Save the state after ``step`` training steps; keep the newest ``keep`` checkpoints.

    ``optimizer`` is the optimiser, its ``state_dict()`` (a population member's share), or
    ``None`` for a checkpoint that will not resume (``TrainConfig.save_optimizer_state``)."""
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    staging = root / f".step-{step}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    with quiet_transformers():
        model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    state = optimizer if optimizer is None or isinstance(optimizer, dict) else (
        optimizer.state_dict())
    torch.save({"step": step, "optimizer": state, "rng": rng_state(),
                "run_id": read_run_id(run_dir)}, staging / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step-*") if (p / STATE_FILE).exists()]
    return sorted(found, key=lambda p: int(p.name.split("-", 1)[1]))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_trainer_state(checkpoint: str | Path) -> dict[str, Any]:
    """The optimiser state, step and RNG states of a checkpoint."""
    # Our own file holding numpy RNG tuples; weights_only would reject them.
    return torch.load(Path(checkpoint) / STATE_FILE, weights_only=False)


def check_same_run(run_dir: str | Path, checkpoint: str | Path, state: dict[str, Any],
                   advice: str | None = None) -> None:
    """Refuse (:class:`ResumeError`, naming both ids and ending with ``advice``) to resume the
    run in ``run_dir`` from a checkpoint another run wrote. A checkpoint written before
    checkpoints carried a run id cannot be told apart: it is resumed, with a warning."""
    saved, current = state.get("run_id"), read_run_id(run_dir)
    if saved is None:
        print(f"warning: {checkpoint} was written before checkpoints carried their run's id; "
              f"resuming from it without checking that it belongs to the run in {run_dir}",
              file=sys.stderr)
    elif saved != current:
        ours = f"run {current}" if current else "a run without an id"
        advice = advice or (f"move it out of {Path(checkpoint).parent} to resume from this "
                            f"run's own checkpoints, or start a new run from its weights with "
                            f"model={checkpoint}")
        raise ResumeError(f"{checkpoint} belongs to run {saved}, but {run_dir} holds {ours}: "
                          f"it is another run's checkpoint and is not resumed; {advice}")
