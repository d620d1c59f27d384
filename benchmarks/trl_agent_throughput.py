"""Agent GRPO throughput: the compact trainer vs. TRL's multi-turn trainer on ALFWorld, same run.

Both train the tiny model (same shape and seed) on ``derl/ALFWorld-v0`` L0 with the same
Meta-Reward, groups, games (reset seeds) and step cap, each in its own protocol:

- compact: every step is its own generation (``<think>...</think><action>...</action>``) from
  a freshly built prompt, the model warm-started on walkthrough steps in that format;
- TRL: the episode is one chat of ``act`` tool calls (``derl_bench.grpo.trl``), the
  model warm-started on walkthrough steps rendered as tool calls.

Reported per trainer: episodes per minute and env steps per minute over the whole ``train``
call (model loading, env start-up and every step), and the mean steps per episode (the models
end episodes differently: a TRL episode also ends at a reply without a tool call).

    python benchmarks/trl_agent_throughput.py                # needs DERL_BENCH_DATA (ALFWorld)
    python benchmarks/trl_agent_throughput.py --steps 6 --group-size 8
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ENV = "derl/ALFWorld-v0"
REWARD = "success + mean(action_admissible) - 0.1 * step_fraction"


def warm_start(path: Path, tool_calls: bool, sft_steps: int) -> Path:
    """The tiny model fine-tuned on ALFWorld walkthrough steps in one trainer's format."""
    from derl_bench.grpo.trl import init_tool_model, tool_call_demos
    from derl_bench.policies import init_tiny_model
    from derl_bench.sft import SFTConfig, run_sft

    init = init_tool_model(path / "init") if tool_calls else init_tiny_model(path / "init")
    run_sft(SFTConfig(env_id=ENV, output=str(path / "sft"), model=str(init), level="L0",
                      steps=sft_steps, batch_size=8, learning_rate=3e-3, num_threads=1),
            demos=tool_call_demos if tool_calls else None)
    return path / "sft"


def config(model: Path, out: Path, args: argparse.Namespace, trainer: str):
    from derl_bench.grpo import TrainConfig

    return TrainConfig(name=f"bench-{trainer}", env_id=ENV, level="L0", trainer=trainer,
                       model=str(model), meta_reward=REWARD, group_size=args.group_size,
                       prompts_per_step=args.prompts, steps=args.steps,
                       max_episode_steps=args.max_episode_steps,
                       max_new_tokens=args.max_new_tokens, learning_rate=1e-5, save_every=0,
                       tensorboard=False, progress=False, output_dir=str(out))


def run_compact(model: Path, out: Path, args: argparse.Namespace) -> dict:
    from derl_bench.grpo import train

    cfg = config(model, out, args, "compact")
    start = time.perf_counter()
    history = train(cfg)
    seconds = time.perf_counter() - start
    episodes = args.steps * args.prompts * args.group_size
    steps = sum(m["length/episode_mean"] for m in history) * args.prompts * args.group_size
    return summary(seconds, episodes, steps)


def run_trl(model: Path, out: Path, args: argparse.Namespace) -> dict:
    from derl_bench.family import resolve_family
    from derl_bench.grpo.config import compile_run_reward
    from derl_bench.grpo.trl import agent_trainer, meta_reward_funcs

    cfg = config(model, out, args, "trl")
    family = resolve_family(cfg.env_id)
    reward, success = meta_reward_funcs(cfg, compile_run_reward(cfg, family), family)
    lengths: list[int] = []

    def meta_reward(environments, **kwargs):  # the adapter's reward, counting env steps
        lengths.extend(len(e.primitive_steps) for e in environments)
        return reward(environments, **kwargs)

    start = time.perf_counter()
    agent_trainer(cfg, [meta_reward, success], family).train()
    seconds = time.perf_counter() - start
    return summary(seconds, len(lengths), sum(lengths))


def summary(seconds: float, episodes: int, steps: float) -> dict:
    return {"seconds": round(seconds, 2), "episodes": episodes,
            "episodes_per_min": round(60 * episodes / seconds, 2),
            "env_steps_per_min": round(60 * steps / seconds, 2),
            "steps_per_episode": round(steps / episodes, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--max-episode-steps", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--sft-steps", type=int, default=150)
    args = parser.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        compact_model = warm_start(root / "compact-model", False, args.sft_steps)
        trl_model = warm_start(root / "trl-model", True, args.sft_steps)
        compact = run_compact(compact_model, root / "compact", args)
        trl = run_trl(trl_model, root / "trl", args)
    print(json.dumps({"env": ENV, "level": "L0", **{k: v for k, v in vars(args).items()},
                      "compact": compact, "trl": trl,
                      "ratio_episodes_per_min": round(compact["episodes_per_min"]
                                                      / trl["episodes_per_min"], 3)}, indent=2))


if __name__ == "__main__":
    main()
