"""Large Meta-Reward fuzz run: ``python benchmarks/fuzz_reward.py [--cases N] [--seed S]``.

Feeds N inputs (the adversarial corpus, then random expressions and their mutations) to
``compile_reward``, evaluates everything that compiles, and prints the counts. Exits 1 on any
crash (an error that is not a typed ``MetaRewardError``), non-finite output or side effect.
:func:`run_fuzz` also compares the interpreter's state (modules, environment, builtins, files)
before and after. ``tests/reward/test_reward_fuzz.py`` runs a smaller sample of the same checks.
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from derl_bench.reward import MetaRewardError, compile_reward, random_expression

MARKER = "derl_reward_fuzz_marker"


def adversarial_corpus(marker_dir: str = "/tmp") -> list[str]:
    """Inputs written to break a naive evaluator: code execution, resource exhaustion,
    look-alike characters and malformed syntax."""
    touch = f"{marker_dir}/{MARKER}"
    return [
        "__import__('os')",
        f"__import__('os').system('touch {touch}')",
        "__builtins__",
        "__class__",
        "().__class__.__bases__[0].__subclasses__()",
        "g1.__class__.__mro__",
        "(lambda: 0)()",
        "lambda: 0",
        "[x for x in (1, 2)]",
        "{x: 1 for x in 'ab'}",
        f"open('{touch}', 'w').write('x')",
        "exec('import os')",
        "eval('1+1')",
        "compile('1', 'f', 'eval')",
        "globals()",
        "locals()['g1']",
        "getattr(g1, 'real')",
        "breakpoint()",
        "input()",
        "g1 if g2 else g3",
        "g1 and g2 or g3",
        "g1 == g2",
        "g1; import os",
        "g1\nimport os",
        "g1 # comment",
        "f'{g1}'",
        "b'g1'",
        "'g1'",
        '"""g1"""',
        "9**9**9",
        "9**9",
        "2**-1",
        "10**308 * 10**308",
        "1e308 * 1e308",
        "1e999",
        "-1e999",
        "9" * 4000,
        "1" + "0" * 400 + " * g1",
        "(" * 100_000 + "g1" + ")" * 100_000,
        "(" * 33 + "g1" + ")" * 33,
        "(" * 32 + "g1" + ")" * 32,
        "-" * 100_000 + "g1",
        "-" * 4000 + "g1",
        "+".join(["g1"] * 2000),
        "abs(" * 40 + "g1" + ")" * 40,
        "max(" + ", ".join(["g1"] * 17) + ")",
        "mean(mean(g1))",
        "g1\x00",
        "\x00",
        "g1 + \x00 + g2",
        "g\u0031",
        "\uff47\uff11",  # fullwidth g1
        "g1 \u2212 g2",  # minus sign
        "\u0261" + "1",  # latin small script g
        "g1\u200b",  # zero-width space
        "\u202eg1",  # right-to-left override
        "g\u0430",  # Cyrillic a
        "\ud800",  # lone surrogate
        "\U0001f600",
        "g1 \\\n + g2",
        "`g1`",
        "g1 @ g2",
        "g1 // g2",
        "g1 % g2",
        "g1 << 2",
        "~g1",
        "g1[0]",
        "g1()",
        "sqrt()",
        "clip(g1)",
        "min(g1,)",
        "min(g1, key=abs)",
        "*g1",
        "**g1",
        "g1 +",
        "",
        " ",
        ")(",
        "1/0",
        "g1 / 0",
        "0/0",
        "sum(g1) / 0",
        "sqrt(-1)",
        "log1p(-1)",
        "log1p(-1e308)",
        "g1 ** 8 ** 1",
        "None",
        "True",
        "print",
        "self",
        "os",
        "sys.exit(1)",
        "exit()",
        "quit",
    ]


_NOISE = list("()+-*/,.eE0123456789_ gm'\"[]{}:;=<>!%&|^~@#\\`$?\x00\t\n") + [
    "\u2212",
    "\uff11",
    "\u0430",
    "\u200b",
    "**",
    "__",
    "mean(",
    "max(",
    "g1",
    "1e308",
    "(((",
    ")))",
    "lambda",
    "import",
    "__import__",
    "for",
    "if",
]


def mutate(rng: random.Random, text: str) -> str:
    """One random edit: insert, delete, replace, duplicate a slice or splice noise."""
    if not text:
        return rng.choice(_NOISE)
    i = rng.randrange(len(text) + 1)
    j = min(len(text), i + rng.randint(0, 5))
    roll = rng.random()
    if roll < 0.3:
        return text[:i] + rng.choice(_NOISE) + text[i:]
    if roll < 0.5:
        return text[:i] + text[j:]
    if roll < 0.7:
        return text[:i] + rng.choice(_NOISE) + text[j:]
    if roll < 0.85:
        return text[:j] + text[i:j] * rng.randint(1, 50) + text[j:]
    return (
        rng.choice(("(", "-", "abs(", "mean(")) * rng.randint(1, 40)
        + text
        + ")" * rng.randint(0, 40)
    )


@dataclass
class FuzzReport:
    cases: int = 0
    rejected: int = 0
    compiled: int = 0
    evaluated: int = 0
    crashes: list[str] = field(default_factory=list)
    bad_values: list[str] = field(default_factory=list)
    side_effects: list[str] = field(default_factory=list)
    slowest_s: float = 0.0


def _snapshot(watch: Path) -> dict[str, object]:
    return {
        "modules": set(sys.modules),
        "environ": dict(os.environ),
        "builtins": {k: id(v) for k, v in vars(builtins).items()},
        "files": sorted(p.name for p in watch.iterdir()),
        "cwd": os.getcwd(),
    }


def run_fuzz(n: int, seed: int = 0, evaluate_every: int = 1) -> FuzzReport:
    """Run ``n`` fuzz cases (corpus first, then mutations and random draws)."""
    report = FuzzReport()
    rng = random.Random(seed)
    data_rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        watch = Path(tmp)
        corpus = adversarial_corpus(tmp)
        compile_reward("mean(success) + sqrt(g1)", domain="agent").episodic(
            {"success": np.zeros((1, 1))}, [1]
        )  # warm imports before the snapshot
        before = _snapshot(watch)
        pool = list(corpus)
        for i in range(n):
            domain = "agent" if i % 2 else "math"
            if i < len(corpus):
                text = corpus[i]
            elif rng.random() < 0.4:
                text = random_expression(rng, domain)
            else:
                text = mutate(rng, rng.choice(pool))
                for _ in range(rng.randint(0, 3)):
                    text = mutate(rng, text)
                if len(pool) < 5000 and len(text) < 2000:
                    pool.append(text)
            _one_case(text, domain, i % evaluate_every == 0, data_rng, report)
        after = _snapshot(watch)
    for key, value in before.items():
        if key == "modules":
            new = sorted(set(after[key]) - set(value))  # type: ignore[arg-type]
            if new:
                report.side_effects.append(f"modules imported: {new[:10]}")
        elif after[key] != value:
            report.side_effects.append(f"{key} changed")
    return report


def _one_case(
    text: str, domain: str, evaluate: bool, data_rng: np.random.Generator, report: FuzzReport
) -> None:
    report.cases += 1
    start = time.perf_counter()
    try:
        reward = compile_reward(text, domain=domain)
    except MetaRewardError:
        report.rejected += 1
        reward = None
    except Exception as err:  # noqa: BLE001 - anything untyped is exactly what we look for
        report.crashes.append(f"{text[:80]!r}: {type(err).__name__}: {err}")
        reward = None
    if reward is not None:
        report.compiled += 1
        if evaluate:
            try:
                traj = {p: data_rng.normal(scale=10.0, size=(4, 5)) for p in reward.primitives}
                lengths = np.array([0, 1, 3, 5])
                values = reward.episodic(traj, lengths)
                dense = reward.per_step(traj, lengths)
                report.evaluated += 1
                if not (
                    np.all(np.isfinite(values))
                    and np.all(np.abs(values) <= reward.limit)
                    and np.all(np.isfinite(dense))
                ):
                    report.bad_values.append(text[:80])
            except Exception as err:  # noqa: BLE001
                report.crashes.append(f"eval {text[:80]!r}: {type(err).__name__}: {err}")
    report.slowest_s = max(report.slowest_s, time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    report = run_fuzz(args.cases, seed=args.seed)
    summary = {
        "cases": report.cases,
        "rejected_typed": report.rejected,
        "compiled": report.compiled,
        "evaluated": report.evaluated,
        "crashes": len(report.crashes),
        "bad_values": len(report.bad_values),
        "side_effects": len(report.side_effects),
        "slowest_case_s": round(report.slowest_s, 4),
        "seconds": round(time.perf_counter() - start, 1),
    }
    print(json.dumps(summary))
    for line in report.crashes[:20] + report.bad_values[:20] + report.side_effects:
        print(line, file=sys.stderr)
    return 1 if report.crashes or report.bad_values or report.side_effects else 0


if __name__ == "__main__":
    sys.exit(main())
