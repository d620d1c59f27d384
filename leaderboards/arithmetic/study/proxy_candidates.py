"""Should the proxy task move? The base policy's competence, and whether the reward matters,
on derl/Arithmetic-v0 and on derl/ReasoningGym-v0's chain_sum and basic_arithmetic.

For each task: the tiny model fine-tuned as the proxy's base policy is (``BaseModelSpec``'s
recipe, ``SFT_STEPS`` steps), then one GRPO run per hand-made reward from it with the proxy's
inner recipe (seed 0), each evaluated greedily on the task's L0 eval set. Seeded: a second run
prints the same numbers. Usage::

    python leaderboards/arithmetic/study/proxy_candidates.py OUT [SFT_STEPS [GRPO_STEPS [TASK...]]]

``SFT_STEPS`` defaults to 1200 and ``GRPO_STEPS`` to the proxy's inner recipe's; the tasks
to all three (``arithmetic``, ``chain_sum``, ``basic_arithmetic``).

Results go to ``OUT/results.json``; the study's README.md reports them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from derl_bench.experiments.proxy import HAND_MADE, ProxyConfig
from derl_bench.grpo.config import config_from_dict
from derl_bench.grpo.dispatch import run_training
from derl_bench.policies import LLMPolicy, SamplingConfig
from derl_bench.rollout import rollout_single_step
from derl_bench.sft import SFTConfig, run_sft

TASKS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "arithmetic": ("derl/Arithmetic-v0", {}, {"split": "L0-eval"}),
    "chain_sum": ("derl/ReasoningGym-v0", {"task": "chain_sum"},
                  {"task": "chain_sum", "level": "L0", "split": "eval"}),
    "basic_arithmetic": ("derl/ReasoningGym-v0", {"task": "basic_arithmetic"},
                         {"task": "basic_arithmetic", "level": "L0", "split": "eval"}),
}
"""Name -> (env id, training env kwargs, L0 eval env kwargs)."""


def figures(model: str, env_id: str, eval_kwargs: dict[str, Any]) -> dict[str, float]:
    """Greedy success, boxed format, extracted answer and "answer anywhere" rates."""
    policy = LLMPolicy.from_pretrained(model, env_id,
                                       sampling=SamplingConfig(40, 0.0, 1.0, seed=0))
    env = gym.make(env_id, **eval_kwargs)
    problems = env.unwrapped.problems
    sums = {"success": 0.0, "format_boxed": 0.0, "answer_parsed": 0.0, "anywhere": 0.0}
    for lo in range(0, len(problems), 256):
        chunk = list(range(lo, min(len(problems), lo + 256)))
        for i, episode in zip(chunk, rollout_single_step(env, policy, chunk, 1, by_index=True),
                              strict=True):
            step = episode.steps[0]
            sums["success"] += step.reward >= 1.0
            sums["format_boxed"] += step.primitives.get("format_boxed", 0.0)
            sums["answer_parsed"] += step.primitives.get("answer_parsed", 0.0)
            sums["anywhere"] += problems[i].answer in step.response
    env.close()
    return {k: round(v / len(problems), 4) for k, v in sums.items()} | {"n": len(problems)}


def main(out: Path, sft_steps: int = 1200, grpo_steps: int | None = None,
         tasks: list[str] | None = None) -> dict[str, Any]:
    torch.set_num_threads(1)
    base_spec, inner = ProxyConfig().base, ProxyConfig().inner
    if grpo_steps is not None:
        inner = {**inner, "steps": grpo_steps}
    results: dict[str, Any] = {}
    for name in tasks or list(TASKS):
        env_id, train_kwargs, eval_kwargs = TASKS[name]
        base = out / name / "base"
        started = time.perf_counter()
        if not (base / "config.json").exists():
            run_sft(SFTConfig(env_id=env_id, output=str(base), steps=sft_steps,
                              learning_rate=base_spec.learning_rate,
                              batch_size=base_spec.batch_size,
                              format_dropout=base_spec.format_dropout, seed=base_spec.seed,
                              env_kwargs=train_kwargs))
        row: dict[str, Any] = {"base": figures(str(base), env_id, eval_kwargs),
                               "sft_s": round(time.perf_counter() - started)}
        for label, expression in HAND_MADE.items():
            config = config_from_dict({
                **inner, "env_id": env_id, "env_kwargs": train_kwargs, "model": str(base),
                "meta_reward": expression, "name": f"{name}-{label}", "seed": 0,
                "progress": False, "output_dir": str(out / name / label.replace(" ", ""))})
            started = time.perf_counter()
            _, model = run_training(config)
            row[label] = figures(str(model), env_id, eval_kwargs) | {
                "train_s": round(time.perf_counter() - started)}
            print(name, label, row[label], flush=True)
        print(name, "base", row["base"], flush=True)
        results[name] = row
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1200,
         int(sys.argv[3]) if len(sys.argv) > 3 else None, sys.argv[4:] or None)
