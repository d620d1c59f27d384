"""Multi-turn rollout speed: ALFWorld L0 episodes per minute for one GRPO group of the tiny model.

A group is 8 copies of one game stepped in lockstep (every turn one batched generation over the
still-running episodes, then one env step each), 30 turns at most, as the trainer collects it.
The tiny random model never wins, so every episode runs all 30 turns. Needs the ALFWorld data
(``DERL_BENCH_DATA``); nothing else is downloaded.

    python benchmarks/alfworld_rollout_speed.py [--groups 3] [--threads N] [--env-actors]

``--env-actors`` keeps each env in a Ray actor (``derl_bench.rollout.remote``), so a turn's 8
steps run in parallel; compare with a run without it on the same machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=3, help="groups to time (after a warm-up)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: auto)")
    parser.add_argument("--env-actors", action="store_true", help="envs in Ray actors")
    args = parser.parse_args()

    import gymnasium as gym
    import torch

    import derl_bench  # noqa: F401  (registers the env ids)
    from derl_bench.observers.think_action import ThinkActionWrapper
    from derl_bench.policies import LLMPolicy, SamplingConfig, init_tiny_model
    from derl_bench.rollout import rollout_multi_turn

    if args.threads:
        torch.set_num_threads(args.threads)
    else:
        try:
            from derl_bench.policies.threads import configure_threads
        except ImportError:  # a version without per-process thread choice: torch's default
            configure_threads = None
    with tempfile.TemporaryDirectory() as tmp:
        path = init_tiny_model(Path(tmp) / "tiny")
        policy = LLMPolicy.from_pretrained(path, "alfworld",
                                           sampling=SamplingConfig(args.max_new_tokens))
        if not args.threads and configure_threads is not None:
            configure_threads(policy.model)
        def make() -> gym.Env:
            return ThinkActionWrapper(gym.make("derl/ALFWorld-v0", level="L0", split="train",
                                               max_episode_steps=args.max_steps))

        if args.env_actors:
            from derl_bench.rollout.remote import RemoteEnv

            envs = [RemoteEnv(make) for _ in range(args.group_size)]
        else:
            envs = [make() for _ in range(args.group_size)]
        rollout_multi_turn(envs, policy, [0], args.group_size)  # warm-up
        start = time.perf_counter()
        episodes = steps = 0
        for group in range(args.groups):
            torch.manual_seed(group)
            done = rollout_multi_turn(envs, policy, [group + 1], args.group_size)
            episodes += len(done)
            steps += sum(e.length for e in done)
        seconds = time.perf_counter() - start
        for env in envs:
            env.close()
    print(json.dumps({"episodes": episodes, "steps": steps, "seconds": round(seconds, 2),
                      "episodes_per_minute": round(60 * episodes / seconds, 1),
                      "steps_per_second": round(steps / seconds, 1),
                      "torch_threads": torch.get_num_threads(),
                      "env_actors": args.env_actors}))


if __name__ == "__main__":
    main()
