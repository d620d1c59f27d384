"""The rehearsal: the training, meta and evaluation commands at a real shape
(``derl-bench model rehearse`` runs it).

A run at the size a GPU user trains (Qwen2.5-0.5B's width, heads and 151936-token vocabulary)
finds the shape bugs, dtype bugs and memory surprises the tiny model cannot, on any machine.
For every combination of LoRA (off/on), forward path (``lean``: :mod:`derl_bench.policies.fast`;
``transformers``: ``generate`` and the module forward, ``DERL_BENCH_LEAN=0``) and dtype
(``float32``, ``bfloat16``) it runs, each as its own process:

- ``derl-bench train`` for 2 GRPO steps on derl/GSM8K-v0 and on derl/ALFWorld-v0 (the
  baseline recipes' batch and lengths);
- ``derl-bench meta`` for 1 generation of 2 candidates with 1 inner step each (constant
  proposals trained too) and the best policy evaluated on 4 episodes a level;
- ``derl-bench evaluate`` of the trained GSM8K checkpoint on 4 episodes (``evaluate`` loads
  ``llm:`` policies in float32, so it runs once per LoRA setting and path);

and records wall seconds, seconds per training step, the process's peak RSS, the key/value
cache the sampler allocates at the recipe's batch and length, and whether the two paths agree
on greedy outputs. ``--device cuda`` runs every model on the GPU. The report is
``OUTPUT/rehearsal.json`` plus a table on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_BASELINES = Path(__file__).resolve().parents[2] / "baselines"
REHEARSAL_LORA = {"r": 16, "alpha": 32, "dropout": 0.0}
PATHS = ("lean", "transformers")
DTYPES = ("float32", "bfloat16")


@dataclass
class CommandResult:
    """One command of the rehearsal."""

    name: str
    lora: bool
    path: str
    dtype: str
    ok: bool
    wall_s: float
    peak_rss_mb: float
    s_per_step: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def run_measured(argv: list[str], env: dict[str, str], log: Path) -> tuple[int, float, float]:
    """Run ``argv`` as a child process; return its exit code, wall seconds and peak RSS (MiB,
    the child and the processes it waited for)."""
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    # Linux reports ru_maxrss in KiB.
    return proc.returncode, time.perf_counter() - started, usage.ru_maxrss / 1024


def kv_cache_bytes(config: dict[str, Any], rows: int, length: int, dtype: str) -> int:
    """Bytes of the key/value cache :class:`~derl_bench.policies.fast.FastSampler` allocates
    for ``rows`` sequences of ``length`` positions (prompt plus new tokens)."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    width = 4 if dtype == "float32" else 2
    return (2 * config["num_hidden_layers"] * rows * config["num_key_value_heads"] * length
            * head_dim * width)


def logits_bytes(config: dict[str, Any], tokens: int, dtype: str) -> int:
    """Bytes of one forward's output logits over ``tokens`` positions, plus their float32 copy
    for the log-softmax (the largest activation of a 151936-token vocabulary)."""
    width = 4 if dtype == "float32" else 2
    return tokens * config["vocab_size"] * (width + (0 if width == 4 else 4))


def greedy_agreement(model_path: str, dtype: str, prompts: int = 4,
                     max_new_tokens: int = 32, device: str = "cpu") -> dict[str, Any]:
    """Greedy completions of the first GSM8K training problems on the lean sampler and on
    transformers' ``generate``: how many rows are identical, and the first differing step."""
    import gymnasium as gym
    import torch

    from derl_bench.policies import LLMPolicy, SamplingConfig, load_model_and_tokenizer
    from derl_bench.policies.backends import TransformersBackend
    from derl_bench.policies.decoder import LEAN_ENV

    model, tokenizer = load_model_and_tokenizer(model_path, device, dtype)
    model.eval()
    policy = LLMPolicy(model, tokenizer, "derl/GSM8K-v0")
    env = gym.make("derl/GSM8K-v0", split="train")
    ids = []
    for seed in range(prompts):
        obs, _ = env.reset(seed=seed)
        ids.append(policy.math_prompt(obs if isinstance(obs, str) else str(obs)))
    env.close()
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0)
    backend = TransformersBackend(model, tokenizer)
    before = os.environ.get(LEAN_ENV)
    try:
        with torch.no_grad():
            os.environ[LEAN_ENV] = "1"
            lean_rows = backend.generate(ids, sampling)
            os.environ[LEAN_ENV] = "0"
            hf_rows = backend.generate(ids, sampling)
    finally:
        if before is None:
            os.environ.pop(LEAN_ENV, None)
        else:
            os.environ[LEAN_ENV] = before
    first_diff = [next((i for i, (a, b) in enumerate(zip(x, y, strict=False)) if a != b),
                       None if len(x) == len(y) else min(len(x), len(y)))
                  for x, y in zip(lean_rows, hf_rows, strict=True)]
    return {"rows": len(ids), "identical": sum(d is None for d in first_diff),
            "first_difference": first_diff,
            "prompt_tokens": [len(p) for p in ids]}


def rehearse(shape: str, output: Path, loras: tuple[bool, ...] = (False, True),
             paths: tuple[str, ...] = PATHS, dtypes: tuple[str, ...] = DTYPES,
             meta: bool = True, agents: bool = True, device: str = "cpu") -> list[CommandResult]:
    """Run the rehearsal (see the module docstring) under ``output`` with every model on
    ``device``; returns every command's result and writes ``output/rehearsal.json``."""
    from derl_bench.policies.shapes import init_shape_model

    output.mkdir(parents=True, exist_ok=True)
    model_path = output / "model"
    if not (model_path / "config.json").exists():
        init_shape_model(model_path, shape, overwrite=True)
    config = json.loads((model_path / "config.json").read_text())
    results: list[CommandResult] = []
    agreement: dict[str, Any] = {}
    report_path = output / "rehearsal.json"

    def write_report() -> None:
        report_path.write_text(json.dumps({
            "shape": shape, "device": device, "model": str(model_path), "config": config,
            "results": [asdict(r) for r in results], "greedy_agreement": agreement,
        }, indent=2))

    for dtype in dtypes:
        agreement[dtype] = greedy_agreement(str(model_path), dtype, device=device)
        write_report()
    prompt_len = max(max(a["prompt_tokens"]) for a in agreement.values())
    base_cmd = [sys.executable, "-m", "derl_bench"]
    for lora in loras:
        for path in paths:
            env = {**os.environ, "DERL_BENCH_LEAN": "1" if path == "lean" else "0"}
            for dtype in dtypes:
                tag = f"{'lora' if lora else 'full'}-{path}-{dtype}"
                common = [f"model={model_path}", f"dtype={dtype}", f"device={device}",
                          "steps=2", "progress=false", "tensorboard=false",
                          f"lora={json.dumps(REHEARSAL_LORA) if lora else 'null'}"]
                # A random model never solves a problem; a length term makes the GSM8K
                # rewards differ within a group so the update really changes the weights.
                recipes = [("train-gsm8k", "gsm8k-outcome.yaml",
                            ["meta_reward=outcome - 0.001 * response_length"])]
                if agents:
                    recipes.append(("train-alfworld", "alfworld-outcome.yaml", []))
                for name, recipe, extra in recipes:
                    run_dir = output / tag / name
                    code, wall, rss = run_measured(
                        # The rehearsal's folders are its own: a second rehearsal replaces them.
                        [*base_cmd, "train", str(REPO_BASELINES / recipe), "--output",
                         str(run_dir), "--overwrite", *common, *extra], env,
                        output / f"{tag}-{name}.log")
                    result = CommandResult(name, lora, path, dtype, code == 0, wall, rss)
                    metrics = [json.loads(line) for line in
                               (run_dir / "metrics.jsonl").read_text().splitlines()
                               ] if (run_dir / "metrics.jsonl").exists() else []
                    if metrics:
                        result.s_per_step = sum(m["time/rollout_s"] + m["time/update_s"]
                                                for m in metrics) / len(metrics)
                        result.detail = {
                            "rollout_s": [round(m["time/rollout_s"], 2) for m in metrics],
                            "update_s": [round(m["time/update_s"], 2) for m in metrics],
                            "tokens_generated": [m["tokens/generated"] for m in metrics],
                            "loss": [m["loss"] for m in metrics],
                            "kl": [m["kl"] for m in metrics]}
                        if "memory/device_peak_gib" in metrics[-1]:
                            result.detail["device_peak_gib"] = round(
                                metrics[-1]["memory/device_peak_gib"], 2)
                    recipe_values = _recipe(recipe)
                    rows = recipe_values["group_size"] * recipe_values["prompts_per_step"]
                    result.detail["rows"] = rows
                    result.detail["logits_mb"] = logits_bytes(
                        config, rows * recipe_values["max_new_tokens"], dtype) / 2**20
                    if name == "train-gsm8k":
                        # One sampling call holds every row at the longest prompt (the
                        # agents' prompts grow turn by turn, so no single figure fits them).
                        result.detail["kv_cache_mb"] = kv_cache_bytes(
                            config, rows, prompt_len + recipe_values["max_new_tokens"],
                            dtype) / 2**20
                    if code != 0:
                        result.error = _tail(output / f"{tag}-{name}.log")
                    results.append(result)
                    write_report()
                if meta:
                    inner = [f"inner.model={model_path}", f"inner.dtype={dtype}",
                             f"inner.device={device}",
                             f"inner.lora={json.dumps(REHEARSAL_LORA) if lora else 'null'}"]
                    code, wall, rss = run_measured(
                        [*base_cmd, "meta", str(REPO_BASELINES / "meta-derl-gsm8k.yaml"),
                         "outer_steps=1", "population=2", "validation_episodes=2",
                         "optimizer.sft_examples=16", "optimizer.sft_steps=2", "progress=false",
                         # A barely cold-started Meta-Optimizer often writes a constant reward:
                         # train it anyway, so every rehearsal runs its inner runs; and keep the
                         # closing evaluation of the best policy short.
                         "constant_rewards=train", "eval_limit=4",
                         *inner, "--output", str(output / tag / "meta"), "--overwrite",
                         "--executor", "local"],
                        env, output / f"{tag}-meta.log")
                    result = CommandResult("meta", lora, path, dtype, code == 0, wall, rss)
                    candidates = output / tag / "meta" / "candidates.jsonl"
                    if candidates.exists():
                        lines = [json.loads(x) for x in candidates.read_text().splitlines()]
                        result.detail = {"candidates": len(lines), "status": [
                            c["status"] for c in lines], "errors": [
                            c.get("error") for c in lines if c.get("error")]}
                        result.ok = result.ok and all(c["status"] != "failed" for c in lines)
                    if code != 0:
                        result.error = _tail(output / f"{tag}-meta.log")
                    results.append(result)
                    write_report()
            prefix = f"{'lora' if lora else 'full'}-{path}"
            checkpoint = output / f"{prefix}-{dtypes[0]}" / "train-gsm8k" / "checkpoints" / \
                "step-2"
            log = output / f"{prefix}-evaluate.log"
            code, wall, rss = run_measured(
                [*base_cmd, "evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy",
                 f"llm:{checkpoint}", "--limit", "4", "--max-new-tokens", "32",
                 "--no-progress", "--device", device,
                 "--output", str(output / f"{prefix}-evaluate.json")],
                env, log)
            result = CommandResult("evaluate", lora, path, "float32", code == 0, wall, rss)
            if code != 0:
                result.error = _tail(log)
            results.append(result)
            write_report()
    return results


def _recipe(name: str) -> dict[str, Any]:
    from derl_bench.grpo.config import read_recipe

    return read_recipe(REPO_BASELINES / name)


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def format_table(results: list[CommandResult]) -> str:
    """The results as a markdown table."""
    rows = [("| command | lora | path | dtype | ok | wall s | s/step | peak RSS MiB "
             "| KV cache MiB |"),
            "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        kv = r.detail.get("kv_cache_mb")
        rows.append(f"| {r.name} | {'on' if r.lora else 'off'} | {r.path} | {r.dtype} | "
                    f"{'yes' if r.ok else 'NO'} | {r.wall_s:.1f} | "
                    f"{'' if r.s_per_step is None else f'{r.s_per_step:.1f}'} | "
                    f"{r.peak_rss_mb:.0f} | {'' if kv is None else f'{kv:.1f}'} |")
    return "\n".join(rows)


__all__ = ["CommandResult", "format_table", "greedy_agreement", "kv_cache_bytes",
           "logits_bytes", "rehearse", "run_measured"]
