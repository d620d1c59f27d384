"""The GPU suite (benchmarks/gpu_suite.py): its CPU rehearsal runs every row, and the committed
baseline holds every row of the table from a real GPU."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "gpu_suite.py"
BASELINE = ROOT / "benchmarks" / "gpu-baseline.json"
ROWS = {"machine", "decode", "agreement", "update/chunk=1000000", "step", "trl",
        "hf_generate", "population"}


def _check_rows(result: dict, decode_rows: list[int]) -> None:
    rows = result["rows"]
    assert ROWS <= set(rows), f"missing rows: {ROWS - set(rows)}"
    assert not [k for k, r in rows.items() if "error" in r or "skipped" in r]
    # A decode step's time is a difference of two timings (N tokens minus 1). On a GPU it is
    # positive; in the CPU rehearsal (8 tokens of a tiny model) a busy core can make it
    # anything, so there the row must only have timed something.
    timed = (lambda v: math.isfinite(v)) if result["rehearsal"] else (lambda v: v > 0)
    for n in map(str, decode_rows):
        assert timed(rows["decode"][n]["decode_ms_per_step_static"])
        assert timed(rows["decode"][n]["decode_ms_per_step_default"])
        assert timed(rows["hf_generate"][n]["decode_ms_per_step"])
        # Float32: the static cache decodes exactly what the default step decodes.
        assert rows["agreement"][f"float32/{n}"]["share_identical"] == 1.0
    updates = [r for k, r in rows.items() if k.startswith("update/")]
    assert len(updates) == 3 and len({round(r["loss"], 5) for r in updates}) == 1
    assert rows["step"]["tokens_per_s"] > 0 and rows["trl"]["ratio"] > 0
    assert rows["population"]["speedup"] > 0


@pytest.mark.slow
def test_the_rehearsal_runs_every_row_on_a_cpu(tmp_path):
    out = tmp_path / "suite.json"
    done = subprocess.run([sys.executable, str(SUITE), "--rehearse", "--output", str(out),
                           "--deadline", "840"], capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["rehearsal"] is True
    _check_rows(result, result["sizes"]["decode_rows"])


def test_the_committed_baseline_is_a_real_gpu_run_with_every_row():
    result = json.loads(BASELINE.read_text())
    assert result["rehearsal"] is False
    machine = result["rows"]["machine"]
    assert machine["device"].startswith("NVIDIA") and machine["cuda"]
    assert result["sizes"]["shape"] == "qwen2.5-0.5b" and result["sizes"]["dtype"] == "bfloat16"
    _check_rows(result, [16, 256])


def test_docs_gpu_shows_the_committed_figures():
    text = (ROOT / "docs" / "gpu.md").read_text()
    rows = json.loads(BASELINE.read_text())["rows"]
    for figure in (rows["decode"]["16"]["decode_ms_per_step_static"],
                   rows["decode_compiled"]["16"]["decode_ms_per_step_static"],
                   rows["decode_compiled"]["256"]["decode_ms_per_step_static"],
                   rows["decode"]["256"]["decode_ms_per_step_static"],
                   rows["update/chunk=1024+recompute"]["peak_gib"],
                   rows["step"]["tokens_per_s"], rows["trl"]["ratio"],
                   rows["population"]["speedup"]):
        shown = f"{figure:,.0f}" if figure >= 1000 else f"{figure:.2f}"
        assert shown in text, f"docs/gpu.md does not show {shown}"
