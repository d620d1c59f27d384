"""Throughput of one reward-discovery generation: 4 inner runs on 1 Ray worker vs 2, same run.

Both settings share one local Ray instance whose two workers are warmed up first (their
imports and the base model are paid before timing), then train and score the same 4
Meta-Rewards from the tiny model on ``derl/Arithmetic-v0``, once at most 1 inner run in
flight and once at most 2. The speed-up is seconds(1 worker) / seconds(2 workers)::

    python benchmarks/meta_workers.py [--steps 30] [--workers 2]

On this project's 2-core machine the goal is at least 1.6x (an inner run of the tiny model
uses one intra-op thread; see ``derl_bench.policies.threads``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

REWARDS = ["outcome + format_boxed", "outcome", "0.5 * format_boxed + digit_match",
           "answer_closeness"]


def inner_recipe(steps: int) -> dict:
    return {"env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": steps, "group_size": 8,
            "prompts_per_step": 4, "max_new_tokens": 24, "tensorboard": False,
            "save_every": 0, "keep_checkpoints": 1}


def measure(steps: int = 30, workers: int = 2) -> dict:
    """Seconds for the generation at 1 worker and at ``workers``, and their ratio."""
    import ray

    from derl_bench.meta import MetaConfig
    from derl_bench.meta.inner import compile_inner_reward
    from derl_bench.meta.workers import InnerJob, RayExecutor

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=workers, log_to_driver=False, configure_logging=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # Separate runs: this measures how runs spread over workers, not populations.
            config = MetaConfig(method="random", inner=inner_recipe(steps), output_dir=tmp,
                                validation_episodes=16, progress=False, executor="ray",
                                batch_inner="false")

            def generation(tag: str, limit: int, rewards: list[str]) -> float:
                executor = RayExecutor(workers=limit, retries=0)
                jobs = [InnerJob(i, compile_inner_reward(config, expr), f"{tmp}/{tag}/c{i}")
                        for i, expr in enumerate(rewards)]
                began = time.perf_counter()
                outcomes = list(executor.run(config, jobs))
                seconds = time.perf_counter() - began
                failed = [o.errors for o in outcomes if o.result is None]
                if failed:
                    raise RuntimeError(f"inner runs failed: {failed}")
                return seconds

            generation("warmup", workers, REWARDS[:workers])
            one = generation("one", 1, REWARDS)
            many = generation("many", workers, REWARDS)
    finally:
        if started_here:
            ray.shutdown()
    return {"inner_runs": len(REWARDS), "steps": steps, "workers": workers,
            "seconds_1_worker": round(one, 2), f"seconds_{workers}_workers": round(many, 2),
            "speedup": round(one / many, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps per inner run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures = measure(args.steps, args.workers)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
