"""The GPU figures in one command: decode, greedy agreement, the update's memory, the whole GRPO
step, TRL, the population, each a row of ``benchmarks/gpu-baseline.json``.

    python benchmarks/gpu_suite.py                       # one GPU, Qwen2.5-0.5B's shape, bf16
    python benchmarks/gpu_suite.py --rehearse            # the same rows on a CPU, tiny shapes

Every row runs in its own process with its own time limit, so an out-of-memory error, a hang
or a crash costs that row only (its entry says what happened), and one row's peak memory never
hides in another's. The JSON is rewritten after every row: a suite stopped half way keeps what
it measured. Rows run in order of importance until ``--deadline`` seconds are spent; a row
that would not fit in what is left is recorded as skipped.

Nothing is installed or downloaded at run time: the model is built in code (``derl-bench
model init`` with random weights), and the packages the GPU machine lacks (gymnasium, trl,
datasets, math-verify) must already be importable. The rows:

- ``machine``: the card, torch and transformers versions, the measured bf16 matrix-product
  rate (8192^3) and copy bandwidth.
- ``decode``: milliseconds per decode step at 16 and 256 rows over the static cache (a CUDA
  graph) and over the default step, ``(t(N tokens) - t(1)) / (N - 1)``, no row ending early.
- ``decode_compiled``: the decode row with the static step compiled by ``torch.compile``
  (inductor) before its capture (``DERL_BENCH_COMPILE_DECODE=1``).
- ``hf_generate``: the peer: transformers' ``generate`` with a static cache and
  ``torch.compile(mode="reduce-overhead")``, the same rows and tokens.
- ``agreement``: greedy tokens of the static decode against the default step's, 16 and 256
  rows of 128 tokens, in float32 and bfloat16: the share of identical rows and, of the rows
  that differ, the share whose first difference came at a step where the top-2 logit gap was
  within bfloat16's rounding of the top logit.
- ``update``: one GRPO update of 64 rows x (200 prompt + 256 completion) tokens in one
  micro-batch with a KL reference: whole-vocabulary logits, 1024-position chunks, chunks +
  recomputed activations; peak memory and the update's share of the measured matmul rate.
- ``step``: the whole GRPO step (generation + update) at 256 rows x 256 new tokens.
- ``trl``: the compact trainer against TRL 1.16's ``GRPOTrainer`` at 16 rows x 128 tokens.
- ``population``: 8 inner runs as one population against one after another.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Row name -> the seconds it may take on a GPU (the order they run in is plan()'s).
GPU_LIMITS = {"machine": 40, "decode": 60, "agreement": 60, "update": 60, "step": 60,
              "trl": 90, "hf_generate": 150, "population": 240, "decode_compiled": 180}


def sizes(rehearse: bool) -> dict[str, Any]:
    """The shapes each row runs at: the issue's on a GPU, a few seconds' worth on a CPU."""
    if rehearse:
        return {"shape": "tiny", "device": "cpu", "dtype": "float32", "decode_rows": [2, 4],
                "decode_tokens": 8, "agree_rows": [2, 4], "agree_tokens": 8,
                "update_rows": 4, "update_prompt": 8, "update_new": 8,
                "update_chunks": [1_000_000, 4], "step_rows": 8, "step_tokens": 8,
                "trl_prompts": 1, "trl_group": 4, "trl_tokens": 8, "trl_steps": 2,
                "population": 2, "population_steps": 1, "population_validation": 4,
                "compile": False}
    return {"shape": "qwen2.5-0.5b", "device": "cuda", "dtype": "bfloat16",
            "decode_rows": [16, 256], "decode_tokens": 128, "agree_rows": [16, 256],
            "agree_tokens": 128, "update_rows": 64, "update_prompt": 200, "update_new": 256,
            "update_chunks": [1_000_000, 1024], "step_rows": 256, "step_tokens": 256,
            "trl_prompts": 2, "trl_group": 8, "trl_tokens": 128, "trl_steps": 5,
            "population": 8, "population_steps": 2, "population_validation": 32,
            "compile": True}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _prompt_ids(tokenizer: Any) -> list[int]:
    from grpo_throughput import PROMPT

    ids = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=True,
                                        add_generation_prompt=True)
    return list(getattr(ids, "input_ids", ids))


# ---------------------------------------------------------------------------------------------
# The rows. Each takes the model folder and the sizes, runs in its own process, returns a dict.


def row_machine(model: Path, s: dict) -> dict:
    import torch
    import transformers
    from grpo_throughput import copy_bandwidth, matmul_flops_per_s

    cuda = s["device"].startswith("cuda")
    return {"device": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "matmul_tflops_per_s": matmul_flops_per_s(s["device"], s["dtype"]) / 1e12,
            "copy_bandwidth_gb_per_s": copy_bandwidth(s["device"]) / 1e9}


def row_decode(model: Path, s: dict) -> dict:
    from grpo_throughput import copy_bandwidth, measure_decode

    bandwidth = copy_bandwidth(s["device"])
    args = argparse.Namespace(device=s["device"], dtype=s["dtype"],
                              max_new_tokens=s["decode_tokens"])
    return {"new_tokens": s["decode_tokens"],
            **{str(rows): measure_decode(model, args, rows, bandwidth)
               for rows in s["decode_rows"]}}


def row_decode_compiled(model: Path, s: dict) -> dict:
    """The decode row with the static step compiled by inductor before its capture."""
    from derl_bench.policies.decode import COMPILE_ENV

    os.environ[COMPILE_ENV] = "1"
    started = time.perf_counter()
    out = row_decode(model, s)
    out["with_compile_s"] = time.perf_counter() - started
    return out


def row_hf_generate(model: Path, s: dict) -> dict:
    """transformers' ``generate`` with a static cache (and ``torch.compile`` on a GPU)."""
    import torch

    from derl_bench.policies import load_model_and_tokenizer

    lm, tokenizer = load_model_and_tokenizer(str(model), s["device"], s["dtype"])
    # With a static cache on a CUDA device, generate compiles the forward itself
    # (CompileConfig's default: torch.compile, mode "reduce-overhead"); on a CPU it does not.
    lm.generation_config.disable_compile = not s["compile"]
    prompt = _prompt_ids(tokenizer)
    out: dict[str, Any] = {"compiled": s["compile"], "new_tokens": s["decode_tokens"]}
    for rows in s["decode_rows"]:
        ids = torch.tensor([prompt] * rows, device=s["device"])

        def seconds(tokens: int, ids: torch.Tensor = ids) -> float:
            _sync(s["device"])
            start = time.perf_counter()
            lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                        min_new_tokens=tokens, do_sample=False, cache_implementation="static",
                        pad_token_id=tokenizer.pad_token_id)
            _sync(s["device"])
            return time.perf_counter() - start

        started = time.perf_counter()
        seconds(s["decode_tokens"])  # compiles for this batch
        seconds(s["decode_tokens"])
        warm = time.perf_counter() - started
        step = (seconds(s["decode_tokens"]) - seconds(1)) / max(1, s["decode_tokens"] - 1)
        out[str(rows)] = {"decode_ms_per_step": step * 1e3, "warm_up_s": warm}
    out["compiled"] = getattr(lm, "_compiled_call", None) is not None
    return out


def _greedy(lm: Any, pad: int, prompts: list[list[int]], tokens: int,
            static: bool) -> tuple[list[list[int]], list[Any]]:
    """Greedy completions and, per step, each row's top-2 gap relative to its top logit."""
    import torch

    from derl_bench.policies.fast import FastSampler

    gaps: list[Any] = []

    def hook(logits: torch.Tensor, completions: Any, active: Any) -> torch.Tensor:
        top = logits.float().topk(2, dim=-1).values
        gaps.append(((top[:, 0] - top[:, 1]) / top[:, 0].abs().clamp_min(1e-6)).cpu())
        return logits

    sampler = FastSampler(lm, set(), pad)
    done = sampler.sample(prompts, tokens, temperature=0.0, logits_hook=hook, static=static)
    return done, gaps


def row_agreement(model: Path, s: dict) -> dict:
    import torch

    from derl_bench.policies import load_model_and_tokenizer

    bf16_rounding = 2.0 ** -8  # half a unit in the last place of bfloat16's 8-bit significand
    out: dict[str, Any] = {"new_tokens": s["agree_tokens"]}
    for dtype in ("float32", "bfloat16"):
        lm, tokenizer = load_model_and_tokenizer(str(model), s["device"], dtype)
        prompt = _prompt_ids(tokenizer)
        for rows in s["agree_rows"]:
            # Distinct prompts (a different last token per row), so the rows are not copies.
            vocab = lm.config.vocab_size
            prompts = [prompt + [(97 + 31 * r) % min(vocab, 4000)] for r in range(rows)]
            ref, gaps = _greedy(lm, tokenizer.pad_token_id, prompts, s["agree_tokens"], False)
            got, _ = _greedy(lm, tokenizer.pad_token_id, prompts, s["agree_tokens"], True)
            same = sum(a == b for a, b in zip(ref, got, strict=True))
            within = 0
            for r, (a, b) in enumerate(zip(ref, got, strict=True)):
                if a != b:
                    first = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
                    within += bool(gaps[first][r] <= 2 * bf16_rounding)
            out[f"{dtype}/{rows}"] = {
                "rows": rows, "identical_rows": same, "share_identical": same / rows,
                "differing_rows_within_bf16_rounding": within}
        del lm
        if s["device"].startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def _update_once(model: Path, s: dict, chunk: int, recompute: bool) -> dict:
    """One update (after a warm-up update) of the issue's micro-batch, as update_memory.py
    runs it, from the model folder."""
    import copy

    import torch
    from update_memory import _rss_kib

    from derl_bench.grpo.update import UpdateSettings, grpo_update, make_optimizer
    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.rollout import Episode, Step, collate

    lm, tokenizer = load_model_and_tokenizer(str(model), s["device"], s["dtype"])
    lm.train()
    reference = copy.deepcopy(lm).eval()
    generator = torch.Generator().manual_seed(0)
    rows, p, n = s["update_rows"], s["update_prompt"], s["update_new"]
    episodes = []
    for row in range(rows):
        ids = torch.randint(0, min(lm.config.vocab_size, len(tokenizer)), (p + n,),
                            generator=generator).tolist()
        episodes.append(Episode(row // 8, row, [Step(ids[:p], ids[p:], "", "", {})]))
    advantages = torch.randn(rows, generator=generator).tolist()
    batch = collate(episodes, advantages, tokenizer.pad_token_id).to(s["device"])
    optimizer = make_optimizer(lm, 1e-5)
    settings = UpdateSettings(kl_coef=0.01, micro_batch_size=rows, logprob_chunk=chunk,
                              recompute_activations=recompute)
    cuda = s["device"].startswith("cuda")
    grpo_update(lm, optimizer, batch, settings, reference)  # warm-up: kernels, AdamW's state
    _sync(s["device"])
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = _rss_kib("VmRSS") * 1024
        Path("/proc/self/clear_refs").write_text("5")
    started = time.perf_counter()
    stats = grpo_update(lm, optimizer, batch, settings, reference)
    _sync(s["device"])
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() if cuda else _rss_kib("VmHWM") * 1024
    params = sum(q.numel() for q in lm.parameters())
    tokens = rows * (p + n)
    # Forward + backward of the policy (6 per parameter per token) and the reference's forward
    # (2); recomputing the layers adds another forward (2); chunked log-probs redo the output
    # projection in the backward, left out (so the share is a lower bound).
    flops = (8 + (2 if recompute else 0)) * params * tokens
    return {"chunk": chunk, "recompute_activations": recompute, "update_s": seconds,
            "peak_gib": peak / 2**30, "peak_above_start_gib": (peak - before) / 2**30,
            "loss": stats["loss"], "tflops_per_s": flops / seconds / 1e12}


def row_update(model: Path, s: dict, chunk: int, recompute: bool) -> dict:
    from grpo_throughput import matmul_flops_per_s

    out = _update_once(model, s, chunk, recompute)
    rate = matmul_flops_per_s(s["device"], s["dtype"])
    out["share_of_matmul"] = out["tflops_per_s"] * 1e12 / rate
    out["shape"] = f"{s['update_rows']} x ({s['update_prompt']} + {s['update_new']})"
    return out


def _compact(model: Path, s: dict, group: int, prompts: int, tokens: int, steps: int,
             micro_batch: int | None = None) -> dict:
    from grpo_throughput import run_compact

    args = argparse.Namespace(device=s["device"], dtype=s["dtype"], group_size=group,
                              prompts=prompts, steps=steps, max_new_tokens=tokens,
                              micro_batch=micro_batch, logprob_chunk=1024)
    with tempfile.TemporaryDirectory() as tmp:
        return run_compact(model, args, Path(tmp))


def row_step(model: Path, s: dict) -> dict:
    rows = s["step_rows"]
    out = _compact(model, s, 8, rows // 8, s["step_tokens"], 3, micro_batch=min(rows, 64))
    return {"rows": rows, "new_tokens": s["step_tokens"], "micro_batch": min(rows, 64), **out}


def row_trl(model: Path, s: dict) -> dict:
    from grpo_throughput import run_trl

    ours = _compact(model, s, s["trl_group"], s["trl_prompts"], s["trl_tokens"], s["trl_steps"])
    args = argparse.Namespace(device=s["device"], dtype=s["dtype"], group_size=s["trl_group"],
                              prompts=s["trl_prompts"], steps=s["trl_steps"],
                              max_new_tokens=s["trl_tokens"])
    with tempfile.TemporaryDirectory() as tmp:
        theirs = run_trl(model, args, Path(tmp))
    return {"rows": s["trl_group"] * s["trl_prompts"], "new_tokens": s["trl_tokens"],
            "compact_tokens_per_s": ours["tokens_per_s"],
            "trl_tokens_per_s": theirs["tokens_per_s"],
            "ratio": ours["tokens_per_s"] / theirs["tokens_per_s"]}


def row_population(model: Path, s: dict) -> dict:
    from population_throughput import measure

    shape = s["shape"]
    return measure(steps=s["population_steps"], validation=s["population_validation"],
                   population=s["population"], workers=1, rounds=1, shape=shape,
                   device=s["device"], dtype=s["dtype"])


def plan(s: dict) -> list[tuple[str, str, dict]]:
    """(key, row function, keyword arguments) in the order they run."""
    updates = [(f"update/chunk={c}", "row_update", {"chunk": c, "recompute": False})
               for c in s["update_chunks"]]
    updates.append((f"update/chunk={s['update_chunks'][-1]}+recompute", "row_update",
                    {"chunk": s["update_chunks"][-1], "recompute": True}))
    return [("machine", "row_machine", {}), ("decode", "row_decode", {}),
            ("agreement", "row_agreement", {}), *updates, ("step", "row_step", {}),
            ("trl", "row_trl", {}), ("hf_generate", "row_hf_generate", {}),
            ("population", "row_population", {}), ("decode_compiled", "row_decode_compiled", {})]


def build_model(shape: str, folder: Path) -> Path:
    from grpo_throughput import build_model as build

    return build(shape, folder / "model")


def write(path: Path, result: dict) -> None:
    """Replace ``path`` whole (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rehearse", action="store_true",
                        help="every row on the CPU at tiny sizes (seconds): catches typos")
    parser.add_argument("--output", type=Path, default=HERE / "gpu-baseline.json")
    parser.add_argument("--deadline", type=float, default=480.0,
                        help="seconds the whole suite may take")
    parser.add_argument("--only", nargs="*", default=None, help="run only these row keys")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    s = sizes(args.rehearse)
    if args.child is not None:
        name, model, kwargs = json.loads(args.child)
        result = globals()[name](Path(model), s, **kwargs)
        print("RESULT " + json.dumps(result))
        return
    started = time.perf_counter()
    result: dict[str, Any] = {"suite": "benchmarks/gpu_suite.py", "rehearsal": args.rehearse,
                              "sizes": s, "rows": {}}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(s["shape"], Path(tmp))
        result["model_build_s"] = time.perf_counter() - started
        write(args.output, result)
        for key, name, kwargs in plan(s):
            if args.only is not None and not {key, key.split("/")[0]} & set(args.only):
                continue
            left = args.deadline - (time.perf_counter() - started)
            limit = min(GPU_LIMITS[key.split("/")[0]] * (3 if args.rehearse else 1), left)
            if limit < 10:
                result["rows"][key] = {"skipped": f"{left:.0f} s of the deadline left"}
                write(args.output, result)
                continue
            began = time.perf_counter()
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
            try:
                done = subprocess.run(
                    [sys.executable, __file__, *(["--rehearse"] if args.rehearse else []),
                     "--child", json.dumps([name, str(model), kwargs])],
                    capture_output=True, text=True, timeout=limit, env=env)
                lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
                if done.returncode == 0 and lines:
                    row = json.loads(lines[-1][len("RESULT "):])
                else:
                    tail = (done.stderr.strip().splitlines() or ["(no output)"])[-3:]
                    row = {"error": " | ".join(tail), "returncode": done.returncode}
            except subprocess.TimeoutExpired:
                row = {"error": f"did not finish within {limit:.0f} s"}
            row["wall_s"] = time.perf_counter() - began
            result["rows"][key] = row
            result["elapsed_s"] = time.perf_counter() - started
            write(args.output, result)
            print(f"{key}: {json.dumps(row)[:400]}", file=sys.stderr, flush=True)
    failed = [k for k, r in result["rows"].items() if "error" in r]
    print(json.dumps({"rows": len(result["rows"]), "failed": failed,
                      "elapsed_s": round(result["elapsed_s"], 1)}))
    if args.rehearse and failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
