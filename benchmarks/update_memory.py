"""Peak memory of one GRPO update: whole-vocabulary logits against chunked log-probs.

Each ``--chunks`` value runs in its own process: a randomly initialised model of ``--shape``
(built in code, nothing downloaded), a batch of ``--rows`` rows of ``--prompt-tokens`` prompt
and ``--new-tokens`` completion tokens (random ids), a KL reference (a copy of the model), and
one :func:`~derl_bench.grpo.update.grpo_update` with AdamW, the whole batch in one micro-batch
(``--recompute``: decoder layers recomputed in the backward pass).
Reported per chunk size: the update's peak memory above what the process held before it (on a
CPU the resident set's high-water mark, reset just before the update; on a GPU
``torch.cuda.max_memory_allocated``, reset likewise) and the update's seconds. A chunk size at
least the batch's completion tokens is today's whole-vocabulary computation.

    python benchmarks/update_memory.py                                   # 0.5B-short, CPU
    python benchmarks/update_memory.py --shape qwen2.5-0.5b --device cuda --dtype bfloat16 \\
        --rows 64 --prompt-tokens 200 --new-tokens 256 --chunks 1000000 1024
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from derl_bench.policies.shapes import SHAPES


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(args: argparse.Namespace, chunk: int) -> dict:
    """One update of ``chunk``-position log-prob chunks in this process."""
    import copy

    import torch

    from derl_bench.grpo.update import UpdateSettings, grpo_update, make_optimizer
    from derl_bench.policies.shapes import build_shape_model
    from derl_bench.rollout import Episode, Step, collate

    torch.set_num_threads(args.threads)
    model = build_shape_model(SHAPES[args.shape], dtype=args.dtype).to(args.device)
    reference = copy.deepcopy(model).eval()
    generator = torch.Generator().manual_seed(0)
    vocab = SHAPES[args.shape].vocab_size
    episodes = []
    for row in range(args.rows):
        ids = torch.randint(0, vocab, (args.prompt_tokens + args.new_tokens,),
                            generator=generator).tolist()
        episodes.append(Episode(row // 8, row, [Step(ids[:args.prompt_tokens],
                                                     ids[args.prompt_tokens:], "", "", {})]))
    advantages = torch.randn(args.rows, generator=generator).tolist()
    batch = collate(episodes, advantages, 151643).to(args.device)
    optimizer = make_optimizer(model, 1e-5)
    settings = UpdateSettings(kl_coef=0.01, micro_batch_size=args.rows, logprob_chunk=chunk,
                              recompute_activations=args.recompute)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = _rss_kib("VmRSS") * 1024
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    started = time.perf_counter()
    stats = grpo_update(model, optimizer, batch, settings, reference)
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = _rss_kib("VmHWM") * 1024
    return {"chunk": chunk, "update_s": time.perf_counter() - started,
            "peak_above_start_mib": (peak - before) / 2**20, "peak_mib": peak / 2**20,
            "loss": stats["loss"], "completion_tokens": args.rows * args.new_tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b-short")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1_000_000, 256])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--recompute", action="store_true",
                        help="keep only each layer's input for the backward pass")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args, args.child)))
        return
    results = []
    for chunk in args.chunks:
        # A process per chunk size, so one's peak never hides in another's.
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", str(chunk)],
                              capture_output=True, text=True)
        if done.returncode == 0:
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        else:  # e.g. out of memory: that is the finding
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            results.append({"chunk": chunk, "error": tail})
    print(json.dumps({"shape": args.shape, "device": args.device, "dtype": args.dtype,
                      "recompute_activations": args.recompute,
                      "rows": args.rows, "prompt_tokens": args.prompt_tokens,
                      "new_tokens": args.new_tokens, "results": results}, indent=2))


if __name__ == "__main__":
    main()
