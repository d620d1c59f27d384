"""Running the proposer check: every (rule, proposer, cold start, seed) unit, side by side when
asked, and the files of :func:`run_check`."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from derl_bench.experiments.proposer_check.config import CheckConfig, learner, proposer_runs
from derl_bench.experiments.proposer_check.report import (
    endpoint,
    label,
    plot,
    summarize,
    summary_markdown,
)
from derl_bench.experiments.proposer_check.rules import OPTIMUM, Rule, observed, parse_rule
from derl_bench.family import resolve_family
from derl_bench.files import write_text_atomic
from derl_bench.grpo.config import TrainConfig
from derl_bench.meta.config import MetaConfig
from derl_bench.meta.probe import ProbeSet, probe_set
from derl_bench.meta.search import Proposer
from derl_bench.reward import MetaReward, MetaRewardError, compile_reward


def _proposer(config: CheckConfig, name: str, cold_start: str | None, seed: int,
              rule: Rule, workdir: Path) -> Proposer:
    from derl_bench.meta.loop import make_proposer
    from derl_bench.meta.optimizer import MetaOptimizer

    outer = config.outer
    worst = observed(-1.0, rule, config, np.random.default_rng(0))
    meta = MetaConfig(
        name="proposer-check", method=name, seed=seed, population=config.population,
        inner=TrainConfig(env_id=config.env_id, seed=seed), max_depth=config.max_depth,
        optimizer=replace(outer, model=str(_cache(config) / "meta-optimizer-init")),
        invalid_score=worst, output_dir=str(workdir), progress=False, executor="local")
    proposer = make_proposer(meta, config.env_id, cold_start=False)
    if learner(name) and cold_start is not None and outer.sft_steps:
        # One cold start per corpus, shared by every seed (see the package docstring).
        cast(MetaOptimizer, proposer).cold_start(outer.sft_examples, outer.sft_steps, seed=0,
                                                 corpus=cold_start, cache=_cache(config))
    return proposer


def _cache(config: CheckConfig) -> Path:
    return Path(config.cache) if config.cache else Path(config.output) / "cache"


def _compiled(expr: str, env_id: str, cache: dict[str, MetaReward | None],
              ) -> MetaReward | None:
    if expr not in cache:
        try:
            cache[expr] = compile_reward(expr, env=env_id)
        except MetaRewardError:
            cache[expr] = None
    return cache[expr]


def run_one(config: CheckConfig, rule: Rule, name: str, cold_start: str | None, seed: int,
            probe: ProbeSet, workdir: Path) -> list[dict[str, Any]]:
    """One proposer, rule, cold start and seed: a row per generation."""
    proposer = _proposer(config, name, cold_start, seed, rule, workdir)
    rng = np.random.default_rng([seed, config.rules.index(rule.name)])
    compiled: dict[str, MetaReward | None] = {}
    scores_cache: dict[str, float] = {}
    rows = []
    for generation in range(config.generations):
        proposals = proposer.propose(config.population)
        rewards = [None if p.extra.get("complete") is False
                   else _compiled(p.expr, config.env_id, compiled) for p in proposals]
        scores = []
        for reward in rewards:
            key = reward.hash if reward is not None else ""
            if key not in scores_cache:
                scores_cache[key] = rule.score(reward, probe)
            scores.append(scores_cache[key])
        seen = [observed(s, rule, config, rng) for s in scores]
        stats = proposer.observe(proposals, seen) or {}
        valid = [r for r in rewards if r is not None]
        rows.append({
            "rule": rule.name, "proposer": name, "cold_start": cold_start, "seed": seed,
            "generation": generation, "mean_score": float(np.mean(scores)),
            "max_score": float(np.max(scores)),
            "optimum_share": float(np.mean([s >= OPTIMUM for s in scores])),
            "valid_share": len(valid) / len(proposals),
            "distinct_share": len({r.hash for r in valid}) / len(proposals),
            "observed_mean": float(np.mean(seen)),
            "exprs": [p.expr for p in proposals], "scores": [round(s, 6) for s in scores],
            **{k.removeprefix("meta/"): float(v) for k, v in stats.items()},
        })
    return rows


def run_check(config: CheckConfig, log: Any = print) -> dict[str, Any]:
    """Run the check (module docstring); writes and returns what ``results.json`` holds."""
    from derl_bench.policies import TinyModelSpec, init_tiny_model
    from derl_bench.policies.threads import configure_threads

    rules = [parse_rule(r, config.env_id) for r in config.rules]  # before anything is written
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    configure_threads()
    started = time.perf_counter()
    init = _cache(config) / "meta-optimizer-init"
    if not (init / "config.json").exists():
        init_tiny_model(init, TinyModelSpec(seed=7919), overwrite=True)
    probe = probe_set(config.env_id, resolve_family(config.env_id), config.probe_problems)
    log(f"probe set: {len(probe)} primitive vectors ({probe.source}); {len(rules)} rules x "
        f"{len(proposer_runs(config))} proposer runs x {len(config.seeds)} seeds, "
        f"{config.generations} generations x {config.population}")
    for corpus in config.cold_starts:  # fine-tune each shared cold start once, up front
        learners = [name for name in config.proposers if learner(name)]
        if learners:
            _proposer(config, learners[0], corpus, 0, rules[0], out)
    units = [(rule, name, cold, seed) for rule in rules for name, cold in proposer_runs(config)
             for seed in config.seeds]
    done: dict[tuple[str, str, str | None, int], list[dict[str, Any]]] = {}
    if config.workers > 1:
        import concurrent.futures
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(config.workers, mp_context=context,
                                                    initializer=_worker_init) as pool:
            futures = {pool.submit(run_one, config, *unit[:3], unit[3], probe, out):
                       (unit[0].name, *unit[1:]) for unit in units}
            for future in concurrent.futures.as_completed(futures):
                done[futures[future]] = future.result()
    else:
        for rule, name, cold, seed in units:
            done[(rule.name, name, cold, seed)] = run_one(config, rule, name, cold, seed,
                                                          probe, out)
    rows: list[dict[str, Any]] = []
    for rule in rules:
        for name, cold in proposer_runs(config):
            mine = [row for seed in config.seeds for row in done[(rule.name, name, cold, seed)]]
            rows += mine
            window = endpoint(mine, config)
            log(f"  {rule.name:<28} {label(name, cold):<24} endpoint "
                f"{np.mean(list(window.values())):+.3f}")
    result = {"config": json.loads(json.dumps(asdict(config))), "probe": {
        "size": len(probe), "source": probe.source},
        "wall_time_s": round(time.perf_counter() - started, 1),
        "summary": summarize(rows, config), "rows": rows}
    write_text_atomic(out / "results.json", json.dumps(result, indent=1) + "\n")
    write_text_atomic(out / "summary.md", summary_markdown(result))
    plot(result, out / "curves.png")
    return result


def _worker_init() -> None:
    # Each worker is one of several processes on the machine: one intra-op thread each.
    from derl_bench.policies.threads import configure_threads

    configure_threads(num_threads=1)
