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
lockstep run's split into game resets (loading), env steps and the model. ``--step`` also
times a whole GRPO step against the model's passes alone at its shapes (:func:`grpo_step`)
and splits it into resets, env steps, the rollout's model time, the KL's reference and the
update::

    python benchmarks/command_rollout.py                   # ratio and split
    python benchmarks/command_rollout.py --step            # and a GRPO step / its arithmetic
    python benchmarks/command_rollout.py --step --layers 2 # the step of a two-layer model
    python benchmarks/command_rollout.py --passes A B      # two model folders' passes, in turn

``--passes`` times each model folder's forward and backward pass over the same rows (64 rows
of 100 tokens, about an update minibatch) in one process, the models in turn, so that a
machine's load falls on all of them alike: their ratios compare model shapes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _policy(seed: int = 0, layers: int | None = None) -> Any:
    import torch

    from derl_bench.families.alfworld.vocab import build_alfworld_tokenizer
    from derl_bench.policies.command_model import build_command_model
    from derl_bench.policies.commands import CommandPolicy

    torch.manual_seed(seed)
    tokenizer = build_alfworld_tokenizer()
    return CommandPolicy(build_command_model(tokenizer, _spec(layers)).eval(), tokenizer)


def _spec(layers: int | None) -> Any:
    """The command model's default shape, or with ``layers`` decoder layers."""
    from derl_bench.policies.command_model import CommandModelSpec

    return CommandModelSpec() if layers is None else CommandModelSpec(num_hidden_layers=layers)


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


def grpo_step(games: int = 8, group: int = 8, envs: int = 16, threads: int = 1,
              updates_per_batch: int = 2, max_episode_steps: int = 12, timed_steps: int = 1,
              seed: int = 0, layers: int | None = None) -> dict[str, Any]:
    """A whole GRPO step of a command policy against its arithmetic, in the same run.

    The step: :func:`~derl_bench.grpo.commands.train_commands` with ``games`` x ``group``
    episodes, ``updates_per_batch`` update epochs, on ``threads`` torch threads; its first step
    loads the games (the pool is those ``games``, so every step replays them, as a run's
    steps replay its pool's games once loaded) and is not timed; the next ``timed_steps`` are.
    Random weights never win, so every episode runs to ``max_episode_steps`` (12: about the
    DAgger base's 11.8 steps an L0 game), and the reward ``sum(new_location)`` differs within
    every group, so every command is trained: the step's heaviest shapes.

    The arithmetic: the same model's passes alone over as many distinct (state, command) rows
    as the step trained (states the same model played on the same games), in the update's
    order and minibatches: one forward pass (what drawing the commands must compute at least)
    and ``updates_per_batch`` forward and backward passes, each timed three times (the median
    kept). ``ratio`` is step / arithmetic.
    ``layers``: the command model's decoder layers (default: its default shape, 4).
    """

    from derl_bench.grpo.commands import CommandGRPOConfig, train_commands
    from derl_bench.policies.command_model import init_command_model

    with tempfile.TemporaryDirectory() as tmp:
        base = init_command_model(Path(tmp) / "base", "derl/ALFWorld-v0", _spec(layers))
        config = CommandGRPOConfig(
            model=str(base), output_dir=f"{tmp}/run", env_id="derl/ALFWorld-v0",
            meta_reward="sum(new_location)", steps=1 + timed_steps, games_per_step=games,
            group_size=group, pool=games, envs=envs, num_threads=threads, seed=seed,
            updates_per_batch=updates_per_batch, learning_rate=1e-5, validation_games=0,
            max_episode_steps=max_episode_steps)
        history = train_commands(config)
    rows = history[1:-1]
    step_s = (rows[-1]["time/elapsed_s"] - history[0]["time/elapsed_s"]) / len(rows)
    commands = sum(r["commands/trained"] for r in rows) / len(rows)
    distinct = sum(r["commands/distinct"] for r in rows) / len(rows)
    split = {key: sum(r[key] for r in rows) / len(rows) for key in (
        "time/game_reset_s", "time/env_step_s", "time/model_rollout_s", "time/reference_s",
        "time/update_s")}
    arithmetic = _arithmetic(games, group, envs, threads, updates_per_batch,
                             max_episode_steps, config.minibatch, seed, round(distinct), layers)
    return {"episodes": games * group, "threads": threads,
            "layers": _spec(layers).num_hidden_layers,
            "updates_per_batch": updates_per_batch, "commands": commands,
            "commands_distinct": distinct, "step_s": step_s,
            "split_s": split, **arithmetic,
            "ratio": step_s / arithmetic["arithmetic_s"]}


def _arithmetic(games: int, group: int, envs: int, threads: int, epochs: int,
                max_episode_steps: int, minibatch: int, seed: int, rows: int,
                layers: int | None = None, repeats: int = 3) -> dict[str, float]:
    """The model's passes alone at a step's shapes (see :func:`grpo_step`), the median of
    ``repeats`` timings."""
    import gymnasium as gym
    import torch

    import derl_bench  # noqa: F401  (registers the envs)
    from derl_bench.families.alfworld.compact_state import CompactState
    from derl_bench.grpo.commands import unique_rows
    from derl_bench.policies.commands import chosen_log_probs
    from derl_bench.rollout.commands import play

    torch.set_num_threads(threads)
    policy = _policy(seed, layers)
    pool = [gym.make("derl/ALFWorld-v0", level="L0", split="train",
                     max_episode_steps=max_episode_steps) for _ in range(envs)]
    # As many distinct rows as the step trained: the same games played again with new seeds
    # until there are enough, then that many drawn (seeded).
    steps: list[Any] = []
    try:
        for round_seed in range(seed, seed + 50):
            episodes = play(pool, policy, [{"index": i} for i in range(games)
                                           for _ in range(group)],
                            CompactState, seed=round_seed, decode=True)
            steps += [s for e in episodes for s in e.steps]
            distinct = unique_rows(steps)[0]
            if len(distinct) >= rows:
                break
    finally:
        for env in pool:
            env.close()
    drawn = random.Random(seed).sample(distinct, min(rows, len(distinct)))
    # In the update's order (a state's rows together, its prompt run once): what the passes
    # must compute, not how the step happens to order them.
    states = [(s.ids, s.chosen) for s in unique_rows(drawn)[0]]
    parts = [states[i:i + minibatch] for i in range(0, len(states), minibatch)]
    # Each part timed ``repeats`` times, its median kept: one timing of a few seconds varies
    # by about a tenth between runs on a quiet machine, as much as the step's overhead.
    forwards, updates = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        with torch.no_grad():
            for part in parts:
                chosen_log_probs(policy.model, [i for i, _ in part], [c for _, c in part],
                                 policy.end_id)
        forwards.append(time.perf_counter() - began)
        began = time.perf_counter()
        for _ in range(epochs):
            for part in parts:
                chosen_log_probs(policy.model, [i for i, _ in part], [c for _, c in part],
                                 policy.end_id).sum().backward()
        updates.append(time.perf_counter() - began)
    forward, update = statistics.median(forwards), statistics.median(updates)
    return {"arithmetic_commands": len(states), "forward_s": forward,
            "forward_backward_s": update, "arithmetic_s": forward + update}


def passes(models: list[str], rows: int = 64, tokens: int = 100, rounds: int = 3,
           repeats: int = 5, threads: int = 1) -> dict[str, Any]:
    """Each model's forward and backward pass over the same random rows, the models in turn
    for ``rounds`` rounds; per model the median of its ``repeats`` passes in each round, and
    each model's seconds over the first model's, per round."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    loaded = {m: AutoModelForCausalLM.from_pretrained(m) for m in models}
    vocab = min(model.config.vocab_size for model in loaded.values())
    ids = torch.randint(5, vocab, (rows, tokens), generator=torch.Generator().manual_seed(0))

    def once(model: Any) -> float:
        began = time.perf_counter()
        model(input_ids=ids).logits.logsumexp(-1).mean().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - began

    for model in loaded.values():
        once(model)  # warm-up
    seconds: dict[str, list[float]] = {m: [] for m in models}
    for _ in range(rounds):
        for m, model in loaded.items():
            seconds[m].append(sorted(once(model) for _ in range(repeats))[repeats // 2])
    first = seconds[models[0]]
    return {"rows": rows, "tokens": tokens, "threads": threads, "models": {
        m: {"parameters": sum(p.numel() for p in loaded[m].parameters()), "seconds": s,
            "ratio_to_first": [x / f for x, f in zip(s, first, strict=True)]}
        for m, s in seconds.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=16)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--step", action="store_true",
                        help="also time a GRPO step (8 games x 8 samples) against its arithmetic")
    parser.add_argument("--epochs", type=int, default=2, help="the step's update epochs")
    parser.add_argument("--timed-steps", type=int, default=2)
    parser.add_argument("--layers", type=int,
                        help="the step's command model with this many decoder layers")
    parser.add_argument("--passes", nargs="+", metavar="MODEL",
                        help="only time these model folders' forward and backward passes")
    args = parser.parse_args()
    if args.passes:
        print(json.dumps(passes(args.passes, threads=args.threads), indent=2))
        return
    result: dict[str, Any] = {"rollout": measure(args.games, args.envs, threads=args.threads)}
    if args.step:
        result["grpo_step"] = grpo_step(threads=args.threads, updates_per_batch=args.epochs,
                                        timed_steps=args.timed_steps, layers=args.layers)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
