"""Checkpoints: the model and tokenizer (``save_pretrained``), optimiser and RNG state.

A checkpoint is a directory ``<run>/checkpoints/step-<n>`` holding everything needed to continue
the run after step ``n - 1``: the model loads with ``from_pretrained`` like any other, and
``trainer_state.pt`` holds the optimiser, the step, the RNG states and the id of the run that
wrote it (:data:`~derl_bench.grpo.rundir.RUN_ID_FILE`), so a resume never continues another
run's checkpoint. It is written to a temporary name and renamed, so a crash never leaves a half
checkpoint that looks whole. It is read with ``torch.load(weights_only=True)``, so nothing in
the file is ever executed, and a resume checks every file of the checkpoint first: a damaged
one is named, with the last intact checkpoint to go back to.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl_bench.grpo.rundir import read_run_id
from derl_bench.policies.model_files import damaged_model_file
from derl_bench.progress import quiet_transformers

STATE_FILE = "trainer_state.pt"


class ResumeError(RuntimeError):
    """``--resume`` was asked for but the run cannot be continued as it was."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (its folder cannot be written, is full, or a file is
    in the way); the message names the checkpoint and the run's last good one."""


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def rng_state() -> dict[str, Any]:
    """The RNG states, as types ``torch.load(weights_only=True)`` reads (numpy's key as a
    list, not an array)."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    return {"python": random.getstate(),
            "numpy": (kind, np.asarray(key).tolist(), int(pos), int(has_gauss), float(cached)),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(tuple(state["numpy"]))
    torch.set_rng_state(state["torch"])


def _numpy_array_globals() -> list[Any]:
    """What unpickling a numpy array needs, and nothing that runs code: checkpoints written
    before the RNG state was stored as lists hold numpy's key as an array."""
    core = "numpy._core" if hasattr(np, "_core") else "numpy.core"  # numpy 2, numpy 1
    _reconstruct = importlib.import_module(f"{core}.multiarray")._reconstruct
    return [(_reconstruct, "numpy._core.multiarray._reconstruct"),
            (_reconstruct, "numpy.core.multiarray._reconstruct"),
            np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def save_checkpoint(run_dir: str | Path, step: int, model: Any, tokenizer: Any,
                    optimizer: torch.optim.Optimizer | dict[str, Any] | None,
                    keep: int = 2) -> Path:
    """Save the state after ``step`` training steps; keep the newest ``keep`` checkpoints.

    ``optimizer`` is the optimiser, its ``state_dict()`` (a population member's share), or
    ``None`` for a checkpoint that will not resume (``TrainConfig.save_optimizer_state``)."""
    root = checkpoints_dir(run_dir)
    final = root / f"step-{step}"
    staging = root / f".step-{step}.tmp"
    try:
        if root.exists() and not root.is_dir():
            raise CheckpointWriteError(f"{root} is a file, not a folder")
        if final.exists() and not final.is_dir():
            # Not a checkpoint this run wrote, so not ours to delete.
            raise CheckpointWriteError(f"{final} is a file")
        root.mkdir(parents=True, exist_ok=True)
        _remove(staging)  # a killed save's leftover
        # Made here, because save_pretrained only logs a path it cannot make a folder of.
        staging.mkdir()
        with quiet_transformers():
            model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        state = optimizer if optimizer is None or isinstance(optimizer, dict) else (
            optimizer.state_dict())
        # Through a Python file: torch reports a failed write as a RuntimeError, and only a
        # write of ours leaves the OSError behind it (its context) to say why.
        with open(staging / STATE_FILE, "wb") as handle:
            torch.save({"step": step, "optimizer": state, "rng": rng_state(),
                        "run_id": read_run_id(run_dir)}, handle)
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
    except BaseException as err:
        _remove(staging)
        refusal = _os_error(err)
        if refusal is None:
            raise
        raise _write_error(run_dir, final, refusal) from None
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _remove(path: Path) -> None:
    """Remove ``path``, a folder or a file, if it is there and can be removed."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _os_error(err: BaseException) -> OSError | None:
    """The operating system's refusal of a write behind ``err``, or None: an ``OSError``;
    torch's ``RuntimeError`` about a write of its file handle that failed with one (its
    context); safetensors' error, which gives only the error's number (``(os error 28)``)."""
    if isinstance(err, OSError):
        return err
    if isinstance(err, RuntimeError) and isinstance(err.__context__, OSError):
        return err.__context__
    from safetensors import SafetensorError

    if isinstance(err, SafetensorError):
        found = re.search(r"\(os error (\d+)\)", str(err))
        if found:
            code = int(found.group(1))
            return OSError(code, os.strerror(code))
    return None


def _write_error(run_dir: str | Path, final: Path, err: OSError) -> CheckpointWriteError:
    """``err``, met while writing the checkpoint ``final``, as the checkpoint it was for and the
    run's last good one; the hidden staging folder it may name is not the user's to look for."""
    if isinstance(err, CheckpointWriteError):
        reason = str(err)
    else:
        reason = f"{final.parent}: {err.strerror or type(err).__name__}"
    last = latest_checkpoint(run_dir)
    kept = (f"the run's last good checkpoint is {last}: resume from it once the checkpoint "
            f"can be written" if last is not None else "the run has no other checkpoint")
    return CheckpointWriteError(f"cannot write checkpoint {final} ({reason}); {kept}")


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


def load_trainer_state(checkpoint: str | Path, mmap: bool = False) -> dict[str, Any]:
    """The optimiser state, step, RNG states and run id of a checkpoint; :class:`ResumeError`
    naming the file when it is damaged (cut short, or not a trainer state at all)."""
    path = Path(checkpoint) / STATE_FILE
    try:
        with torch.serialization.safe_globals(_numpy_array_globals()):
            state = torch.load(path, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise ResumeError(f"{path} is missing") from None
    # Whatever the bytes were, torch could not read them; its message would suggest
    # weights_only=False, which would run code from the file.
    except Exception as err:
        raise ResumeError(f"{path} is damaged ({type(err).__name__})") from None
    if not (isinstance(state, dict) and isinstance(state.get("step"), int)
            and isinstance(state.get("optimizer"), dict | None)
            and isinstance(state.get("rng"), dict)
            and {"python", "numpy", "torch"} <= state["rng"].keys()):
        raise ResumeError(f"{path} is damaged (it holds no trainer state)")
    return state


def checkpoint_problem(checkpoint: str | Path, mmap: bool = False) -> str | None:
    """What makes ``checkpoint`` unusable for a resume (a damaged or missing file, named),
    else None. Reads the weights' headers and the trainer state, not the weights."""
    checkpoint = Path(checkpoint)
    if not any(checkpoint.glob("*.safetensors")):
        return f"{checkpoint} holds no model weights (*.safetensors)"
    damaged = damaged_model_file(checkpoint)
    if damaged:
        return damaged
    try:
        load_trainer_state(checkpoint, mmap=mmap)
    except ResumeError as err:
        return str(err)
    return None


def open_checkpoint(run_dir: str | Path, checkpoint: str | Path) -> dict[str, Any]:
    """The trainer state of ``checkpoint`` for resuming the run in ``run_dir``, once every file
    of the checkpoint is checked. A damaged one is refused (:class:`ResumeError`) with the last
    intact checkpoint of the run to go back to."""
    problem = checkpoint_problem(checkpoint)
    if problem is None:
        return load_trainer_state(checkpoint)
    earlier = [c for c in list_checkpoints(run_dir) if c != Path(checkpoint)]
    # An earlier checkpoint is only looked at, not loaded: its tensors stay on disk.
    good = next((c for c in reversed(earlier) if checkpoint_problem(c, mmap=True) is None),
                None)
    if good is None:
        advice = "no earlier checkpoint of the run is intact: start it again with --overwrite"
    else:
        advice = (f"the last good checkpoint is {good}: delete {checkpoint} and resume again "
                  f"to continue from there")
    raise ResumeError(f"{problem}; the run cannot resume from it. {advice}")


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
