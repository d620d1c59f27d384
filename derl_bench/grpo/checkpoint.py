"""Checkpoints: the model and tokenizer (``save_pretrained``), optimiser and RNG state.

A checkpoint is a directory ``<run>/checkpoints/step-<n>`` holding everything needed to continue
the run after step ``n - 1``: the model loads with ``from_pretrained`` like any other, and
``trainer_state.pt`` holds the optimiser, the step and the RNG states. It is written to a
temporary name and renamed, so a crash never leaves a half checkpoint that looks whole.
"""

from __future__ import annotations

import os
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
                    optimizer: torch.optim.Optimizer | dict[str, Any], keep: int = 2) -> Path:
    """Save the state after ``step`` training steps; keep the newest ``keep`` checkpoints.

    ``optimizer`` is the optimiser or its ``state_dict()`` (a population member's share)."""
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    staging = root / f".step-{step}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    with quiet_transformers():
        model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    state = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
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


def drop_optimizer_state(checkpoint: str | Path) -> None:
    """Keep a finished run's step and RNG states but not its optimiser's.

    A checkpoint read only for its weights (a meta loop's inner run, scored, compared and warm
    started from, never resumed) then costs the weights alone: AdamW's two moments are twice
    the weights, 2 GB for a 0.5B model in bfloat16. Such a checkpoint can no longer resume."""
    path = Path(checkpoint) / STATE_FILE
    if not path.is_file():  # a checkpoint another trainer wrote (TRL's) keeps its own files
        return
    state = torch.load(path, weights_only=False, mmap=True)
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    torch.save({"step": state["step"], "optimizer": None, "rng": state["rng"]}, tmp)
    os.replace(tmp, path)


def load_trainer_state(checkpoint: str | Path) -> dict[str, Any]:
    """The optimiser state, step and RNG states of a checkpoint."""
    # Our own file holding numpy RNG tuples; weights_only would reject them.
    return torch.load(Path(checkpoint) / STATE_FILE, weights_only=False)
