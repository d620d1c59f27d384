"""GRPO throughput: the compact trainer vs. TRL's GRPOTrainer, same model and batch, same run.

Both train on a single-step toy env (a fixed prompt; the reward is the rate of one character in
the response) for ``--steps`` steps, so no data is needed. Reported per trainer: generated
tokens per second over the whole step (generation + update) and seconds per step, and the
ratio compact / TRL; for the compact trainer also the time per phase (generation, reference
log-probs, update) and the fraction of the machine's matrix-multiply rate it reaches
(estimated FLOPs: 2 per parameter per token for a forward pass, 6 for forward + backward).

    python benchmarks/grpo_throughput.py                      # tiny model on CPU
    python benchmarks/grpo_throughput.py --contend            # with another process busy on a core
    python benchmarks/grpo_throughput.py --shape qwen2.5-0.5b --device cuda --max-new-tokens 256

``--shape qwen2.5-0.5b`` builds a randomly initialised model of Qwen2.5-0.5B's shape (24 layers,
hidden 896, vocabulary 151,936) and its tokenizer in code (``derl-bench model init``);
nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from derl_bench.policies.shapes import SHAPES

PROMPT = "Write anything you like."


class ToyEnv(gym.Env):
    max_steps = 1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return PROMPT, {}

    def step(self, action):
        return "", 0.0, True, False, {
            "primitives": {"outcome": action.count("a") / max(1, len(action))}
        }


def build_model(shape: str, path: Path) -> Path:
    """The tiny model, or a randomly initialised model of a real shape
    (:data:`derl_bench.policies.shapes.SHAPES`, with the tokenizer built in code)."""
    from derl_bench.policies.shapes import init_shape_model
    from derl_bench.policies.tiny import init_tiny_model

    if shape == "tiny":
        return init_tiny_model(path)
    return init_shape_model(path, shape)


def run_compact(model_path: Path, args: argparse.Namespace, out: Path) -> dict:
    from derl_bench.grpo import TrainConfig, train

    config = TrainConfig(name="bench", env_id="toy", model=str(model_path), device=args.device,
                         dtype=args.dtype, group_size=args.group_size,
                         prompts_per_step=args.prompts, steps=args.steps, learning_rate=1e-5,
                         kl_coef=0.01, max_new_tokens=args.max_new_tokens, save_every=0,
                         tensorboard=False, progress=False, output_dir=str(out),
                         micro_batch_size=args.group_size * args.prompts)
    reward = lambda eps: np.array([e.steps[-1].primitives["outcome"] for e in eps])  # noqa: E731
    history = train(config, env_factory=ToyEnv, reward_fn=reward, family="math")
    history = history[1:] if len(history) > 2 else history  # the first step warms caches up
    tokens = sum(m["tokens/generated"] for m in history)
    trained = sum(m["tokens/trained"] for m in history)
    gen = sum(m["time/rollout_s"] for m in history)
    upd = sum(m["time/update_s"] for m in history)
    ref = sum(m["time/reference_s"] for m in history)
    seconds = gen + upd  # the steps themselves, like TRL's train() below (no model loading)
    params = count_params(model_path)
    # Generation: a forward pass per generated token (the prompt prefill is left out, so
    # the estimate is low); update: forward + backward over every trained token, and one
    # more forward for the reference model when there is a KL term.
    flops = 2 * params * tokens + 6 * params * trained + (2 * params * trained if ref else 0)
    peak = matmul_flops_per_s(args.device, args.dtype)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "phase_s": {"generation": gen, "reference": ref, "update": upd - ref},
            "gen_tokens_per_s": tokens / gen, "train_tokens_per_s": tokens / upd,
            "flops_per_s": flops / seconds, "peak_matmul_flops_per_s": peak,
            "fraction_of_peak": flops / seconds / peak, "params": params}


def count_params(model_path: Path) -> int:
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_path).parameters())


def matmul_flops_per_s(device: str, dtype: str | None = None, rounds: int = 5) -> float:
    """The machine's rate on a large matrix product in ``dtype`` (default float32), with the
    threads torch uses: 1024^3 on a CPU, 8192^3 on a GPU (a small product leaves most of a
    GPU idle, so it would understate the peak)."""
    import torch

    size = 8192 if device.startswith("cuda") else 1024
    kind = getattr(torch, dtype or "float32")
    a = torch.randn(size, size, device=device, dtype=kind)
    b = torch.randn(size, size, device=device, dtype=kind)
    best = float("inf")
    for _ in range(rounds):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def run_trl(model_path: Path, args: argparse.Namespace, out: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    def rate(prompts, completions, **_):
        return [c.count("a") / max(1, len(c)) for c in completions]

    # TRL as its users run it: torch's default thread count (the compact trainer chose its own).
    torch.set_num_threads(os.cpu_count() or 1)
    batch = args.group_size * args.prompts
    config = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=batch, num_generations=args.group_size,
        max_completion_length=args.max_new_tokens, learning_rate=1e-5, beta=0.01,
        loss_type="dapo", max_steps=args.steps, logging_steps=1, save_strategy="no",
        report_to=[], use_cpu=args.device == "cpu", bf16=args.dtype == "bfloat16",
        disable_tqdm=True, model_init_kwargs={"dtype": getattr(torch, args.dtype or "float32")},
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    data = Dataset.from_list([{"prompt": PROMPT}] * (args.prompts * args.steps))
    trainer = GRPOTrainer(model=str(model_path), reward_funcs=rate, args=config,
                          train_dataset=data, processing_class=tokenizer)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    logs = [e for e in trainer.state.log_history if "completions/mean_length" in e]
    tokens = sum(e["completions/mean_length"] * batch for e in logs)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["tiny", *sorted(SHAPES)], default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="e.g. bfloat16 on GPU")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--contend", action="store_true",
                        help="keep one core busy with another process while measuring")
    parser.add_argument("--no-trl", action="store_true", help="measure the compact trainer only")
    args = parser.parse_args()
    busy = None
    if args.contend:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            model_path = build_model(args.shape, Path(tmp) / "model")
            ours = run_compact(model_path, args, Path(tmp) / "compact")
            theirs = None if args.no_trl else run_trl(model_path, args, Path(tmp) / "trl")
    finally:
        if busy is not None:
            busy.kill()
    result = {"shape": args.shape, "device": args.device, "steps": args.steps,
              "batch": args.group_size * args.prompts, "max_new_tokens": args.max_new_tokens,
              "contended": args.contend, "compact": ours, "trl": theirs,
              "ratio_tokens_per_s": ours["tokens_per_s"] / theirs["tokens_per_s"]
              if theirs else None}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
