"""Compare a benchmark run with the committed baseline of speed ratios; fail on a regression.

Every benchmark under ``benchmarks/`` that races derl-bench against the raw upstream library
records ``benchmark.extra_info["ratio"]`` (our time / upstream's time, lower is better) and
``benchmark.extra_info["ratio_key"]`` (e.g. ``"alfworld.step"``). Ratios, not seconds, are
compared, because both sides run on the same machine in the same run.

    python benchmarks/compare.py                      # run the suite, then compare (= run)
    python benchmarks/compare.py check RUN.json       # compare an existing pytest-benchmark JSON
    python benchmarks/compare.py update RUN.json      # write RUN.json's ratios as the baseline

A key fails when ``ratio > baseline * (1 + tolerance)``; the tolerance is
``baseline.json``'s ``tolerance`` (1.0: twice as slow relative to upstream as the baseline run;
0.5 when the file sets none) unless a key sets its own in ``tolerances``. A baseline key
missing from the run fails too (a benchmark that stopped reporting hides a regression); new
keys are listed and pass. A key listed in ``optional`` may be missing (a benchmark that only
some machines run, such as vLLM's, which needs a vLLM build): it is checked where it is
reported and listed as skipped where not. Exit status: 0 pass, 1 regression or missing key,
2 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "baseline.json"
DEFAULT_TOLERANCE = 0.5


class CompareError(ValueError):
    """The run or baseline file is unreadable or malformed."""


def read_ratios(run_json: Path) -> dict[str, float]:
    """``ratio_key -> ratio`` from a pytest-benchmark JSON (geometric mean of repeated keys)."""
    try:
        data = json.loads(run_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CompareError(f"cannot read benchmark results {run_json}: {exc}") from exc
    samples: dict[str, list[float]] = {}
    for bench in data.get("benchmarks", []):
        extra = bench.get("extra_info") or {}
        if "ratio_key" not in extra or "ratio" not in extra:
            continue
        ratio = float(extra["ratio"])
        if not math.isfinite(ratio) or ratio <= 0:
            raise CompareError(f"{bench.get('fullname')}: ratio {extra['ratio']!r} is not positive")
        samples.setdefault(str(extra["ratio_key"]), []).append(ratio)
    return {key: math.exp(sum(map(math.log, vs)) / len(vs)) for key, vs in sorted(samples.items())}


def read_baseline(path: Path = BASELINE) -> dict:
    try:
        baseline = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CompareError(f"cannot read baseline {path}: {exc}") from exc
    if not isinstance(baseline.get("ratios"), dict):
        raise CompareError(f"{path} has no 'ratios' object")
    return baseline


def compare(ratios: Mapping[str, float], baseline: Mapping) -> tuple[list[str], bool]:
    """Lines of a report and whether the run passes."""
    tolerance = float(baseline.get("tolerance", DEFAULT_TOLERANCE))
    per_key = baseline.get("tolerances", {})
    optional = set(baseline.get("optional", ()))
    lines = [f"{'key':<28}{'baseline':>10}{'run':>10}{'limit':>10}  verdict"]
    ok = True
    for key, base in sorted(baseline["ratios"].items()):
        limit = float(base) * (1.0 + float(per_key.get(key, tolerance)))
        if key not in ratios:
            skipped = key in optional
            lines.append(f"{key:<28}{base:>10.3f}{'-':>10}{limit:>10.3f}  "
                         + ("skipped (optional)" if skipped else "MISSING"))
            ok &= skipped
            continue
        verdict = "ok" if ratios[key] <= limit else "REGRESSION"
        ok &= verdict == "ok"
        lines.append(f"{key:<28}{base:>10.3f}{ratios[key]:>10.3f}{limit:>10.3f}  {verdict}")
    for key in sorted(set(ratios) - set(baseline["ratios"])):
        lines.append(f"{key:<28}{'-':>10}{ratios[key]:>10.3f}{'-':>10}  new (not in baseline)")
    return lines, ok


def run_suite(out: Path, extra: list[str]) -> int:
    """Run ``pytest benchmarks`` with timing on, writing pytest-benchmark JSON to ``out``."""
    cmd = [sys.executable, "-m", "pytest", str(HERE), "-q", "-p", "no:cacheprovider",
           "--benchmark-enable", "--benchmark-only", f"--benchmark-json={out}", *extra]
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd, cwd=HERE.parent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action")
    r = sub.add_parser("run", help="run the benchmark suite, then compare with the baseline")
    r.add_argument("--json", type=Path, help="keep the pytest-benchmark JSON here")
    r.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    c = sub.add_parser("check", help="compare a pytest-benchmark JSON with the baseline")
    c.add_argument("run_json", type=Path)
    u = sub.add_parser("update", help="write a run's ratios as the new baseline")
    u.add_argument("run_json", type=Path)
    for p in (r, c, u):
        p.add_argument("--baseline", type=Path, default=BASELINE)
    args = parser.parse_args(argv)
    if args.action is None:  # bare `python benchmarks/compare.py`, as `make test` calls it
        args = parser.parse_args(["run", *(argv or [])])
    try:
        if args.action == "update":
            ratios = read_ratios(args.run_json)
            old = read_baseline(args.baseline) if args.baseline.is_file() else {}
            new = {"tolerance": old.get("tolerance", DEFAULT_TOLERANCE),
                   "tolerances": old.get("tolerances", {}),
                   **({"optional": old["optional"]} if "optional" in old else {}),
                   "ratios": {k: float(f"{v:.4g}") for k, v in ratios.items()}}
            args.baseline.write_text(json.dumps(new, indent=2) + "\n", encoding="utf-8")
            print(f"wrote {len(ratios)} ratios to {args.baseline}", file=sys.stderr)
            return 0
        baseline = read_baseline(args.baseline)
        if args.action == "run":
            with tempfile.TemporaryDirectory() as tmp:
                out = args.json or Path(tmp) / "benchmarks.json"
                status = run_suite(out, args.pytest_args)
                if status not in (0, 5):
                    print(f"benchmark suite failed (pytest exit {status})", file=sys.stderr)
                    return 1
                ratios = read_ratios(out)
        else:
            ratios = read_ratios(args.run_json)
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lines, ok = compare(ratios, baseline)
    print("\n".join(lines))
    print("PASS" if ok else "FAIL: speed ratios regressed beyond tolerance (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
