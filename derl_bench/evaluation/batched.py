"""Evaluate a trained LLM policy the way reward discovery reports it: batched and greedy.

Single-step envs (the math family) answer every problem of the eval set in large generation
batches through one env, decoded greedily, so an evaluation of hundreds of problems costs
seconds on a CPU; the record is the protocol's own (:func:`~derl_bench.evaluation.record.
build_record`: same eval set, same entries in manifest order, ``policy`` names the decoding).
Multi-turn envs go through :func:`~derl_bench.evaluation.evaluate` unchanged::

    record, extra = evaluate_llm("derl/Arithmetic-v0", "L0", "runs/x/checkpoints/step-20")
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from derl_bench.evaluation.families import FamilyAdapter, adapter_for
from derl_bench.evaluation.record import build_record, meta_reward_block
from derl_bench.evaluation.runner import EpisodeResult
from derl_bench.files import write_json_atomic

if TYPE_CHECKING:
    from derl_bench.reward import MetaReward

BATCH = 256


def evaluate_llm(env: str | FamilyAdapter, level: str, model: str | Path, *,
                 limit: int | None = None,
                 method: str = "llm", model_label: str | None = None,
                 max_new_tokens: int = 64, meta_reward: str | MetaReward | None = None,
                 env_kwargs: dict[str, Any] | None = None, temperature: float = 0.0,
                 checkpoint: str | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """A result record of the policy at ``model`` on ``env``'s ``level`` eval set
    (``model_label`` is the board's name for the model, default the folder name; ``checkpoint``
    which of its run's weights ``model`` holds, in words), and the
    lenient figure beside it: for single-step envs the share of responses that contain the
    reference answer anywhere (``loose_outcome``), the number a looser grader would publish.
    A policy that raises it while strict success stays flat has learnt to game the grader.
    ``env`` is an env id, whose family is resolved here, or the
    :class:`~derl_bench.evaluation.families.FamilyAdapter` the caller resolved."""
    import gymnasium as gym

    from derl_bench.evaluation import evaluate
    from derl_bench.policies import LLMPolicy, SamplingConfig
    from derl_bench.rollout import rollout_single_step

    label = model_label or Path(model).name
    adapter = adapter_for(env)
    env_id = adapter.env_id
    block = meta_reward_block(meta_reward, adapter) if meta_reward else None
    if adapter.spec.multi_turn:
        record, _results = evaluate(adapter, level, f"llm:{model}", limit=limit, method=method,
                                    model=label, meta_reward=block, env_kwargs=env_kwargs,
                                    max_new_tokens=max_new_tokens, checkpoint=checkpoint)
        return record, {}
    eval_set = adapter.eval_set(level)
    entries = list(eval_set.entries[:limit] if limit is not None else eval_set.entries)
    start = time.perf_counter()
    policy = LLMPolicy.from_pretrained(
        model, adapter.resolved, sampling=SamplingConfig(max_new_tokens, temperature, 1.0, seed=0))
    made = gym.make(env_id, **{**eval_set.spec.env_kwargs, **(env_kwargs or {})})
    results: list[EpisodeResult] = []
    loose: list[float] = []
    try:
        indices = [adapter.reset_options(made.unwrapped, e)["index"] for e in entries]
        for lo in range(0, len(indices), BATCH):
            chunk = indices[lo:lo + BATCH]
            episodes = rollout_single_step(made, policy, chunk, 1, by_index=True)
            for offset, episode in enumerate(episodes):
                i = lo + offset
                step = episode.steps[0]
                loose.append(float(step.primitives.get("loose_outcome", 0.0)))
                results.append(EpisodeResult(
                    index=i, entry=entries[i], seed=i,
                    task_type=adapter.task_type(entries[i], {}),
                    success=step.reward >= 1.0, steps=1, total_reward=step.reward))
    finally:
        made.close()
    spec = f"llm:{model},temperature={temperature:g},batched"
    record = build_record(eval_set, results, method=method, model=label, policy_spec=spec,
                          wall_time_s=time.perf_counter() - start, env_kwargs=env_kwargs,
                          meta_reward=block, checkpoint=checkpoint, adapter=adapter)
    return record, {"lenient_success": sum(loose) / max(1, len(loose))}


BEST_POLICY = ("final weights of the inner GRPO run with the best validation success "
               "(the search's best policy)")
RETRAINED = "final weights of the best Meta-Reward retrained once from the base policy"
RETRAINED_SUFFIX = " (retrained)"
"""The meta loop names the retrained run's method ``<method> (retrained)``."""


def headline_evaluator(env: str | FamilyAdapter, levels: Sequence[str], *,
                       limit: int | None = None, max_new_tokens: int = 64,
                       model_label: str = "tiny", env_kwargs: dict[str, Any] | None = None,
                       ) -> Callable[[str, MetaReward | str | None, Path, str], dict[str, Any]]:
    """The ``evaluate`` callback of :func:`derl_bench.meta.run_meta`: each of ``levels`` (that
    the env has) evaluated with :func:`evaluate_llm`, one record per level under the run's
    ``results/`` folder. ``env`` is an env id, whose family is resolved here, once for every
    evaluation the callback makes, or the
    :class:`~derl_bench.evaluation.families.FamilyAdapter` the caller resolved."""
    adapter = adapter_for(env)
    available = [lvl for lvl in levels if lvl in adapter.levels()]

    def evaluate(checkpoint: str, meta_reward: MetaReward | str | None, out: Path,
                 method: str) -> dict[str, Any]:
        out.mkdir(parents=True, exist_ok=True)
        report: dict[str, Any] = {}
        rule = RETRAINED if method.endswith(RETRAINED_SUFFIX) else BEST_POLICY
        for level in available:
            record, extra = evaluate_llm(adapter, level, checkpoint, limit=limit, method=method,
                                         model_label=model_label,
                                         max_new_tokens=max_new_tokens,
                                         meta_reward=meta_reward, env_kwargs=env_kwargs,
                                         checkpoint=rule)
            path = out / f"{level}.json"
            write_json_atomic(path, record)
            rate = record["results"]["success_rate"]
            report[level] = {"mean": rate["mean"], "se": rate["se"],
                             "n": record["results"]["n"], "record": str(path), **extra}
        return report

    return evaluate


__all__ = ["evaluate_llm", "headline_evaluator"]
