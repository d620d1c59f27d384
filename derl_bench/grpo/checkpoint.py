"""Checkpoints: the model and tokenizer (``save_pretrained``), optimiser and RNG state.

A checkpoint is a directory ``<run>/checkpoints/step-<n>`` holding everything needed to continue
the run after step ``n - 1``: the model loads with ``from_pretrained`` like any other, and
``trainer_state.pt`` holds the optimiser, the step and the RNG states. It is written to a
temporary name and renamed, so a crash never leaves a half checkpoint that looks whole.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl_bench.progress import quiet_transformers

STATE_FILE = "trainer_state.pt"


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
    torch.save({"step": step, "optimizer": state, "rng": rng_state()},
               staging / STATE_FILE)
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
