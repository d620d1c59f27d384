"""The outer loop of reward discovery: propose Meta-Rewards, train on each, learn from scores.

Every generation, top to bottom:

1. the proposer writes ``population`` Meta-Rewards (the Meta-Optimizer LLM for ``derl`` and
   ``derl-pop``, the grammar for ``random``, mutation and crossover for ``revolve``);
2. each one is compiled (an invalid one scores ``invalid_score`` and trains nothing), then
   trains an inner GRPO policy — from the recipe's model, or for ``derl-pop`` (and any method
   with ``warm_start``) from the best policy so far (with ``warm_start_from: previous``, the
   previous generation's best), continuing through the training data where that policy
   stopped — and the policy's success on the fixed validation set is its
   score. The generation's inner runs go
   to an executor (:mod:`derl_bench.meta.workers`: Ray tasks, in parallel, or this process).
   A reward that behaves on the env's probe set (:mod:`derl_bench.meta.probe`) as one
   already scored from the same starting policy is not trained twice, and one that is
   constant there is not trained at all (it scores ``invalid_score``). An inner run
   that raises, or whose worker dies, is retried ``retries`` times and then *excluded* from
   the generation (logged with its reason): a crash says nothing about the reward;
3. the proposer learns from the scores of the candidates that ran (a GRPO step of the
   Meta-Optimizer, the islands' selection); a generation whose scores all tie gives every
   candidate zero advantage, and is counted;
4. every candidate is appended to ``candidates.jsonl`` as its run ends; ``summary.json``,
   ``curve.png`` and the reward-structure table ``structure.json`` / ``structure.png`` are
   rewritten.

Once a generation is proposed, the run's state is checkpointed (``state/checkpoint.pt``: the
proposer's weights, optimiser and RNG states, the proposals, the best so far), so
``run_meta(config, resume=True)`` continues a killed run: the inner runs that finished are not
redone and the rest of the run is what an uninterrupted run would have computed.

At the end the best policy (by validation score) is evaluated on the eval set of each of the
recipe's ``eval_levels`` by the ``evaluate`` callback, which writes result records under
``results/``: that, not the maximum over noisy validation scores, is the run's headline. For
``derl-pop`` (and ``warm_start``) the best Meta-Reward is also retrained from the base model
and evaluated the same way::

    result = run_meta(load_meta_config("baselines/meta-derl-arithmetic.yaml"),
                      evaluate=headline_evaluator("derl/Arithmetic-v0", ["L0", "L1", "L2"]))
    result.best_expr, result.headline
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from derl_bench.family import family_spec
from derl_bench.files import write_json_atomic, write_jsonl_atomic
from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.trainer import ResumeError, check_unchanged, make_env
from derl_bench.meta.config import LEARNING_METHODS, PLACEMENT_FIELDS, MetaConfig
from derl_bench.meta.inner import check_validation_split, inner_config
from derl_bench.meta.probe import ProbeSet, behaviour_key, probe_set
from derl_bench.meta.search import (
    FixedReward,
    IslandEvolution,
    Proposal,
    RandomSearch,
    slot_seed,
)
from derl_bench.meta.workers import (
    InnerJob,
    JobOutcome,
    LocalExecutor,
    RayExecutor,
    executor_for,
)
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


def make_proposer(config: MetaConfig, domain: str, warm_start: bool = True) -> Any:
    """The proposer of ``config.method``; ``domain`` names the primitives it may use (the
    inner env's id: only what that env emits). ``warm_start=False`` skips the Meta-Optimizer's
    cold-start fine-tuning (a resumed run loads its weights instead)."""
    if config.method == "random":
        return RandomSearch(domain, config.seed, config.max_depth)
    if config.method == "fixed":
        assert config.reward is not None
        return FixedReward(config.reward, config.seed)
    if config.method == "revolve":
        return IslandEvolution(domain, config.seed, config.islands, config.population,
                               config.crossover_rate, config.migrate_every, config.max_depth)
    from derl_bench.meta.optimizer import MetaOptimizer

    frozen = config.method == "derl-frozen"
    optimizer = MetaOptimizer(domain, config.optimizer_model, config.run_dir, config.seed,
                              0.0 if frozen else config.optimizer_learning_rate,
                              config.optimizer_kl_coef,
                              max_new_tokens=config.optimizer_max_new_tokens,
                              temperature=config.optimizer_temperature,
                              invalid_score=config.invalid_score,
                              device=config.inner.device, epochs=config.optimizer_epochs,
                              reference_reset=config.optimizer_reference_reset,
                              advantage=config.optimizer_advantage,
                              decoder=config.optimizer_decoder,
                              invalid=config.optimizer_invalid)
    if config.optimizer_sft_examples and warm_start:
        optimizer.warm_start(config.optimizer_sft_examples, config.optimizer_sft_steps,
                             seed=config.seed, corpus=config.optimizer_cold_start,
                             cache=config.optimizer_cache)
    return optimizer


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


Key = tuple[str, str | None, int | None]
"""An inner run's identity: the reward's behaviour on the probe set (its canonical hash where
there is no probe set), the start model and the inner seed where the proposer named one."""


def _candidate(config: MetaConfig, domain: str, generation: int, index: int,
               proposal: Proposal, start_model: str | None, probe: ProbeSet | None,
               ) -> tuple[dict[str, Any], Key | None]:
    """The candidate's record so far, and the key of the inner run it needs (``None`` for a
    reward that trains nothing: invalid, or constant on the probe set)."""
    # A proposer that names a seed (``fixed``) wants that seed's run, repeats or not: the seed
    # is part of the key. A slot's seed is not: a repeated reward keeps its first run.
    keyed_seed = proposal.extra.get("inner_seed")
    inner_seed = keyed_seed
    if inner_seed is None and config.inner_seeds == "slot":
        inner_seed = slot_seed(config.seed, generation * config.population + index)
    record: dict[str, Any] = {"generation": generation, "index": index, "expr": proposal.expr,
                              "origin": proposal.origin, "parents": list(proposal.parents),
                              "start_model": start_model, "inner_seed": inner_seed,
                              "seed_keyed": keyed_seed is not None}
    if proposal.extra.get("complete") is False:
        return {**record, "valid": False, "status": "invalid",
                "error": proposal.extra.get("error", "unfinished expression"),
                "score": config.invalid_score}, None
    try:
        reward = compile_reward(proposal.expr, domain=domain,
                                semantics=config.inner.reward_semantics)
    except MetaRewardError as err:
        return {**record, "valid": False, "status": "invalid", "error": str(err),
                "score": config.invalid_score}, None
    record.update(valid=True, canonical=reward.canonical, hash=reward.hash,
                  structure=reward.structure.kind, primitives=list(reward.primitives))
    if probe is None:
        return record, (reward.hash, start_model, keyed_seed)
    behaviour = behaviour_key(reward, probe, config.inner.scale_by_std)
    if behaviour is None and config.constant_rewards == "train":
        # Every constant reward gives zero advantage everywhere: they all train alike.
        behaviour = "constant"
    if behaviour is None:
        # Every advantage of every group would be zero: training on it changes nothing.
        return {**record, "status": "constant", "score": config.invalid_score,
                "error": "constant on the probe set: trains nothing"}, None
    record["behaviour"] = behaviour
    return record, (behaviour, start_model, keyed_seed)


def _finish(record: dict[str, Any], outcome: JobOutcome) -> dict[str, Any]:
    record = {**record, "run": outcome.job.run_dir, "seconds": outcome.seconds,
              "attempts": len(outcome.errors) + (outcome.result is not None),
              "worker": outcome.worker}
    result = outcome.result
    if result is None:
        record.update(status="failed", score=None, train_reward=None, checkpoint=None,
                      validation=None, error=outcome.errors[-1])
    else:
        record.update(status="scored", score=result.score, train_reward=result.train_reward,
                      checkpoint=str(result.checkpoint), validation=result.metrics)
        if outcome.errors:
            record["retried_after"] = outcome.errors
    return record


def _copy_of(record: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """``record`` scored as ``source``: the same reward from the same start is not retrained."""
    return {**record, **{k: source[k] for k in ("status", "score", "train_reward",
                                                "checkpoint", "validation")},
            "duplicate_of": source["run"]}


def _key(record: dict[str, Any]) -> Key:
    return (record.get("behaviour") or record["hash"], record["start_model"],
            record.get("inner_seed") if record.get("seed_keyed", True) else None)


class _Progress:
    """A bar per generation: candidates done, the inner runs now running, best so far."""

    def __init__(self, config: MetaConfig, generation: int, total: int, done: int,
                 best: float, zero_adv: int) -> None:
        from derl_bench.progress import progress_bar

        self.running: set[int] = set()
        self.best, self.zero_adv = best, zero_adv
        self.bar = progress_bar(total=total, initial=done, leave=True,
                        desc=f"{config.name} ({config.method}) gen {generation + 1}/"
                             f"{config.outer_steps}")
        self._show()

    def _show(self) -> None:
        running = ",".join(f"c{i:02d}" for i in sorted(self.running)) or "-"
        self.bar.set_postfix_str(f"running {running} | best {max(self.best, 0.0):.3f} | "
                                 f"zero-adv gens {self.zero_adv}")

    def start(self, job: InnerJob) -> None:
        self.running.add(job.index)
        self._show()

    def done(self, index: int, best: float | None = None) -> None:
        self.running.discard(index)
        if best is not None:
            self.best = max(self.best, best)
        self.bar.update(1)
        self._show()

    def close(self) -> None:
        self.bar.close()


def _run_generation(config: MetaConfig, domain: str, generation: int,
                    proposals: list[Proposal], start_model: str | None, data_offset: int,
                    done: dict[int, dict[str, Any]], seen: dict[Key, dict[str, Any]],
                    executor: LocalExecutor | RayExecutor, log: Path,
                    progress: _Progress | None, probe: ProbeSet | None,
                    ) -> list[dict[str, Any]]:
    """Every candidate's record, in index order; each is appended to ``log`` as it ends."""
    records = dict(done)

    def finished(index: int, record: dict[str, Any]) -> None:
        records[index] = record
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")
        if progress is not None:
            progress.done(index, record["score"] if record["status"] == "scored" else None)

    prepared: dict[int, dict[str, Any]] = {}
    runs_for: dict[Key, int] = {}
    copies: dict[int, list[int]] = {}
    jobs = []
    for index, proposal in enumerate(proposals):
        if index in records:
            continue
        record, key = _candidate(config, domain, generation, index, proposal, start_model,
                                 probe)
        if key is None:
            finished(index, record)
        elif key in seen:
            finished(index, _copy_of(record, seen[key]))
        elif key in runs_for:
            prepared[index] = record
            copies.setdefault(runs_for[key], []).append(index)
        else:
            prepared[index] = record
            runs_for[key] = index
            jobs.append(InnerJob(index, proposal.expr,
                                 str(config.run_dir / "inner" / f"g{generation:03d}-c{index:02d}"),
                                 start_model, data_offset, record["inner_seed"]))
    on_start = progress.start if progress is not None else None
    for outcome in executor.run(config, jobs, on_start):
        index = outcome.job.index
        record = _finish(prepared[index], outcome)
        seen[_key(record)] = record
        finished(index, record)
        for copy in copies.get(index, []):
            finished(copy, _copy_of(prepared[copy], record))
    return [records[i] for i in range(len(proposals))]


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

STATE_FILE = Path("state") / "checkpoint.pt"


def _save_state(out: Path, generation: int, proposer: Any, proposals: list[Proposal],
                result: MetaResult) -> None:
    """The run as it stands once generation ``generation`` is proposed: enough to redo the
    rest of the run exactly (written atomically; the previous one is replaced)."""
    import torch

    path = out / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"generation": generation, "proposer": proposer.state_dict(),
             "proposals": [p.to_dict() for p in proposals],
             "result": {"best_expr": result.best_expr, "best_score": result.best_score,
                        "best_checkpoint": result.best_checkpoint,
                        "generations": result.generations,
                        "zero_advantage_generations": result.zero_advantage_generations}}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _read_log(log: Path) -> list[dict[str, Any]]:
    """The records in ``log``; a last line cut short by a kill is dropped."""
    records = []
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def _start(config: MetaConfig, resume: bool) -> dict[str, Any] | None:
    """Prepare the run directory; on resume, check the recipe and return the saved state
    (``None``: the run had not reached its first checkpoint and starts over)."""
    out = config.run_dir
    saved = out / "config.yaml"
    current = yaml.safe_load(yaml.safe_dump(config.to_dict(), sort_keys=False))
    state = None
    if resume:
        if not saved.exists():
            raise ResumeError(f"--resume: no reward-discovery run at {out}")
        check_unchanged(yaml.safe_load(saved.read_text()) or {}, current, PLACEMENT_FIELDS)
        if (out / STATE_FILE).exists():
            import torch

            state = torch.load(out / STATE_FILE, weights_only=True)
    out.mkdir(parents=True, exist_ok=True)
    # Nothing an earlier run (or the unfinished end of this one) left can be scored or reported.
    stale = ("results", "retrained-best") if state is not None else (
        "inner", "results", "retrained-best", "state")
    for name in stale:
        shutil.rmtree(out / name, ignore_errors=True)
    saved.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    log = out / "candidates.jsonl"
    if state is None:
        log.unlink(missing_ok=True)
    else:
        write_jsonl_atomic(log, [r for r in _read_log(log)
                                 if r["generation"] <= state["generation"]])
    return state


def run_meta(config: MetaConfig, evaluate: Evaluator | None = None, resume: bool = False,
             executor: LocalExecutor | RayExecutor | None = None) -> MetaResult:
    """Run reward discovery as ``config`` says (see the module docstring); ``evaluate``
    computes the headline of the best policy (none without it). ``resume`` continues the run
    in ``config.run_dir`` from its last checkpoint; ``executor`` overrides the recipe's."""
    check_validation_split(config)  # before anything is trained or written
    env_id = config.inner.env_id
    # Proposals use, and compile against, exactly the primitives the inner env emits.
    domain = env_id
    out = config.run_dir
    state = _start(config, resume)
    log = out / "candidates.jsonl"
    # A missing dataset or a bad env setting is the run's problem, not a candidate's: fail now.
    make_env(inner_config(config, "0", out / "inner" / "check", None)).close()
    shutil.rmtree(out / "inner" / "check", ignore_errors=True)
    proposer = make_proposer(config, domain, warm_start=state is None)
    # Single-step rewards are keyed by behaviour; a probe episode has one step, so it cannot
    # tell trajectory terms apart (mean and last agree on it): agents keep the canonical hash.
    probe = None if family_spec(env_id).multi_turn else probe_set(env_id)
    result = MetaResult()
    first = 0
    resumed: list[Proposal] | None = None
    if state is not None:
        proposer.load_state_dict(state["proposer"])
        result = MetaResult(**state["result"])
        first = int(state["generation"])
        resumed = [Proposal.from_dict(p) for p in state["proposals"]]
    logged = _read_log(log)  # empty unless resuming
    result.candidates = [r for r in logged if r["generation"] < first]
    seen: dict[Key, dict[str, Any]] = {_key(r): r for r in logged
                                       if "run" in r and "duplicate_of" not in r and "hash" in r}
    done = {r["index"]: r for r in logged if r["generation"] == first}
    inner_steps = int(inner_config(config, "0", out, None).steps)
    executor = executor or executor_for(config)
    if config.progress and executor.dashboard_url:
        print(f"Ray dashboard: {executor.dashboard_url}")

    for generation in range(first, config.outer_steps):
        start_model = _warm_start_model(config, result, generation)
        warm = start_model is not None
        data_offset = generation * inner_steps if warm else 0
        if resumed is not None:
            proposals, resumed = resumed, None
        else:
            proposals = proposer.propose(config.population)
            _save_state(out, generation, proposer, proposals, result)
            done = {}
        progress = (_Progress(config, generation, len(proposals), len(done), result.best_score,
                              result.zero_advantage_generations) if config.progress else None)
        try:
            records = _run_generation(config, domain, generation, proposals, start_model,
                                      data_offset, done, seen, executor, log, progress, probe)
        finally:
            if progress is not None:
                progress.close()
        for record in records:  # in index order, so ties go the same way however runs finish
            if record["status"] == "scored" and record["score"] > result.best_score:
                result.best_expr, result.best_score = record["expr"], record["score"]
                result.best_checkpoint = record["checkpoint"]
        kept = [i for i, r in enumerate(records) if r["status"] != "failed"]
        scores = [float(records[i]["score"]) for i in kept]
        stats = {}
        if kept and config.method in LEARNING_METHODS:
            stats = proposer.observe([proposals[i] for i in kept], scores,
                                     [records[i]["status"] != "invalid" for i in kept])
        elif kept:
            proposer.observe([proposals[i] for i in kept], scores)
        advantage = _advantage_stats(scores)
        result.zero_advantage_generations += advantage["zero_advantage"]
        result.candidates.extend(records)
        result.generations.append({
            "generation": generation,
            "mean_score": float(np.mean(scores)) if scores else 0.0,
            "max_score": max(scores) if scores else 0.0,
            "best_so_far": result.best_score if result.best_expr is not None else 0.0,
            "valid_fraction": sum(bool(r.get("valid")) for r in records) / len(records),
            "constant": sum(r["status"] == "constant" for r in records),
            "failed": len(records) - len(kept),
            **advantage,
            **(stats or {}),
        })
        _write_summary(config, result, domain)
        _plot(out / "curve.png", result.generations, f"{config.name} ({config.method})")
        rows = structure_table(result.candidates)
        write_json_atomic(out / "structure.json", rows)
        _plot_structure(out / "structure.png", rows)
    if config.method in LEARNING_METHODS:
        proposer.save(out / "meta-optimizer")
    if evaluate is not None and result.best_checkpoint is not None:
        result.headline = {"best": executor.call(evaluate, result.best_checkpoint,
                                                 result.best_expr, out / "results",
                                                 config.method)}
        if config.warm_starts and result.best_expr is not None:
            job = InnerJob(0, result.best_expr, str(out / "retrained-best"))
            outcome = next(iter(executor.run(config, [job])))
            if outcome.result is None:
                result.headline["retrained_from_base"] = {"error": outcome.errors[-1]}
            else:
                retrained = outcome.result
                result.headline["retrained_from_base"] = {
                    "validation": retrained.score,
                    **executor.call(evaluate, str(retrained.checkpoint), result.best_expr,
                                    out / "results" / "retrained-from-base",
                                    f"{config.method} (retrained)"),
                }
    _write_summary(config, result, domain)
    return result


def _warm_start_model(config: MetaConfig, result: MetaResult, generation: int) -> str | None:
    """The checkpoint generation ``generation``'s inner runs start from: none without warm
    starts; the best policy so far; or, with ``warm_start_from: previous``, the best of the
    previous generation (the first on ties; none when nothing there was scored)."""
    if not config.warm_starts:
        return None
    if config.warm_start_from == "best":
        return result.best_checkpoint
    scored = [c for c in result.candidates
              if c["generation"] == generation - 1 and c.get("status") == "scored"]
    # Records are in completion order after a resume: break ties by index, not by order.
    best = max(scored, key=lambda c: (c["score"], -c["index"]), default=None)
    return best["checkpoint"] if best is not None else None


def _write_summary(config: MetaConfig, result: MetaResult, domain: str) -> None:
    write_json_atomic(config.run_dir / "summary.json", {
        "name": config.name, "method": config.method, "env_id": domain,
        "domain": family_spec(domain).domain,
        "best_expr": result.best_expr,
        "best_validation_score": result.best_score if result.best_expr is not None else None,
        "best_checkpoint": result.best_checkpoint,
        "zero_advantage_generations": result.zero_advantage_generations,
        "failed_inner_runs": sum(c.get("status") == "failed" for c in result.candidates),
        "constant_rewards": sum(c.get("status") == "constant" for c in result.candidates),
        "headline": result.headline,
        "generations": result.generations,
    })
