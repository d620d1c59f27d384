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
    python benchmarks/grpo_throughput.py --sweep --no-trl    # rows 16, 64 and 256, per phase

Per phase (``phases`` in the JSON, one row of the printed table per batch): decode
milliseconds per step over the static cache and over the default step
(:mod:`derl_bench.policies.decode`), the share of the measured copy bandwidth a decode step
reaches (bytes of the weights and of the key/value cache columns it reads, over the rate of a
large tensor copy), the update's share of the measured matrix-multiply rate and of the H100's
dense bf16 peak (989 TFLOP/s), and peak GPU memory. The GPU-only figures read "n/a on CPU" on
a CPU.

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


H100_BF16_PEAK = 989e12
"""An H100 SXM's dense bf16 matrix rate, FLOP/s (NVIDIA's datasheet, without sparsity)."""
SWEEP_ROWS = (16, 64, 256)
NOT_ON_CPU = "n/a on CPU"


def run_compact(model_path: Path, args: argparse.Namespace, out: Path) -> dict:
    from derl_bench.grpo import TrainConfig, train

    config = TrainConfig(name="bench", env_id="toy", model=str(model_path), device=args.device,
                         dtype=args.dtype, group_size=args.group_size,
                         prompts_per_step=args.prompts, steps=args.steps, learning_rate=1e-5,
                         kl_coef=0.01, max_new_tokens=args.max_new_tokens, save_every=0,
                         tensorboard=False, progress=False, output_dir=str(out),
                         micro_batch_size=getattr(args, "micro_batch", None)
                         or args.group_size * args.prompts,
                         logprob_chunk=getattr(args, "logprob_chunk", 1024))
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
    update_flops_per_s = 6 * params * trained / max(upd - ref, 1e-9)
    peaks = [m["memory/device_peak_gib"] for m in history if "memory/device_peak_gib" in m]
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "phase_s": {"generation": gen, "reference": ref, "update": upd - ref},
            "gen_tokens_per_s": tokens / gen, "train_tokens_per_s": tokens / upd,
            "trained_tokens_per_s": trained / max(upd - ref, 1e-9),
            "flops_per_s": flops / seconds, "peak_matmul_flops_per_s": peak,
            "fraction_of_peak": flops / seconds / peak, "params": params,
            "update_flops_per_s": update_flops_per_s,
            "update_share_of_matmul": update_flops_per_s / peak,
            "update_share_of_h100_bf16": update_flops_per_s / H100_BF16_PEAK
            if args.device.startswith("cuda") else NOT_ON_CPU,
            "peak_gpu_gib": max(peaks) if peaks else NOT_ON_CPU}


def copy_bandwidth(device: str, rounds: int = 5) -> float:
    """Bytes per second a large tensor copy moves (each byte read once and written once):
    256 MiB on a CPU, 2 GiB on a GPU."""
    import torch

    size = (2 << 30 if device.startswith("cuda") else 256 << 20) // 4
    a = torch.empty(size, device=device)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(rounds):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        b.copy_(a)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size * 4 / best


def measure_decode(model_path: Path, args: argparse.Namespace, rows: int,
                   bandwidth: float) -> dict:
    """Decode milliseconds per step at ``rows`` rows over the static cache and over the
    default step, and the share of ``bandwidth`` each reaches: (time of ``max_new_tokens``
    tokens - time of 1) / (``max_new_tokens`` - 1), no row stopping early."""
    import torch

    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.policies.decode import length_bucket, row_bucket
    from derl_bench.policies.fast import FastSampler

    model, tokenizer = load_model_and_tokenizer(str(model_path), args.device, args.dtype)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                           tokenize=True, add_generation_prompt=True)
    prompt = list(getattr(prompt, "input_ids", prompt))
    sampler = FastSampler(model, set(), tokenizer.pad_token_id)  # no end token: every step runs
    new = args.max_new_tokens
    config = model.config
    width = 2 if args.dtype in ("bfloat16", "float16") else 4
    weight_bytes = sum(p.numel() for p in model.parameters()) * width
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    column_bytes = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * width

    def seconds(tokens: int, static: bool) -> float:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        sampler.sample([prompt] * rows, tokens, temperature=1.0, seed=0, static=static)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start

    out = {}
    for static in (True, False):
        seconds(new, static)  # warm-up (and the graph's capture)
        step = (seconds(new, static) - seconds(1, static)) / max(1, new - 1)
        if static:
            cache = row_bucket(rows) * length_bucket(len(prompt) + new) * column_bytes
        else:  # the default step reads the columns written so far: on average half the new
            cache = rows * (len(prompt) + new / 2) * column_bytes
        name = "static" if static else "default"
        out[f"decode_ms_per_step_{name}"] = step * 1e3
        out[f"decode_bandwidth_share_{name}"] = (weight_bytes + cache) / step / bandwidth
    return out


def phase_row(rows: int, ours: dict, decode: dict) -> dict:
    """The per-phase figures of one batch (see the module docstring)."""
    return {"rows": rows, **decode,
            "generation_tokens_per_s": ours["gen_tokens_per_s"],
            "update_trained_tokens_per_s": ours["trained_tokens_per_s"],
            "whole_step_tokens_per_s": ours["tokens_per_s"],
            "update_share_of_matmul": ours["update_share_of_matmul"],
            "update_share_of_h100_bf16": ours["update_share_of_h100_bf16"],
            "peak_gpu_gib": ours["peak_gpu_gib"]}


def print_phases(phases: list[dict]) -> None:
    """The per-phase table, one row per batch, on stderr (stdout holds the JSON)."""
    def cell(value: object, fmt: str) -> str:
        return format(value, fmt) if isinstance(value, float) else str(value)

    head = ("rows", "decode ms static", "decode ms default", "bandwidth static",
            "whole step tok/s", "update tok/s", "update/matmul", "update/H100 bf16",
            "peak GPU GiB")
    print(" | ".join(head), file=sys.stderr)
    for p in phases:
        print(" | ".join([
            str(p["rows"]), cell(p["decode_ms_per_step_static"], ".2f"),
            cell(p["decode_ms_per_step_default"], ".2f"),
            cell(p["decode_bandwidth_share_static"], ".1%"),
            cell(p["whole_step_tokens_per_s"], ",.0f"),
            cell(p["update_trained_tokens_per_s"], ",.0f"),
            cell(p["update_share_of_matmul"], ".1%"), cell(p["update_share_of_h100_bf16"], ".1%"),
            cell(p["peak_gpu_gib"], ".1f")]), file=sys.stderr)


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
    parser.add_argument("--micro-batch", type=int, default=None,
                        help="rows per forward/backward (default: the whole batch)")
    parser.add_argument("--logprob-chunk", type=int, default=1024,
                        help="completion tokens whose logits the update holds at once "
                             "(1000000: the whole micro-batch's)")
    parser.add_argument("--sweep", action="store_true",
                        help=f"rows {', '.join(map(str, SWEEP_ROWS))} (prompts = rows / "
                             "group size), per phase; TRL runs at the first only")
    args = parser.parse_args()
    if args.sweep and any(rows % args.group_size for rows in SWEEP_ROWS):
        parser.error(f"--sweep needs a group size dividing {SWEEP_ROWS}")
    busy = None
    if args.contend:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    batches = ([rows // args.group_size for rows in SWEEP_ROWS] if args.sweep
               else [args.prompts])
    runs, phases = [], []
    theirs = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            model_path = build_model(args.shape, Path(tmp) / "model")
            bandwidth = copy_bandwidth(args.device)
            for i, prompts in enumerate(batches):
                args.prompts = prompts
                rows = prompts * args.group_size
                if args.device.startswith("cuda"):
                    import torch

                    torch.cuda.reset_peak_memory_stats()
                ours = run_compact(model_path, args, Path(tmp) / f"compact-{rows}")
                runs.append(ours)
                phases.append(phase_row(rows, ours, measure_decode(model_path, args, rows,
                                                                   bandwidth)))
                if i == 0 and not args.no_trl:
                    theirs = run_trl(model_path, args, Path(tmp) / "trl")
    finally:
        if busy is not None:
            busy.kill()
    ours = runs[0]
    result = {"shape": args.shape, "device": args.device, "dtype": args.dtype,
              "steps": args.steps, "batch": batches[0] * args.group_size,
              "max_new_tokens": args.max_new_tokens, "contended": args.contend,
              "copy_bandwidth_bytes_per_s": bandwidth, "compact": ours, "trl": theirs,
              "ratio_tokens_per_s": ours["tokens_per_s"] / theirs["tokens_per_s"]
              if theirs else None, "phases": phases}
    print_phases(phases)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
