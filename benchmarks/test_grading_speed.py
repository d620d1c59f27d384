"""Grading throughput, ours vs math-verify called directly, in the same run.

    pytest benchmarks/test_grading_speed.py --benchmark-enable

Each test records ``extra_info["ratio"]`` = our time / math-verify's time (lower is better;
the targets are GSM8K <= 0.1 and MATH <= 1.0) under ``extra_info["ratio_key"]``.
"""

from __future__ import annotations

import time

import gymnasium as gym
import pytest
from math_verify import parse, verify
from timing import best_of

import derl_bench  # noqa: F401
from derl_bench.grading import MathVerifier, grade_gsm8k, grade_math


def _problems(env_id: str, split: str):
    env = gym.make(env_id, split=split)
    problems = env.unwrapped.problems
    env.close()
    return problems


def _warm_up_math_verify() -> None:
    # The first call compiles math-verify's LaTeX grammar and warms sympy's caches; timing it
    # would flatter our side.
    verify(parse("$\\frac{1}{2}$"), parse("$0.5$"))


def _math_verify_all(problems) -> int:
    return sum(bool(verify(parse(p.answer if "####" not in p.solution
                                 else p.solution.rsplit("####", 1)[1]),
                           parse(p.solution))) for p in problems)


def test_gsm8k_grading_vs_math_verify(benchmark, data_root):
    problems = _problems("derl/GSM8K-v0", "test")
    assert len(problems) == 1319

    def ours() -> int:
        return sum(grade_gsm8k(p.solution, p.answer).correct for p in problems)

    _warm_up_math_verify()
    raw_time = best_of(lambda: _math_verify_all(problems), rounds=2)
    assert benchmark.pedantic(ours, rounds=5, iterations=1) == 1319
    ratio = benchmark.stats.stats.min / raw_time
    benchmark.extra_info.update(ratio=ratio, ratio_key="grading.gsm8k", raw_seconds=raw_time,
                                items=len(problems))
    print(f"\nGSM8K: ours {benchmark.stats.stats.min:.4f}s, math-verify {raw_time:.3f}s, "
          f"ratio {ratio:.4f} ({1 / ratio:.0f}x faster)")


def test_math500_grading_vs_math_verify(benchmark, data_root):
    problems = _problems("derl/MATH-v0", "math500")
    assert len(problems) == 500
    verifier = MathVerifier(timeout=10)
    verifier.equal("1", "1")  # start the worker outside the timed region

    def ours() -> int:
        return sum(grade_math(p.solution, p.answer, verifier).correct for p in problems)

    def raw() -> int:
        return sum(bool(verify(parse(f"${p.answer}$"), parse(p.solution))) for p in problems)

    _warm_up_math_verify()
    raw_time = best_of(raw, rounds=2)
    assert benchmark.pedantic(ours, rounds=3, iterations=1) == 500
    verifier.close()
    ratio = benchmark.stats.stats.min / raw_time
    benchmark.extra_info.update(ratio=ratio, ratio_key="grading.math", raw_seconds=raw_time,
                                items=len(problems))
    print(f"\nMATH500: ours {benchmark.stats.stats.min:.4f}s, math-verify {raw_time:.3f}s, "
          f"ratio {ratio:.4f}")


PATHOLOGICAL = [
    "10^{10^{10}}",
    "10^{10^{10^{10}}}",
    "9^{9^{9}}",
    "\\frac{1}{\\frac{1}{\\frac{1}{\\frac{1}{" * 30 + "1" + "}}}}" * 30,
    "(x+1)^{3000} - (x+1)^{3000}",
    "\\sqrt{" * 200 + "2" + "}" * 200,
    "1" * 900,
    "\\left(" * 100 + "x" + "\\right)" * 100,
]


@pytest.mark.timeout(120)
def test_pathological_latex_never_hangs(benchmark):
    verifier = MathVerifier(timeout=1.0)
    verifier.equal("1", "1")

    def run() -> int:
        return sum(grade_math(f"\\boxed{{{item}}}", "2", verifier).correct for item in PATHOLOGICAL)

    start = time.perf_counter()
    correct = benchmark.pedantic(run, rounds=1, iterations=1)
    elapsed = time.perf_counter() - start
    verifier.close()
    assert correct == 0
    # every item is bounded by the 1 s timeout plus a worker restart
    assert elapsed < len(PATHOLOGICAL) * 6
    benchmark.extra_info.update(items=len(PATHOLOGICAL), timeouts=verifier.timeouts,
                                seconds=elapsed)
    print(f"\npathological corpus: {len(PATHOLOGICAL)} items, {verifier.timeouts} timeouts, "
          f"{elapsed:.1f}s")


def test_long_responses_grade_in_linear_time(benchmark):
    # A response of 150,000 unclosed \boxed{ (about 1 MB) against one ten times shorter: the
    # ratio of their times over 10 is about 1 when grading is linear in the response's length.
    verifier = MathVerifier(timeout=5.0)
    verifier.equal("1", "1")
    long_text, short_text = "\\boxed{" * 150_000 + "\\boxed{7}", "\\boxed{" * 15_000 + "\\boxed{7}"

    def grade_long() -> bool:
        return grade_math(long_text, "7", verifier).correct

    short_time = best_of(lambda: grade_math(short_text, "7", verifier), rounds=3)
    assert benchmark.pedantic(grade_long, rounds=3, iterations=1)
    verifier.close()
    ratio = benchmark.stats.stats.min / (10 * short_time)
    benchmark.extra_info.update(ratio=ratio, ratio_key="grading.long_response",
                                seconds=benchmark.stats.stats.min, chars=len(long_text))
    print(f"\n1 MB response: {benchmark.stats.stats.min:.3f}s, "
          f"{ratio:.2f}x ten times the 100 KB one")
