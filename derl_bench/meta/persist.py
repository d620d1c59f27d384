"""What a reward-discovery run keeps on disk, and how a killed run resumes from it.

- ``config.yaml``: the recipe; a resumed run must match it (placement fields may change).
- ``candidates.jsonl``: one record per candidate, appended as its inner run ends; a last line
  cut short by a kill is dropped on reading, and any other damaged line stops a resume with a
  message naming it.
- ``run-id``: the run's id; the state checkpoint carries it, and a resume refuses a state
  another run wrote.
- ``state/checkpoint.pt``: written once a generation is proposed: the proposer's weights,
  optimiser and RNG states, the proposals, the best so far. It is enough to redo the rest of
  the run exactly.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import yaml

from derl_bench.files import write_jsonl_atomic
from derl_bench.grpo.checkpoint import ResumeError, check_same_run
from derl_bench.grpo.rundir import read_run_id, start_run_id
from derl_bench.grpo.trainer import check_unchanged, saved_settings
from derl_bench.meta.config import PLACEMENT_FIELDS, MetaConfig, nest_flat_keys
from derl_bench.meta.search import Proposal, Proposer
from derl_bench.meta.types import MetaResult

STATE_FILE = Path("state") / "checkpoint.pt"
LOG_FILE = "candidates.jsonl"


def save_state(out: Path, generation: int, proposer: Proposer, proposals: list[Proposal],
               result: MetaResult) -> None:
    """The run as it stands once generation ``generation`` is proposed: enough to redo the
    rest of the run exactly (written atomically; the previous one is replaced)."""
    import torch

    path = out / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"generation": generation, "run_id": read_run_id(out),
             "proposer": proposer.state_dict(),
             "proposals": [p.to_dict() for p in proposals],
             "result": {"best_expr": result.best_expr, "best_score": result.best_score,
                        "best_checkpoint": result.best_checkpoint,
                        "generations": result.generations,
                        "zero_advantage_generations": result.zero_advantage_generations}}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def read_log(log: Path) -> list[dict[str, Any]]:
    """The records in ``log``; a last line cut short by a kill is dropped.

    Any other line that is not a record is damage, not a kill: :class:`ResumeError` names it
    rather than the line being dropped without a word.
    """
    records: list[dict[str, Any]] = []
    if not log.exists():
        return records
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise ResumeError(f"{log}, line {number}, is not a candidate record (damaged); "
                              "fix or delete that line, then resume again") from None
        if not isinstance(record, dict) or not isinstance(record.get("generation"), int):
            raise ResumeError(f"{log}, line {number}, is JSON but not a candidate record; fix "
                              "or delete that line, then resume again")
        records.append(record)
    return records


def append_record(log: Path, record: dict[str, Any]) -> None:
    """Add one finished candidate's record to ``log``."""
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, default=str) + "\n")


def start_run(config: MetaConfig, resume: bool) -> dict[str, Any] | None:
    """Prepare the run directory; on resume, check the recipe and return the saved state
    (``None``: the run had not reached its first checkpoint and starts over)."""
    out = config.run_dir
    saved = out / "config.yaml"
    current = yaml.safe_load(yaml.safe_dump(config.to_dict(), sort_keys=False))
    state = None
    if resume:
        if not saved.exists():
            raise ResumeError(f"--resume: no reward-discovery run at {out}")
        # A run saved with flat optimizer_* fields compares as the nested recipe it is.
        check_unchanged(nest_flat_keys(saved_settings(saved)), current, PLACEMENT_FIELDS)
        if (out / STATE_FILE).exists():
            import torch

            try:
                state = torch.load(out / STATE_FILE, weights_only=True)
            except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
                raise ResumeError(
                    f"{out / STATE_FILE} cannot be read, it is damaged ({type(err).__name__}); "
                    "the run cannot resume: start it again with --overwrite") from None
            if not isinstance(state, dict):
                raise ResumeError(f"{out / STATE_FILE} is damaged (it holds no run state); the "
                                  "run cannot resume: start it again with --overwrite")
            check_same_run(out, out / STATE_FILE, state,
                           "the run cannot resume from it: start it again with --overwrite")
    log = out / LOG_FILE
    kept = [] if state is None else [r for r in read_log(log)
                                     if r["generation"] <= state["generation"]]
    out.mkdir(parents=True, exist_ok=True)
    # Nothing an earlier run (or the unfinished end of this one) left can be scored or reported.
    stale = ("results", "retrained-best") if state is not None else (
        "inner", "results", "retrained-best", "state")
    for name in stale:
        shutil.rmtree(out / name, ignore_errors=True)
    saved.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    start_run_id(out, resume)
    if state is None:
        log.unlink(missing_ok=True)
    else:
        write_jsonl_atomic(log, kept)
    return state


__all__ = ["LOG_FILE", "STATE_FILE", "append_record", "read_log", "save_state", "start_run"]
