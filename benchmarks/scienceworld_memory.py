"""Resident memory of the ScienceWorld JVM over many steps of ``derl/ScienceWorld-v0``.

Replays gold paths of consecutive L0 train pairs (default observers on, 30-step cap off) for
``--steps`` steps and prints the JVM's and the Python process's resident set size every
``--every`` steps. The target: the JVM stays under 512 MB with the default ``-Xmx512m`` and
does not grow.

    python benchmarks/scienceworld_memory.py --steps 10000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import gymnasium as gym

import derl_bench  # noqa: F401 - registers the env ids


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--jvm-memory", default="512m")
    args = parser.parse_args()

    env = gym.make("derl/ScienceWorld-v0", max_episode_steps=10_000, jvm_memory=args.jvm_memory)
    bare = env.unwrapped
    steps, episode, samples = 0, 0, []
    start = time.perf_counter()
    while steps < args.steps:
        task, variation = bare.pairs[(episode * 37) % len(bare.pairs)]
        episode += 1
        env.reset(options={"task": task, "variation": variation})
        for action in bare.gold_path():
            _, _, terminated, truncated, _ = env.step(action)
            steps += 1
            if steps % args.every == 0:
                jvm = rss_mb(bare.simulator.pid)
                samples.append(jvm)
                print(f"{steps:6d} steps  {episode:4d} episodes  JVM RSS {jvm:6.0f} MB  "
                      f"python RSS {rss_mb(os.getpid()):6.0f} MB  "
                      f"{time.perf_counter() - start:5.0f} s", flush=True)
            if terminated or truncated or steps >= args.steps:
                break
    env.close()
    half = len(samples) // 2
    growth = max(samples[half:]) - max(samples[:half]) if half else 0.0
    print(f"JVM RSS: max {max(samples):.0f} MB, last {samples[-1]:.0f} MB, "
          f"growth second half vs first half {growth:+.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
