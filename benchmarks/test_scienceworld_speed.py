"""Step and reset speed of ``derl/ScienceWorld-v0`` against the raw ``scienceworld`` API.

Both sides replay the same gold-path actions of the same (task, variation) pairs in the same
run, interleaved episode by episode so that machine load hits both alike. Ours is the full
``gymnasium.make`` env with its default observers (goal progress included); raw is
``scienceworld.ScienceWorldEnv.step``. ``extra_info["ratio"]`` is ours / raw (lower is
better; the target for steps is 0.25 or less).

    pytest benchmarks/test_scienceworld_speed.py --benchmark-enable -s
"""

from __future__ import annotations

import time

import gymnasium as gym
import pytest

import derl_bench  # noqa: F401 - registers the env ids

pytestmark = pytest.mark.benchmark_suite

EPISODES = (("boil", 0), ("find-living-thing", 0), ("chemistry-mix", 0),
            ("power-component", 0), ("lifespan-longest-lived", 0), ("test-conductivity", 0))
ROUNDS = 3


@pytest.fixture(scope="module")
def envs():
    scienceworld = pytest.importorskip("scienceworld")
    ours = gym.make("derl/ScienceWorld-v0", max_episode_steps=10_000)
    raw = scienceworld.ScienceWorldEnv("", envStepLimit=10_000)
    gold = {}
    for task, variation in EPISODES:
        ours.reset(options={"task": task, "variation": variation})
        gold[task, variation] = ours.unwrapped.gold_path()
    yield ours, raw, gold
    ours.close()
    raw.close()


def _ours_steps(ours, task: str, variation: int, actions: list[str]) -> float:
    ours.reset(options={"task": task, "variation": variation})
    start = time.perf_counter()
    for action in actions:
        ours.step(action)
    return time.perf_counter() - start


def _raw_steps(raw, task: str, variation: int, actions: list[str]) -> float:
    raw.load(task, variation, "easy")
    raw.reset()
    start = time.perf_counter()
    for action in actions:
        raw.step(action)
    return time.perf_counter() - start


def test_step_ratio(benchmark, envs):
    ours, raw, gold = envs
    ours_s = raw_s = 0.0
    for _ in range(ROUNDS):
        for (task, variation), actions in gold.items():
            raw_s += _raw_steps(raw, task, variation, actions)
            ours_s += _ours_steps(ours, task, variation, actions)
    steps = ROUNDS * sum(len(a) for a in gold.values())
    ratio = ours_s / raw_s
    benchmark.extra_info.update({
        "ratio": ratio, "ratio_key": "scienceworld.step", "steps": steps,
        "ours_ms_per_step": 1000 * ours_s / steps, "raw_ms_per_step": 1000 * raw_s / steps,
    })
    print(f"\nstep: ours {1000 * ours_s / steps:.2f} ms, raw {1000 * raw_s / steps:.2f} ms, "
          f"ratio {ratio:.3f} over {steps} steps")
    task, variation = EPISODES[0]
    benchmark.pedantic(_ours_steps, args=(ours, task, variation, gold[task, variation]),
                       rounds=1, iterations=1)
    assert ratio < 1.0


def _ours_reset(ours, task: str, variation: int) -> float:
    start = time.perf_counter()
    ours.reset(options={"task": task, "variation": variation})
    return time.perf_counter() - start


def _raw_reset(raw, task: str, variation: int) -> float:
    start = time.perf_counter()
    raw.load(task, variation, "easy")
    raw.reset()
    return time.perf_counter() - start


def test_reset_ratio(benchmark, envs):
    ours, raw, _ = envs
    ours_s = raw_s = 0.0
    for _ in range(ROUNDS):
        for task, variation in EPISODES:
            raw_s += _raw_reset(raw, task, variation)
            ours_s += _ours_reset(ours, task, variation)
    n = ROUNDS * len(EPISODES)
    ratio = ours_s / raw_s
    benchmark.extra_info.update({
        "ratio": ratio, "ratio_key": "scienceworld.reset",
        "ours_ms_per_reset": 1000 * ours_s / n, "raw_ms_per_reset": 1000 * raw_s / n,
    })
    print(f"\nreset: ours {1000 * ours_s / n:.1f} ms, raw {1000 * raw_s / n:.1f} ms, "
          f"ratio {ratio:.3f}")
    benchmark.pedantic(_ours_reset, args=(ours, *EPISODES[0]), rounds=1, iterations=1)
    # No bound on the ratio here: both sides are dominated by the same Java-side task load,
    # so on a busy machine the ratio is noise around ~0.5 (raw loads twice); it is recorded.
    assert ours.unwrapped.task_name == EPISODES[0][0]
