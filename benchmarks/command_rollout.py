"""Agent inner runs at the machine's speed: a command policy's episodes in lockstep against
one state at a time, and where an inner run's seconds go.

``measure()`` plays the same ALFWorld training games twice with the same command model
(random weights, sampling; every game loaded and played once before either timing):

- lockstep, as a GRPO inner run samples: :func:`derl_bench.rollout.commands.play` on ``envs``
  envs, every running episode's command decoded inside its trie in one batch per turn
  (``decode=True``);
- one at a time: the loop a first agent script writes, each env's state scored alone by
  :func:`~derl_bench.policies.commands.command_log_probs` and the game played to its end
  before the next.

Reported: seconds each way, the ratio lockstep / one at a time (lower is better) and the
lockstep run's split into game resets (loading), env steps and the model. ``--inner`` also
runs a short GRPO inner run (:func:`derl_bench.grpo.commands.train_commands`) and splits its
steps into rollout (resets, env steps, model) and update::

    python benchmarks/command_rollout.py                   # ratio and split
    python benchmarks/command_rollout.py --inner --steps 3 # and an inner run's split
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any


def _policy(seed: int = 0) -> Any:
    import torch

    from derl_bench.families.alfworld.vocab import build_alfworld_tokenizer
    from derl_bench.policies.command_model import build_command_model
    from derl_bench.policies.commands import CommandPolicy

    torch.manual_seed(seed)
    tokenizer = build_alfworld_tokenizer()
    return CommandPolicy(build_command_model(tokenizer).eval(), tokenizer)


def _one_at_a_time(envs: list[Any], policy: Any, games: list[dict], seed: int) -> int:
    """Each game to its end on one env, each state scored alone; returns the steps taken."""
    import torch

    from derl_bench.families.alfworld.compact_state import CompactState
    from derl_bench.policies.commands import command_log_probs, sample_command

    generator = torch.Generator().manual_seed(seed)
    steps = 0
    env = envs[0]
    for options in games:
        observation, info = env.reset(options=options)
        state = CompactState().reset(observation, info)
        done = False
        while not done:
            commands = info["admissible_commands"]
            with torch.no_grad():
                [lp] = command_log_probs(policy.model,
                                         [policy.encode(state.render(), commands)],
                                         policy.end_id)
            command = commands[sample_command(lp, generator)]
            observation, _, terminated, truncated, info = env.step(command)
            state.update(command, observation, info)
            steps += 1
            done = terminated or truncated
    return steps


def measure(games: int = 16, envs: int = 8, seed: int = 0, threads: int = 1,
            max_episode_steps: int = 12) -> dict[str, Any]:
    """The two ways on the same games (see the module docstring)."""
    import gymnasium as gym
    import torch

    import derl_bench  # noqa: F401  (registers the envs)
    from derl_bench.families.alfworld.compact_state import CompactState
    from derl_bench.rollout.commands import play

    torch.set_num_threads(threads)
    policy = _policy(seed)
    pool = [gym.make("derl/ALFWorld-v0", level="L0", split="train",
                     max_episode_steps=max_episode_steps) for _ in range(envs)]
    chosen = [{"index": 7 * i} for i in range(games)]
    try:
        play(pool, policy, chosen, CompactState, seed=seed)  # every game loaded once
        timing: dict[str, float] = {}
        began = time.perf_counter()
        episodes = play(pool, policy, chosen, CompactState, seed=seed, decode=True,
                        timing=timing)
        lockstep = time.perf_counter() - began
        began = time.perf_counter()
        single_steps = _one_at_a_time(pool, policy, chosen, seed)
        single = time.perf_counter() - began
    finally:
        for env in pool:
            env.close()
    steps = sum(e.length for e in episodes)
    return {"games": games, "envs": envs, "threads": threads, "steps_lockstep": steps,
            "steps_one_at_a_time": single_steps, "lockstep_s": lockstep,
            "one_at_a_time_s": single,
            # Per step, since sampling makes the two ways' episode lengths differ.
            "ratio": (lockstep / steps) / (single / single_steps),
            "lockstep_split_s": timing}


def inner_run(steps: int = 3, seed: int = 0, threads: int = 1) -> dict[str, Any]:
    """A short GRPO inner run from a random base: where its seconds go."""
    from derl_bench.grpo.commands import CommandGRPOConfig, train_commands
    from derl_bench.policies.command_model import init_command_model

    with tempfile.TemporaryDirectory() as tmp:
        base = init_command_model(Path(tmp) / "base", "derl/ALFWorld-v0")
        config = CommandGRPOConfig(model=str(base), output_dir=f"{tmp}/run",
                                   env_id="derl/ALFWorld-v0", steps=steps, seed=seed,
                                   num_threads=threads, validation_games=16)
        began = time.perf_counter()
        history = train_commands(config)
        wall = time.perf_counter() - began
    rows = history[:-1]
    keys = ("time/game_reset_s", "time/env_step_s", "time/model_rollout_s", "time/update_s",
            "time/rollout_s")
    return {"steps": steps, "recipe": f"{steps} steps x {config.games_per_step} games x "
            f"{config.group_size} samples, validation {config.validation_games} games",
            "wall_s": wall, **{k: sum(r[k] for r in rows) for k in keys},
            "commands_trained": sum(r["commands/trained"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=16)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--inner", action="store_true", help="also split a short inner run")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    result: dict[str, Any] = {"rollout": measure(args.games, args.envs, threads=args.threads)}
    if args.inner:
        result["inner_run"] = inner_run(args.steps, threads=args.threads)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
