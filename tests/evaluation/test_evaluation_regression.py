"""The speed-regression check (``benchmarks/compare.py``) on pytest-benchmark JSON files."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import REPO, load_script

SCRIPT = REPO / "benchmarks" / "compare.py"
compare = load_script("benchmarks/compare.py")


def run_json(path: Path, ratios: dict[str, list[float]]) -> Path:
    """A pytest-benchmark JSON with one benchmark per ratio sample (plus one without a ratio)."""
    benches = [{"fullname": f"benchmarks/test_x.py::test_{key}_{i}",
                "extra_info": {"ratio": value, "ratio_key": key}}
               for key, values in ratios.items() for i, value in enumerate(values)]
    benches.append({"fullname": "benchmarks/test_x.py::test_no_ratio", "extra_info": {}})
    path.write_text(json.dumps({"benchmarks": benches}))
    return path


def baseline(path: Path, ratios: dict[str, float], **extra) -> Path:
    path.write_text(json.dumps({"tolerance": 0.5, "ratios": ratios, **extra}))
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def test_repeated_keys_average_geometrically(tmp_path):
    ratios = compare.read_ratios(run_json(tmp_path / "r.json", {"a.step": [0.5, 2.0],
                                                                "b": [0.3]}))
    assert math.isclose(ratios["a.step"], 1.0) and ratios["b"] == 0.3


def test_within_tolerance_passes_and_beyond_fails(tmp_path):
    base = baseline(tmp_path / "b.json", {"a.step": 0.4, "b.reset": 1.0})
    ok = cli("check", str(run_json(tmp_path / "ok.json", {"a.step": [0.59], "b.reset": [0.2]})),
             "--baseline", str(base))
    assert ok.returncode == 0, ok.stdout
    assert ok.stdout.rstrip().endswith("PASS")
    slow = cli("check", str(run_json(tmp_path / "slow.json", {"a.step": [0.61],
                                                               "b.reset": [1.0]})),
               "--baseline", str(base))
    assert slow.returncode == 1
    assert "a.step" in next(line for line in slow.stdout.splitlines() if "REGRESSION" in line)
    assert "FAIL" in slow.stdout


def test_per_key_tolerance_overrides_the_default(tmp_path):
    base = baseline(tmp_path / "b.json", {"noisy": 1.0}, tolerances={"noisy": 2.0})
    lines, ok = compare.compare({"noisy": 2.9}, json.loads(base.read_text()))
    assert ok
    lines, ok = compare.compare({"noisy": 3.1}, json.loads(base.read_text()))
    assert not ok


def test_an_optional_key_may_be_missing_but_is_checked_where_reported(tmp_path):
    base = json.loads(baseline(tmp_path / "b.json", {"kept": 1.0, "vllm.sample": 1.0},
                               optional=["vllm.sample"]).read_text())
    lines, ok = compare.compare({"kept": 1.0}, base)
    assert ok and any("vllm.sample" in line and "skipped" in line for line in lines)
    assert not compare.compare({"kept": 1.0, "vllm.sample": 1.6}, base)[1]
    assert not compare.compare({"vllm.sample": 1.0}, base)[1]  # others stay required


def test_missing_key_fails_and_new_key_passes(tmp_path):
    base = json.loads(baseline(tmp_path / "b.json", {"kept": 1.0, "gone": 1.0}).read_text())
    lines, ok = compare.compare({"kept": 1.0, "added": 5.0}, base)
    assert not ok
    assert any("gone" in line and "MISSING" in line for line in lines)
    assert any("added" in line and "new" in line for line in lines)
    lines, ok = compare.compare({"kept": 1.0, "gone": 1.2, "added": 5.0}, base)
    assert ok


@pytest.mark.parametrize("content", ["{", '{"benchmarks": [{"extra_info": {"ratio": -1, '
                                          '"ratio_key": "x"}}]}'])
def test_bad_run_file_is_a_clear_error(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = cli("check", str(bad), "--baseline", str(baseline(tmp_path / "b.json", {"x": 1})))
    assert result.returncode == 2 and result.stderr.startswith("error:")


def test_update_writes_ratios_and_keeps_tolerances(tmp_path):
    base = baseline(tmp_path / "b.json", {"old": 1.0}, tolerances={"a.step": 1.0})
    result = cli("update", str(run_json(tmp_path / "r.json", {"a.step": [0.123456789]})),
                 "--baseline", str(base))
    assert result.returncode == 0
    written = json.loads(base.read_text())
    assert written == {"tolerance": 0.5, "tolerances": {"a.step": 1.0},
                       "ratios": {"a.step": 0.1235}}


def test_committed_baseline_names_every_suite_key():
    committed = json.loads((REPO / "benchmarks" / "baseline.json").read_text())
    assert {"alfworld.step", "alfworld.reset", "scienceworld.step", "scienceworld.reset",
            "grading.gsm8k", "grading.math", "reward.eval",
            "evaluation.episodes"} <= set(committed["ratios"])
    assert all(value > 0 for value in committed["ratios"].values())
    # a tolerance above 1.0 (more than twice the baseline ratio) would hide real regressions
    assert 0 < committed["tolerance"] <= 1.0
    assert all(0 < t <= 1.5 for t in committed.get("tolerances", {}).values())
    # every key in the baseline is recorded by some benchmark in the suite
    sources = "".join(p.read_text() for p in (REPO / "benchmarks").glob("test_*.py"))
    for key in committed["ratios"]:
        assert f'"{key}"' in sources, key
    # an optional key is one the baseline holds (only vLLM's: machines without it skip it)
    assert set(committed.get("optional", ())) <= set(committed["ratios"]) and set(
        committed.get("optional", ())) <= {"vllm.sample"}
