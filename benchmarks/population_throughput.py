"""Inner runs per minute: a generation's runs as one population vs one by one, same run.

At the proxy benchmark's inner settings (``derl_bench.experiments.proxy.ProxyConfig``: 20 GRPO
steps of 8 problems x 8 samples, up to 40 new tokens, learning rate 3e-4, no KL; 200 greedy
validation problems), a generation of ``--population`` rewards is trained and scored twice on
``derl/Arithmetic-v0``, from the same base model:

- separately: each reward's own run (``train_and_score``, what ``batch_inner: false`` runs);
- together: one population (``train_and_score_population``, ``batch_inner: auto``).

Each way runs in ``--workers`` processes at once (one intra-op thread each; default 2, one per
core of this project's machine), every process training and scoring its own generation, after
a warm-up in every process; the two ways alternate over ``--rounds`` rounds and the best of
each counts. Reported: inner runs per minute each way, their ratio (seconds per
inner run together / separately: lower is better), and the fraction of the machine's matrix
product rate (a 1024^3 float32 product, measured in the same run on one thread) each way
reaches, from the FLOPs of the work as separate runs do it (2 per parameter per generated or
validated token, 6 per trained token, 2 more per trained token for the old log-probs when
``updates_per_batch`` > 1; a population, which runs each group's prompt once in the update,
does fewer, so its figure is the rate of equivalent work)::

    python benchmarks/population_throughput.py                      # the proxy's settings
    python benchmarks/population_throughput.py --steps 4 --validation 40 --base-steps 0
    python benchmarks/population_throughput.py --shape qwen2.5-0.5b --device cuda \
        --dtype bfloat16 --population 8 --workers 1 --rounds 1    # 8 policies on one GPU

The base model is the tiny model (``--base-steps 0``: random weights, so every sample runs the
full 40 tokens) or the tiny model fine-tuned for ``--base-steps`` SFT steps on the env's
reference solutions, as the proxy's base policy is.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

REWARDS = ["outcome + format_boxed", "outcome", "0.5 * format_boxed + digit_match",
           "answer_closeness", "outcome + 0.1 * cot_steps", "(g1 + g2 + g3 + g4) / 4",
           "loose_outcome", "digit_match"]


def meta_config(out: Path, model: str, steps: int, validation: int, population: int,
                device: str = "cpu", dtype: str | None = None) -> Any:
    from derl_bench.experiments.proxy import ProxyConfig
    from derl_bench.meta import MetaConfig

    inner = {**ProxyConfig().inner, "model": model, "steps": steps, "device": device,
             "dtype": dtype}
    return MetaConfig(name="bench", method="random", population=population,
                      validation_episodes=validation, inner=inner, output_dir=str(out),
                      progress=False, executor="local")


def generation(config: Any, root: str, together: bool) -> dict[str, Any]:
    """Train and score ``config.population`` rewards in this process; seconds and FLOPs."""
    from derl_bench.grpo.trainer import update_settings
    from derl_bench.meta.inner import (
        InnerSpec,
        compile_inner_reward,
        train_and_score,
        train_and_score_population,
    )

    specs = [InnerSpec(compile_inner_reward(config, REWARDS[i % len(REWARDS)]),
                       Path(root) / f"c{i}") for i in range(config.population)]
    cuda = config.inner.device.startswith("cuda")
    if cuda:
        import torch

        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    if together:
        results = train_and_score_population(config, specs)
    else:
        results = [train_and_score(config, s.reward, s.run_dir, None) for s in specs]
    seconds = time.perf_counter() - started
    generated = trained = 0.0
    for spec in specs:
        for line in (spec.run_dir / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line)
            generated += row["tokens/generated"]
            trained += row["tokens/trained"]
    # A real model's checkpoints fill a disk within a few generations.
    shutil.rmtree(root, ignore_errors=True)
    passes = 6 + (2 if update_settings(config.inner).updates_per_batch > 1 else 0)
    validated = config.population * config.validation_episodes * config.inner.max_new_tokens
    return {"seconds": seconds, "runs": len(results), "scores": [r.score for r in results],
            "token_passes": 2 * (generated + validated) + passes * trained,
            "device_peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}


def _warm(config: Any, root: str) -> None:
    from derl_bench.grpo.config import replace as replace_config

    small = type(config)(**{**config.to_dict(), "validation_episodes": 4,
                            "inner": replace_config(config.inner, steps=1)})
    generation(small, f"{root}/warm-alone", together=False)
    generation(small, f"{root}/warm-together", together=True)


def measure(steps: int = 20, validation: int = 200, population: int = 4, workers: int = 2,
            base_steps: int = 0, rounds: int = 2, shape: str = "tiny", device: str = "cpu",
            dtype: str | None = None) -> dict[str, Any]:
    """Inner runs per minute each way (see the module docstring): the best of ``rounds``
    rounds, the two ways alternating within a round so a change in the machine's load hits
    both."""
    from grpo_throughput import count_params, matmul_flops_per_s

    from derl_bench.policies.threads import configure_threads

    configure_threads(num_threads=1)
    peak = matmul_flops_per_s(device, dtype)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        model = base_model(Path(tmp) / "base", base_steps, shape)
        params = count_params(model)
        config = meta_config(Path(tmp) / "meta", str(model), steps, validation, population,
                             device, dtype)
        figures: dict[str, Any] = {}
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            list(pool.map(_warm, [config] * workers, [f"{tmp}/w{i}" for i in range(workers)]))
            ways = [("separate", False), ("together", True)]
            for round_ in range(rounds):
                for name, together in ways if round_ % 2 == 0 else ways[::-1]:
                    began = time.perf_counter()
                    parts = list(pool.map(generation, [config] * workers,
                                          [f"{tmp}/{name}{round_}-{i}" for i in range(workers)],
                                          [together] * workers))
                    wall = time.perf_counter() - began
                    if name in figures and figures[name]["wall_s"] <= wall:
                        continue
                    runs = sum(p["runs"] for p in parts)
                    flops = params * sum(p["token_passes"] for p in parts)
                    figures[name] = {
                        "wall_s": round(wall, 2), "inner_runs": runs,
                        "seconds_per_inner_run": round(wall / runs, 3),
                        "inner_runs_per_minute": round(60 * runs / wall, 2),
                        "fraction_of_peak": flops / wall / (peak * workers),
                        "device_peak_gib": max((p["device_peak_gib"] or 0) for p in parts)
                        or None,
                        "scores": [p["scores"] for p in parts]}
    return {"population": population, "workers": workers, "steps": steps, "rounds": rounds,
            "validation_episodes": validation, "device": device, "dtype": dtype or "float32",
            "base_model": f"{shape} + SFT {base_steps} steps" if base_steps
            else f"{shape} (random)",
            "params": params, "matmul_gflops_per_s_per_worker": round(peak / 1e9, 2),
            **figures,
            "ratio": figures["together"]["seconds_per_inner_run"]
            / figures["separate"]["seconds_per_inner_run"],
            "speedup": figures["separate"]["seconds_per_inner_run"]
            / figures["together"]["seconds_per_inner_run"]}


def base_model(path: Path, steps: int, shape: str = "tiny") -> Path:
    """The tiny model, fine-tuned for ``steps`` SFT steps when ``steps`` > 0, or a randomly
    initialised model of a real ``shape``."""
    from derl_bench.experiments.proxy import BaseModelSpec
    from derl_bench.experiments.proxy import base_model as proxy_base
    from derl_bench.policies.shapes import init_shape_model
    from derl_bench.policies.tiny import init_tiny_model

    if shape != "tiny":
        if steps > 0:
            raise ValueError("--base-steps fine-tunes the tiny model only")
        return init_shape_model(path, shape)
    if steps <= 0:
        return init_tiny_model(path)
    return proxy_base(path, BaseModelSpec(steps=steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--validation", type=int, default=200)
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--base-steps", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--shape", default="tiny",
                        help="tiny, or a real shape of derl_bench.policies.shapes.SHAPES")
    parser.add_argument("--device", default="cpu", help="e.g. cuda (then --workers 1)")
    parser.add_argument("--dtype", default=None, help="e.g. bfloat16 on a GPU")
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.validation, args.population, args.workers,
                             args.base_steps, args.rounds, args.shape, args.device, args.dtype),
                     indent=2))


if __name__ == "__main__":
    main()
