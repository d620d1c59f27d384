"""The outer loop of reward discovery: propose Meta-Rewards, train on each, learn from scores.

Every generation, top to bottom:

1. the method's proposer (:mod:`derl_bench.meta.methods`) writes ``population`` Meta-Rewards
   (the Meta-Optimizer LLM for ``derl`` and ``derl-pop``, the grammar for ``random``, mutation
   and crossover for ``revolve``);
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
   rewritten (:mod:`derl_bench.meta.report`).

Once a generation is proposed, the run's state is checkpointed (``state/checkpoint.pt``: the
proposer's weights, optimiser and RNG states, the proposals, the best so far;
:mod:`derl_bench.meta.persist`), so
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

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.trainer import make_env
from derl_bench.meta.config import MetaConfig
from derl_bench.meta.inner import check_validation_split, compile_inner_reward, inner_config
from derl_bench.meta.persist import LOG_FILE, append_record, read_log, save_state, start_run
from derl_bench.meta.probe import ProbeSet, behaviour_key, probe_set
from derl_bench.meta.report import GenerationProgress, write_report, write_summary
from derl_bench.meta.search import LearningProposer, Proposal, Proposer, slot_seed
from derl_bench.meta.types import MetaResult, Status
from derl_bench.meta.workers import Executor, InnerJob, JobOutcome, executor_for
from derl_bench.reward import MetaReward, MetaRewardError


def make_proposer(config: MetaConfig, env_id: str, cold_start: bool = True) -> Proposer:
    """The proposer of ``config.method`` (its :attr:`~derl_bench.meta.methods.base.Method.
    proposer`); it proposes rewards over exactly the primitives ``env_id`` emits.
    ``cold_start=False`` skips a model's cold-start fine-tuning (a resumed run loads its
    weights instead)."""
    return config.search_method.proposer(config, env_id, cold_start)


Key = tuple[str, str | None, int | None]
"""An inner run's identity: the reward's behaviour on the probe set (its canonical hash where
there is no probe set), the start model and the inner seed where the proposer named one."""


def _candidate(config: MetaConfig, generation: int, index: int, proposal: Proposal,
               start_model: str | None, probe: ProbeSet | None,
               ) -> tuple[dict[str, Any], Key | None, MetaReward | None]:
    """The candidate's record so far, the key of the inner run it needs (``None`` for a
    reward that trains nothing: invalid, or constant on the probe set) and its compiled reward,
    which that inner run is handed (``None`` for an invalid one)."""
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
        return {**record, "valid": False, "status": Status.INVALID,
                "error": proposal.extra.get("error", "unfinished expression"),
                "score": config.invalid_score}, None, None
    try:
        reward = compile_inner_reward(config, proposal.expr)
    except MetaRewardError as err:
        return {**record, "valid": False, "status": Status.INVALID, "error": str(err),
                "score": config.invalid_score}, None, None
    record.update(valid=True, canonical=reward.canonical, hash=reward.hash,
                  structure=reward.structure.kind, primitives=list(reward.primitives))
    if probe is None:
        return record, (reward.hash, start_model, keyed_seed), reward
    behaviour = behaviour_key(reward, probe, config.inner.scale_by_std)
    if behaviour is None and config.constant_rewards == "train":
        # Every constant reward gives zero advantage everywhere: they all train alike.
        behaviour = "constant"
    if behaviour is None:
        # Every advantage of every group would be zero: training on it changes nothing.
        return {**record, "status": Status.CONSTANT, "score": config.invalid_score,
                "error": "constant on the probe set: trains nothing"}, None, reward
    record["behaviour"] = behaviour
    return record, (behaviour, start_model, keyed_seed), reward


def _finish(record: dict[str, Any], outcome: JobOutcome) -> dict[str, Any]:
    record = {**record, "run": outcome.job.run_dir, "seconds": outcome.seconds,
              "attempts": len(outcome.errors) + (outcome.result is not None),
              "worker": outcome.worker}
    result = outcome.result
    if result is None:
        record.update(status=Status.FAILED, score=None, train_reward=None, checkpoint=None,
                      validation=None, error=outcome.errors[-1])
    else:
        record.update(status=Status.SCORED, score=result.score,
                      train_reward=result.train_reward, checkpoint=str(result.checkpoint),
                      validation=result.metrics)
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


@dataclass
class _Candidates:
    """Turns a generation's proposals into candidate records: compiles and keys each reward,
    trains the ones not trained before (on the executor) and scores the rest as the run they
    repeat. Every record is appended to the log as it ends."""

    config: MetaConfig
    probe: ProbeSet | None
    executor: Executor
    seen: dict[Key, dict[str, Any]]
    """Every inner run that trained so far, by key."""
    log: Path
    compiled: dict[str, MetaReward] = field(default_factory=dict)
    """Every reward this process compiled, by its text: the best one is not compiled again
    for its headline."""

    def score(self, generation: int, proposals: list[Proposal], start_model: str | None,
              data_offset: int, done: dict[int, dict[str, Any]],
              progress: GenerationProgress | None) -> list[dict[str, Any]]:
        """Every candidate's record, in index order (``done``: those a resumed run has)."""
        records = dict(done)

        def finished(index: int, record: dict[str, Any]) -> None:
            records[index] = record
            append_record(self.log, record)
            if progress is not None:
                progress.done(index, record["score"] if record["status"] == Status.SCORED
                              else None)

        prepared: dict[int, dict[str, Any]] = {}
        runs_for: dict[Key, int] = {}
        copies: dict[int, list[int]] = {}
        jobs = []
        for index, proposal in enumerate(proposals):
            if index in records:
                continue
            record, key, reward = _candidate(self.config, generation, index, proposal,
                                             start_model, self.probe)
            if reward is not None:
                self.compiled[proposal.expr] = reward
            if key is None:
                finished(index, record)
            elif key in self.seen:
                finished(index, _copy_of(record, self.seen[key]))
            elif key in runs_for:
                prepared[index] = record
                copies.setdefault(runs_for[key], []).append(index)
            else:
                prepared[index] = record
                runs_for[key] = index
                run_dir = self.config.run_dir / "inner" / f"g{generation:03d}-c{index:02d}"
                assert reward is not None  # a keyed candidate compiled
                jobs.append(InnerJob(index, reward, str(run_dir), start_model,
                                     data_offset, record["inner_seed"]))
        on_start = progress.start if progress is not None else None
        for outcome in self.executor.run(self.config, jobs, on_start):
            index = outcome.job.index
            record = _finish(prepared[index], outcome)
            self.seen[_key(record)] = record
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


Evaluator = Callable[[str, "MetaReward | None", Path, str], dict[str, Any]]
"""``evaluate(checkpoint, meta_reward, out_dir, method) -> {level: {"mean", "se", "n", ...}}``:
scores a final policy on the eval sets and writes its records under ``out_dir``
(``meta_reward``, the compiled reward it was trained with, names it in the records). The
evaluation stage provides one (:func:`derl_bench.evaluation.batched.headline_evaluator`)."""


def run_meta(config: MetaConfig, evaluate: Evaluator | None = None, resume: bool = False,
             executor: Executor | None = None) -> MetaResult:
    """Run reward discovery as ``config`` says (see the module docstring); ``evaluate``
    computes the headline of the best policy (none without it). ``resume`` continues the run
    in ``config.run_dir`` from its last checkpoint; ``executor`` overrides the recipe's.
    Every stage of the run, inner runs included, reads the inner env's family from
    ``config.family``, resolved once where the config was made."""
    config.check_machine()  # before anything is trained or written
    env_id = config.inner.env_id
    family = config.family
    check_validation_split(config)
    out = config.run_dir
    state = start_run(config, resume)
    log = out / LOG_FILE
    # A missing dataset or a bad env setting is the run's problem, not a candidate's: fail now.
    make_env(inner_config(config, "0", out / "inner" / "check", None), family).close()
    shutil.rmtree(out / "inner" / "check", ignore_errors=True)
    # Proposals use, and compile against, exactly the primitives the inner env emits.
    proposer = make_proposer(config, env_id, cold_start=state is None)
    # Single-step rewards are keyed by behaviour; a probe episode has one step, so it cannot
    # tell trajectory terms apart (mean and last agree on it): agents keep the canonical hash.
    probe = None if family.multi_turn else probe_set(env_id, family)
    learns = config.search_method.learns
    result = MetaResult()
    first = 0
    resumed: list[Proposal] | None = None
    if state is not None:
        proposer.load_state_dict(state["proposer"])
        result = MetaResult(**state["result"])
        first = int(state["generation"])
        resumed = [Proposal.from_dict(p) for p in state["proposals"]]
    logged = read_log(log)  # empty unless resuming
    result.candidates = [r for r in logged if r["generation"] < first]
    done = {r["index"]: r for r in logged if r["generation"] == first}
    inner_steps = int(inner_config(config, "0", out, None).steps)
    executor = executor or executor_for(config)
    if config.progress and executor.dashboard_url:
        print(f"Ray dashboard: {executor.dashboard_url}")
    candidates = _Candidates(config, probe, executor, log=log, seen={
        _key(r): r for r in logged if "run" in r and "duplicate_of" not in r and "hash" in r})

    for generation in range(first, config.outer_steps):
        # 1. Propose: the generation's Meta-Rewards (a resumed run redoes its saved ones).
        if resumed is not None:
            proposals, resumed = resumed, None
        else:
            proposals = proposer.propose(config.population)
            save_state(out, generation, proposer, proposals, result)
            done = {}

        # 2. Train and score: each reward's inner GRPO run, from the base model or (warm
        #    starts) the best policy so far, continuing through the data where it stopped.
        start_model = _warm_start_model(config, result, generation)
        data_offset = generation * inner_steps if start_model is not None else 0
        progress = (GenerationProgress(config, generation, len(proposals), len(done),
                                       result.best_score, result.zero_advantage_generations)
                    if config.progress else None)
        try:
            records = candidates.score(generation, proposals, start_model, data_offset, done,
                                       progress)
        finally:
            if progress is not None:
                progress.close()
        for record in records:  # in index order, so ties go the same way however runs finish
            if record["status"] == Status.SCORED and record["score"] > result.best_score:
                result.best_expr, result.best_score = record["expr"], record["score"]
                result.best_checkpoint = record["checkpoint"]

        # 3. Learn: the proposer's update from the scores of the candidates that ran.
        kept = [i for i, r in enumerate(records) if r["status"] != Status.FAILED]
        scores = [float(records[i]["score"]) for i in kept]
        stats: dict[str, float] | None = {}
        if kept and learns:
            stats = cast(LearningProposer, proposer).observe(
                [proposals[i] for i in kept], scores,
                [records[i]["status"] != Status.INVALID for i in kept])
        elif kept:
            proposer.observe([proposals[i] for i in kept], scores)

        # 4. Record: the generation's statistics, the summary, the curves.
        advantage = _advantage_stats(scores)
        result.zero_advantage_generations += advantage["zero_advantage"]
        result.candidates.extend(records)
        result.generations.append({
            "generation": generation,
            "mean_score": float(np.mean(scores)) if scores else 0.0,
            "max_score": max(scores) if scores else 0.0,
            "best_so_far": result.best_score if result.best_expr is not None else 0.0,
            "valid_fraction": sum(bool(r.get("valid")) for r in records) / len(records),
            "constant": sum(r["status"] == Status.CONSTANT for r in records),
            "failed": len(records) - len(kept),
            **advantage,
            **(stats or {}),
        })
        write_report(config, result, family)

    # The end: the trained Meta-Optimizer, and the best policy's headline on the eval sets.
    if learns:
        cast(LearningProposer, proposer).save(out / "meta-optimizer")
    if evaluate is not None and result.best_checkpoint is not None:
        # The best reward as its candidate compiled it (compiled here only when a resumed
        # run found it before this process started), for its records and its retrained run.
        best = None if result.best_expr is None else (
            candidates.compiled.get(result.best_expr)
            or compile_inner_reward(config, result.best_expr))
        result.headline = {"best": executor.call(evaluate, result.best_checkpoint, best,
                                                 out / "results", config.method)}
        if config.warm_starts and best is not None:
            # A warm-started policy owes its score partly to its ancestors: the best reward
            # is also trained from the base model alone.
            job = InnerJob(0, best, str(out / "retrained-best"))
            outcome = next(iter(executor.run(config, [job])))
            if outcome.result is None:
                result.headline["retrained_from_base"] = {"error": outcome.errors[-1]}
            else:
                retrained = outcome.result
                result.headline["retrained_from_base"] = {
                    "validation": retrained.score,
                    **executor.call(evaluate, str(retrained.checkpoint), best,
                                    out / "results" / "retrained-from-base",
                                    f"{config.method} (retrained)"),
                }
    write_summary(config, result, family)
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
              if c["generation"] == generation - 1 and c.get("status") == Status.SCORED]
    # Records are in completion order after a resume: break ties by index, not by order.
    best = max(scored, key=lambda c: (c["score"], -c["index"]), default=None)
    return best["checkpoint"] if best is not None else None
