"""The outer loop of reward discovery: propose Meta-Rewards, train on each, learn from scores.

Every generation, top to bottom:

1. the proposer writes ``population`` Meta-Rewards (the Meta-Optimizer LLM for ``derl`` and
   ``derl-pop``, the grammar for ``random``, mutation and crossover for ``revolve``);
2. each one is compiled (an invalid one scores ``invalid_score`` and trains nothing), then
   trains an inner GRPO policy — from the recipe's model, or for ``derl-pop`` from the best
   policy so far, continuing through the training data where that policy stopped — and the
   policy's success on the fixed validation set is its score. A reward already scored from
   the same starting policy is not trained twice. An inner run that raises is retried
   ``retries`` times and then *excluded* from the generation (logged with its reason): a
   crash says nothing about the reward;
3. the proposer learns from the scores of the candidates that ran (a GRPO step of the
   Meta-Optimizer, the islands' selection); a generation whose scores all tie gives every
   candidate zero advantage, and is counted;
4. every candidate is appended to ``candidates.jsonl``; ``summary.json``, ``curve.png`` and the
   reward-structure table ``structure.json`` / ``structure.png`` are rewritten.

At the end the best policy (by validation score) is evaluated on the eval set of each of the
recipe's ``eval_levels`` by the ``evaluate`` callback, which writes result records under
``results/``: that, not the maximum over noisy validation scores, is the run's headline. For
``derl-pop`` the best Meta-Reward is also retrained from the base model and evaluated the same
way::

    result = run_meta(load_meta_config("baselines/meta-derl-arithmetic.yaml"),
                      evaluate=headline_evaluator("derl/Arithmetic-v0", ["L0", "L1", "L2"]))
    result.best_expr, result.headline
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.trainer import make_env
from derl_bench.meta.config import MetaConfig
from derl_bench.meta.inner import inner_config, train_and_score
from derl_bench.meta.search import FixedReward, IslandEvolution, Proposal, RandomSearch
from derl_bench.policies import domain_of, env_family
from derl_bench.reward import MetaRewardError, compile_reward

STRUCTURE_KINDS = ("linear", "bounded", "veto", "unbounded")


@dataclass
class MetaResult:
    """What a reward-discovery run found."""

    best_expr: str | None = None
    best_score: float = -math.inf
    best_checkpoint: str | None = None
    generations: list[dict[str, Any]] = field(default_factory=list)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    headline: dict[str, Any] = field(default_factory=dict)
    """Per level: the best policy's eval success ``{"mean", "se", "n"}`` and its record."""
    zero_advantage_generations: int = 0


def make_proposer(config: MetaConfig, domain: str) -> Any:
    """The proposer of ``config.method``; ``domain`` names the primitives it may use (the
    inner env's id: only what that env emits)."""
    if config.method == "random":
        return RandomSearch(domain, config.seed, config.max_depth)
    if config.method == "fixed":
        assert config.reward is not None
        return FixedReward(config.reward, config.seed)
    if config.method == "revolve":
        return IslandEvolution(domain, config.seed, config.islands, config.population,
                               config.crossover_rate, config.migrate_every, config.max_depth)
    from derl_bench.meta.optimizer import MetaOptimizer

    optimizer = MetaOptimizer(domain, config.optimizer_model, config.run_dir, config.seed,
                              config.optimizer_learning_rate, config.optimizer_kl_coef,
                              max_new_tokens=config.optimizer_max_new_tokens,
                              temperature=config.optimizer_temperature,
                              invalid_score=config.invalid_score,
                              device=str(config.inner.get("device", "cpu")))
    if config.optimizer_sft_examples:
        optimizer.warm_start(config.optimizer_sft_examples, config.optimizer_sft_steps,
                             seed=config.seed)
    return optimizer


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _plot(path: Path, generations: list[dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [g["generation"] for g in generations]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(steps, [g["best_so_far"] for g in generations], marker="o", label="best so far")
    ax.plot(steps, [g["mean_score"] for g in generations], marker=".", label="generation mean")
    ax.set_xlabel("generation")
    ax.set_ylabel("validation success")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def structure_table(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per generation: the share of each reward structure among the valid candidates that
    ran, and their mean validation score (the paper's analysis of what the search favours)."""
    rows = []
    for generation in sorted({c["generation"] for c in candidates}):
        ran = [c for c in candidates if c["generation"] == generation
               and c.get("structure") and c.get("status") == "scored"]
        row: dict[str, Any] = {"generation": generation, "n": len(ran)}
        for kind in STRUCTURE_KINDS:
            scores = [c["score"] for c in ran if c["structure"] == kind]
            row[f"{kind}_share"] = len(scores) / len(ran) if ran else 0.0
            row[f"{kind}_mean_score"] = float(np.mean(scores)) if scores else None
        rows.append(row)
    return rows


def _plot_structure(path: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    steps = [r["generation"] for r in rows]
    bottom = np.zeros(len(rows))
    for kind in STRUCTURE_KINDS:
        share = np.array([r[f"{kind}_share"] for r in rows])
        left.bar(steps, share, bottom=bottom, label=kind)
        bottom += share
        means = [r[f"{kind}_mean_score"] for r in rows]
        points = [(s, m) for s, m in zip(steps, means, strict=True) if m is not None]
        if points:
            right.plot(*zip(*points, strict=True), marker="o", label=kind)
    left.set_xlabel("generation")
    left.set_ylabel("share of candidates")
    left.legend(fontsize=7)
    right.set_xlabel("generation")
    right.set_ylabel("mean validation success")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _run_inner(config: MetaConfig, expr: str, run: Path, start_model: str | None,
               data_offset: int, inner_seed: int | None) -> tuple[Any, list[str]]:
    """Train and score with retries; returns the result (``None`` after the last failure)
    and the error of every failed attempt."""
    errors: list[str] = []
    for _ in range(config.retries + 1):
        try:
            return (train_and_score(config, expr, run, start_model, data_offset, inner_seed),
                    errors)
        except Exception as err:  # any failure of an inner run is retried, then excluded
            errors.append(f"{type(err).__name__}: {err}")
            run.parent.mkdir(parents=True, exist_ok=True)
            with open(run.parent / f"{run.name}.error.log", "a", encoding="utf-8") as fh:
                fh.write(traceback.format_exc() + "\n")
    return None, errors


def _candidate(config: MetaConfig, domain: str, generation: int, index: int,
               proposal: Proposal, start_model: str | None, data_offset: int,
               seen: dict[tuple[str, str | None, int | None], dict[str, Any]]) -> dict[str, Any]:
    record: dict[str, Any] = {"generation": generation, "index": index, "expr": proposal.expr,
                              "origin": proposal.origin, "parents": list(proposal.parents),
                              "start_model": start_model}
    if proposal.extra.get("complete") is False:
        return {**record, "valid": False, "status": "invalid",
                "error": "unfinished expression", "score": config.invalid_score}
    try:
        reward = compile_reward(proposal.expr, domain=domain)
    except MetaRewardError as err:
        return {**record, "valid": False, "status": "invalid", "error": str(err),
                "score": config.invalid_score}
    record.update(valid=True, canonical=reward.canonical, hash=reward.hash,
                  structure=reward.structure.kind, primitives=list(reward.primitives))
    inner_seed = proposal.extra.get("inner_seed")
    key = (reward.hash, start_model, inner_seed)
    if key in seen:
        return {**record, **{k: seen[key][k] for k in ("status", "score", "train_reward",
                                                        "checkpoint", "validation")},
                "duplicate_of": seen[key]["run"]}
    run = config.run_dir / "inner" / f"g{generation:03d}-c{index:02d}"
    started = time.perf_counter()
    result, errors = _run_inner(config, proposal.expr, run, start_model, data_offset,
                                inner_seed)
    record.update(run=str(run), seconds=round(time.perf_counter() - started, 2),
                  attempts=len(errors) + (result is not None))
    if result is None:
        record.update(status="failed", score=None, train_reward=None, checkpoint=None,
                      validation=None, error=errors[-1])
    else:
        record.update(status="scored", score=result.score, train_reward=result.train_reward,
                      checkpoint=str(result.checkpoint), validation=result.metrics)
        if errors:
            record["retried_after"] = errors
    seen[key] = record
    return record


def _advantage_stats(scores: list[float]) -> dict[str, Any]:
    if len(scores) < 2:
        return {"advantage_abs_mean": 0.0, "zero_advantage": True}
    adv = group_advantages(scores, [0] * len(scores))
    return {"advantage_abs_mean": float(np.abs(adv).mean()),
            "zero_advantage": bool(np.all(adv == 0))}


Evaluator = Callable[[str, "str | None", Path, str], dict[str, Any]]
"""``evaluate(checkpoint, meta_reward, out_dir, method) -> {level: {"mean", "se", "n", ...}}``:
scores a final policy on the eval sets and writes its records under ``out_dir``. The
evaluation stage provides one (:func:`derl_bench.evaluation.batched.headline_evaluator`)."""


def run_meta(config: MetaConfig, evaluate: Evaluator | None = None) -> MetaResult:
    """Run reward discovery as ``config`` says (see the module docstring); ``evaluate``
    computes the headline of the best policy (none without it)."""
    env_id = config.inner.get("env_id", "derl/GSM8K-v0")
    # Proposals use, and compile against, exactly the primitives the inner env emits.
    domain = env_id
    out = config.run_dir
    out.mkdir(parents=True, exist_ok=True)
    # A run starts clean: nothing an earlier run left here can be scored or reported.
    for stale in ("inner", "results", "retrained-best"):
        shutil.rmtree(out / stale, ignore_errors=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    log = out / "candidates.jsonl"
    log.unlink(missing_ok=True)
    # A missing dataset or a bad env setting is the run's problem, not a candidate's: fail now.
    make_env(inner_config(config, "0", out / "inner" / "check", None)).close()
    proposer = make_proposer(config, domain)
    result = MetaResult()
    seen: dict[tuple[str, str | None, int | None], dict[str, Any]] = {}
    inner_steps = int(inner_config(config, "0", out, None).steps)

    generations = range(config.outer_steps)
    bar = None
    if config.progress:
        from tqdm.auto import tqdm

        bar = tqdm(generations, desc=f"{config.name} ({config.method})")
        generations = bar
    for generation in generations:
        warm = config.method == "derl-pop" and result.best_checkpoint is not None
        start_model = result.best_checkpoint if warm else None
        data_offset = generation * inner_steps if warm else 0
        proposals = proposer.propose(config.population)
        records = []
        for index, proposal in enumerate(proposals):
            record = _candidate(config, domain, generation, index, proposal, start_model,
                                data_offset, seen)
            records.append(record)
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, default=str) + "\n")
            if record["status"] == "scored" and record["score"] > result.best_score:
                result.best_expr, result.best_score = record["expr"], record["score"]
                result.best_checkpoint = record["checkpoint"]
        kept = [i for i, r in enumerate(records) if r["status"] != "failed"]
        scores = [float(records[i]["score"]) for i in kept]
        stats = proposer.observe([proposals[i] for i in kept], scores) if kept else {}
        advantage = _advantage_stats(scores)
        result.zero_advantage_generations += advantage["zero_advantage"]
        result.candidates.extend(records)
        result.generations.append({
            "generation": generation,
            "mean_score": float(np.mean(scores)) if scores else 0.0,
            "max_score": max(scores) if scores else 0.0,
            "best_so_far": result.best_score if result.best_expr is not None else 0.0,
            "valid_fraction": sum(bool(r.get("valid")) for r in records) / len(records),
            "failed": len(records) - len(kept),
            **advantage,
            **(stats or {}),
        })
        if bar is not None:
            bar.set_postfix(best=f"{max(result.best_score, 0.0):.3f}",
                            zero_adv=result.zero_advantage_generations)
        _write_summary(config, result, domain)
        _plot(out / "curve.png", result.generations, f"{config.name} ({config.method})")
        rows = structure_table(result.candidates)
        _write_json(out / "structure.json", rows)
        _plot_structure(out / "structure.png", rows)
    if config.method in ("derl", "derl-pop"):
        proposer.save(out / "meta-optimizer")
    if evaluate is not None and result.best_checkpoint is not None:
        result.headline = {"best": evaluate(result.best_checkpoint, result.best_expr,
                                            out / "results", config.method)}
        if config.method == "derl-pop" and result.best_expr is not None:
            retrained = train_and_score(config, result.best_expr, out / "retrained-best", None)
            result.headline["retrained_from_base"] = {
                "validation": retrained.score,
                **evaluate(str(retrained.checkpoint), result.best_expr,
                           out / "results" / "retrained-from-base", f"{config.method} (retrained)"),
            }
    _write_summary(config, result, domain)
    return result


def _write_summary(config: MetaConfig, result: MetaResult, domain: str) -> None:
    _write_json(config.run_dir / "summary.json", {
        "name": config.name, "method": config.method, "env_id": domain,
        "domain": domain_of(env_family(domain)),
        "best_expr": result.best_expr,
        "best_validation_score": result.best_score if result.best_expr is not None else None,
        "best_checkpoint": result.best_checkpoint,
        "zero_advantage_generations": result.zero_advantage_generations,
        "failed_inner_runs": sum(c.get("status") == "failed" for c in result.candidates),
        "headline": result.headline,
        "generations": result.generations,
    })
