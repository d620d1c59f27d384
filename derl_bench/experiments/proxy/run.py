"""Running the proxy benchmark: the base policy, each method and seed's reward-discovery run
(in a process pool), the merge with an earlier run, and the board's records and evidence."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from derl_bench.experiments.evidence import (
    MECHANISM,
    comparisons,
    generation_table,
    planted_target,
)
from derl_bench.experiments.proxy.config import (
    ENV_ID,
    HAND_MADE,
    LEVELS,
    RERUN_FREE,
    WARM_STARTED,
    BaseModelSpec,
    ProxyConfig,
    config_json,
    proxy_methods,
    search_methods,
    slug,
)
from derl_bench.experiments.proxy.report import (
    EVIDENCE,
    FIGURES,
    summarize,
    summary_markdown,
    write_figures,
)
from derl_bench.experiments.rescore import (
    fresh_endpoint,
    late_rewards,
    pick,
    rescore_seeds,
    top_rewards,
)
from derl_bench.files import write_json_atomic, write_jsonl_atomic, write_text_atomic
from derl_bench.reward import env_primitives

if TYPE_CHECKING:
    from derl_bench.family import Family
    from derl_bench.meta.config import MetaConfig


def base_model(path: Path, spec: BaseModelSpec, env_id: str, family: Family) -> Path:
    """The base policy of ``env_id`` (of ``family``, resolved by the caller: a
    :class:`ProxyConfig`'s) at ``path``, fine-tuned once and reused while ``spec`` is
    unchanged (nor, but for Arithmetic, what ``env_id``'s card says of it)."""
    from derl_bench.policies.threads import alone_threads
    from derl_bench.sft import SFTConfig, fine_tune

    marker = path / "base_model_spec.json"
    # Arithmetic's marker predates the env id: it keeps its form, so its base is not rebuilt.
    recipe = asdict(spec) if env_id == ENV_ID else {
        **asdict(spec), "env_id": env_id,
        "card": _card_recipe(family)}
    wanted = json.dumps(recipe, sort_keys=True)
    if marker.is_file() and marker.read_text() == wanted:
        return path
    if path.exists():
        shutil.rmtree(path)
    # Every experiment fine-tunes its base before its workers start, so it has the cores.
    fine_tune(SFTConfig(env_id=env_id, output=str(path), steps=spec.steps,
                        learning_rate=spec.learning_rate, batch_size=spec.batch_size,
                        format_dropout=spec.format_dropout, seed=spec.seed,
                        num_threads=alone_threads()), family)
    marker.write_text(wanted)
    return path


def _card_recipe(family: Family) -> dict[str, Any]:
    """What of the env's card shapes its base policy: the demonstrations' mixture of modes (the
    ``base_policy`` block) and the problems (the train split), so that a changed card rebuilds
    the base."""
    card = family.card
    return {"base_policy": card.get("base_policy"),
            "train": (card.get("splits") or {}).get("train")}


def meta_config_for(config: ProxyConfig, method: str, seed: int, model: str,
                    out: Path) -> MetaConfig:
    """The reward-discovery recipe of one method and seed (a hand-made reward is ``fixed``)."""
    from derl_bench.meta.config import meta_config_from_dict
    from derl_bench.meta.methods import fixed, method_named

    base = WARM_STARTED.get(method, method)
    searched = base in search_methods()
    values: dict[str, Any] = dict(
        name=f"{method}-s{seed}", method=base if searched else fixed.METHOD.name,
        reward=HAND_MADE.get(base), warm_start=method in WARM_STARTED,
        inner={**config.inner, "model": model},
        outer_steps=config.outer_steps,
        population=config.population, validation_episodes=config.validation_episodes,
        seed=seed, optimizer_sft_examples=config.optimizer_sft_examples,
        optimizer_sft_steps=config.optimizer_sft_steps, eval_levels=list(LEVELS),
        # DERL, DERL-pop and the frozen control of one seed share one cold start.
        optimizer_cache=str(Path(config.output) / "meta-optimizer-cache"),
        eval_limit=config.eval_limit, output_dir=str(out), progress=False,
        # The benchmark spreads whole runs (method x seed) over its workers; each runs in-process.
        executor="local")
    if searched and method_named(base).learns:
        recipe = dict(config.optimizer_recipe)
        values["inner"] = {**values["inner"], **recipe.pop("inner", {})}
        values.update(recipe)
    return meta_config_from_dict(values, config.family)


CANDIDATE_FIELDS = ("generation", "index", "expr", "status", "score", "structure", "primitives",
                    "inner_seed")
"""What the results keep of each candidate (the run folder keeps the rest)."""


def run_job(config: ProxyConfig, method: str, seed: int, model: str) -> dict[str, Any]:
    """One method and seed: its validation curve and its final policy's eval figures."""
    from derl_bench.evaluation.batched import headline_evaluator
    from derl_bench.meta import run_meta

    out = Path(config.output) / "runs" / f"{slug(method)}-s{seed}"
    meta = meta_config_for(config, method, seed, model, out)
    evaluate = headline_evaluator(config.adapter, LEVELS,
                                  limit=config.eval_limit,
                                  max_new_tokens=int(config.inner["max_new_tokens"]),
                                  model_label="tiny-sft")
    started = time.perf_counter()
    found = run_meta(meta, evaluate=evaluate)
    candidates = [{k: c.get(k) for k in CANDIDATE_FIELDS} | {"repeat": "duplicate_of" in c}
                  for c in found.candidates]
    rescored = rescore_run(config, method, model, candidates, out / "rescore")
    picked = rescored.get("pick", {}).get("expr", found.best_expr)
    retrained = (retrain_picked(config, model, picked, seed, out / "picked")
                 if config.retrain_seeds and picked is not None else None)
    row = {"picked": retrained, "pick_rule": config.pick, "rescored": rescored,
           "validation_by_generation": [g["best_so_far"] for g in found.generations],
           "generation_best": [g["max_score"] for g in found.generations],
           "generation_mean": [g["mean_score"] for g in found.generations],
           "best_expr": found.best_expr, "best_validation": found.best_score,
           "eval": found.headline.get("best", {}),
           "retrained_from_base": found.headline.get("retrained_from_base"),
           "inner_runs": sum(c.get("status") == "scored" and "duplicate_of" not in c
                             for c in found.candidates),
           "failed_inner_runs": sum(c.get("status") == "failed" for c in found.candidates),
           "zero_advantage_generations": found.zero_advantage_generations,
           # The per-generation evidence: what was proposed, what it scored, how the proposer
           # moved (advantages, KL), so the board can show the mechanism, not only the end.
           "generations": found.generations,
           "candidates": candidates}
    return {"method": method, "seed": seed, "seconds": round(time.perf_counter() - started, 1),
            **row}


def score_rewards(config: ProxyConfig, model: str, exprs: list[str], seed: int,
                  out: Path) -> list[float]:
    """Train one inner run per reward of ``exprs`` with inner seed ``seed`` (together, as one
    population) and return each policy's validation score; the runs' folders are removed."""
    from derl_bench.meta.inner import (
        InnerSpec,
        compile_inner_reward,
        train_and_score_population,
    )

    meta = meta_config_for(config, "random", seed, model, out)
    runs = [InnerSpec(compile_inner_reward(meta, expr), out / f"r{i:03d}", None, 0, seed)
            for i, expr in enumerate(exprs)]
    try:
        return [r.score for r in train_and_score_population(meta, runs)]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def rescore_run(config: ProxyConfig, method: str, model: str,
                candidates: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """What one method and seed re-scores on fresh seeds (:mod:`~derl_bench.experiments.
    rescore`): under the ``"rescore"`` pick its ``pick_top`` best rewards (when there is a
    choice to make), and for the mechanism's methods the rewards proposed in generations
    ``endpoint_from`` on. Each reward's fresh scores, the pick and the re-scored endpoint."""
    generations = range(min(config.endpoint_from, config.outer_steps - 1), config.outer_steps)
    top = top_rewards(candidates, config.pick_top)
    exprs: list[str] = []
    if config.pick == "rescore" and config.retrain_seeds and len(top) > 1:
        exprs += [t["expr"] for t in top]
    if config.rescore_seeds and method in MECHANISM:
        exprs += late_rewards(candidates, generations)
    exprs = list(dict.fromkeys(exprs))
    seeds = rescore_seeds(config.rescore_seeds) if exprs else []
    size = config.population
    scores: dict[str, list[float]] = {e: [] for e in exprs}
    for seed in seeds:
        for i in range(0, len(exprs), size):
            chunk = exprs[i:i + size]
            for expr, score in zip(chunk, score_rewards(config, model, chunk, seed,
                                                        out / f"s{seed}-{i // size:03d}"),
                                   strict=True):
                scores[expr].append(score)
    fresh = {e: sum(v) / len(v) for e, v in scores.items()}
    out_row: dict[str, Any] = {"seeds": seeds, "scores": scores}
    if config.pick == "rescore" and top:
        chosen = pick(top, fresh) if len(top) > 1 and config.retrain_seeds else top[0]["expr"]
        out_row["pick"] = {"rule": "rescore", "top": [
            {**t, "fresh": scores.get(t["expr"])} for t in top], "expr": chosen}
    if config.rescore_seeds and method in MECHANISM:
        out_row["endpoint"] = fresh_endpoint(candidates, generations, fresh)
        out_row["generations"] = [generations.start, generations.stop - 1]
    return out_row


RETRAIN_OFFSET = 2_000
"""Where the fresh seeds of the picked rewards' re-training start (the planted check's pilot
and confirmation use 0 and 1,000): search seed ``s`` re-trains with
``fresh_seeds(retrain_seeds, RETRAIN_OFFSET + 100 * s)``."""


def retrain_picked(config: ProxyConfig, model: str, expr: str, seed: int, out: Path,
                   ) -> dict[str, Any]:
    """The primary endpoint of one method and seed: the reward it picked, trained again from
    the base on ``config.retrain_seeds`` fresh seeds (one population), each policy scored on
    validation and evaluated greedily on every level; the mean over the re-trains per level."""
    from derl_bench.evaluation.batched import evaluate_llm
    from derl_bench.meta.inner import (
        InnerSpec,
        compile_inner_reward,
        train_and_score_population,
    )
    from derl_bench.meta.search import fresh_seeds

    seeds = fresh_seeds(config.retrain_seeds, RETRAIN_OFFSET + 100 * seed)
    meta = meta_config_for(config, "random", seed, model, out)
    reward = compile_inner_reward(meta, expr)  # once, for every re-train
    runs = [InnerSpec(reward, out / f"r{i}", None, 0, s) for i, s in enumerate(seeds)]
    try:
        results = train_and_score_population(meta, runs)
        levels: dict[str, list[float]] = {level: [] for level in LEVELS}
        for result in results:
            for level in LEVELS:
                record, _ = evaluate_llm(config.adapter, level,
                                         str(result.checkpoint), limit=config.eval_limit,
                                         max_new_tokens=int(config.inner["max_new_tokens"]),
                                         checkpoint="final (the picked reward re-trained)")
                levels[level].append(float(record["results"]["success_rate"]["mean"]))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"expr": expr, "seeds": seeds, "validation": [r.score for r in results],
            **{level: {"scores": v, "mean": round(sum(v) / len(v), 4)}
               for level, v in levels.items()}}


def worker_init() -> None:
    """Set up a pool worker of the benchmark."""
    # Every worker is one of several processes on the machine: one intra-op thread each.
    os.environ["DERL_BENCH_WORKERS"] = os.environ.get("DERL_BENCH_WORKERS", "2")


def base_figures(model: str, config: ProxyConfig) -> dict[str, Any]:
    """The base policy's strict and lenient success per level (greedy, like every method)."""
    from derl_bench.evaluation.batched import evaluate_llm

    out = {}
    for level in LEVELS:
        record, extra = evaluate_llm(config.adapter, level,
                                     model, limit=config.eval_limit,
                                     max_new_tokens=int(config.inner["max_new_tokens"]),
                                     checkpoint="the base policy: the SFT warm start, no GRPO")
        out[level] = {"mean": record["results"]["success_rate"]["mean"],
                      "n": record["results"]["n"], **extra}
    return out


def run_proxy(config: ProxyConfig, records: Path | None = None,
              log: Any = print) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); returns what ``results.json`` holds."""
    from derl_bench.grpo.config import TINY_MODEL
    from derl_bench.policies.loading import ModelNotFoundError, model_problem

    out = Path(config.output)
    for method in config.methods:  # a bad recipe fails here, not in a worker an hour later
        meta = meta_config_for(config, method, config.seeds[0], TINY_MODEL, out / "runs" / "check")
        # a model the optimizer recipe names (its own, or the inner runs')
        for model in dict.fromkeys([meta.inner.model, meta.optimizer.model]):
            problem = None if model == TINY_MODEL else model_problem(model)
            if problem:
                raise ModelNotFoundError(problem)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    log(f"base policy: tiny model + SFT ({config.base_spec.steps} steps) ...")
    model = str(base_model(out / "base-model", config.base_spec, config.env_id, config.family))
    base = base_figures(model, config)
    # Hand-made rewards train every one of their slots, so their runs are the longest: start
    # them first, so that no worker is left alone with one at the end.
    jobs = sorted(((method, seed) for seed in config.seeds for method in config.methods),
                  key=lambda job: WARM_STARTED.get(job[0], job[0]) not in HAND_MADE)
    # A run killed half way keeps the (method, seed) runs it finished: run again with the same
    # settings, it takes their rows instead of training them again.
    rows = [row for row in (_finished_row(out, config, m, s) for m, s in jobs) if row]
    if rows:
        log(f"{len(rows)} runs finished before with the same settings: kept")
    kept = {(r["method"], r["seed"]) for r in rows}
    jobs = [job for job in jobs if job not in kept]
    log(f"{len(jobs)} runs ({len(config.methods)} methods x {len(config.seeds)} seeds), "
        f"{config.workers} at a time; search budget {config.budget} inner runs")

    def finished(row: dict[str, Any]) -> None:
        write_json_atomic(_row_path(out, row["method"], row["seed"]),
                          {"settings": _settings(config), "row": row})
        rows.append(row)
        log(_progress(row))

    if config.workers == 1:
        for method, seed in jobs:
            finished(run_job(config, method, seed, model))
    else:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(config.workers, mp_context=context,
                                                    initializer=worker_init) as pool:
            futures = [pool.submit(run_job, config, m, s, model) for m, s in jobs]
            for future in concurrent.futures.as_completed(futures):
                finished(future.result())
    wall = round(time.perf_counter() - started, 1)
    earlier = _earlier_run(out, config, records)
    if earlier is not None:
        # runs made before with the same settings stay in the results: other methods, other
        # seeds (a board grows run by run, from this folder or from the board's evidence)
        here = {(r["method"], r["seed"]) for r in rows}
        rows += [r for r in earlier["runs"] if (r["method"], r["seed"]) not in here]
        config = replace(config,
                         methods=[m for m in proxy_methods() if m in {r["method"] for r in rows}],
                         seeds=sorted({int(r["seed"]) for r in rows}))
        wall = round(wall + earlier["wall_time_s"], 1)
    order = proxy_methods()
    rows.sort(key=lambda r: (order.index(r["method"]), r["seed"]))
    primitives = list(env_primitives(config.env_id, config.family).names)
    table = generation_table(rows, primitives)
    result = {"config": config_json(config), "env_id": config.env_id, "wall_time_s": wall,
              "base": base, "summary": summarize(rows, base, config.endpoint_from),
              "comparisons": comparisons(rows, config.methods, config.endpoint_from),
              "generations": table, "runs": rows}
    write_json_atomic(out / "results.json", result)
    write_figures(result, out, primitives,
                  None if records is None else planted_target(records / EVIDENCE))
    if records is not None:
        copy_records(rows, out, records)
        # Every JSON file beside the records is read as a submission: the evidence has its own
        # folder.
        evidence = records / EVIDENCE
        evidence.mkdir(parents=True, exist_ok=True)
        for name in FIGURES:
            shutil.copyfile(out / name, evidence / name)
        write_evidence(result, records)
    return result


def write_evidence(result: dict[str, Any], records: Path) -> None:
    """A result's evidence into a board folder (every generation, every proposal, every run's
    figures: ``evidence/generations.json``, ``candidates.jsonl`` and :data:`RUNS`) and the
    ``summary.md`` rendered from it."""
    evidence = records / EVIDENCE
    evidence.mkdir(parents=True, exist_ok=True)
    rows = result["runs"]
    write_json_atomic(evidence / "generations.json", {
        "config": result["config"], "table": result["generations"],
        "runs": [{k: r[k] for k in ("method", "seed", "generation_mean",
                                    "generation_best", "generations")} for r in rows]})
    write_jsonl_atomic(evidence / "candidates.jsonl", [
        {"method": r["method"], "seed": r["seed"], **c}
        for r in rows for c in r.get("candidates", [])])
    write_json_atomic(evidence / RUNS, runs_evidence(result))
    write_text_atomic(records / "summary.md", summary_markdown(result, records))


RUNS = "runs.json"
"""The board's per-run evidence: every number its summary states that the generations and
candidates do not hold (:func:`runs_evidence`)."""


def runs_evidence(result: dict[str, Any]) -> dict[str, Any]:
    """What ``evidence/runs.json`` keeps of a result: the config, the base policy's figures,
    the wall time and, per run, its seconds, its best and picked rewards, each picked
    re-train's score per level and seed, the pick's and the mechanism's re-scores and the
    selected policy's figures (its record's path left out: it is a local run folder). With
    ``generations.json`` it is enough to rebuild ``summary.md`` exactly
    (:mod:`derl_bench.experiments.recompute`)."""
    runs = []
    for row in result["runs"]:
        kept = {k: v for k, v in row.items() if k not in ("generations", "candidates")}
        kept["eval"] = {lvl: {k: v for k, v in figures.items() if k != "record"}
                        for lvl, figures in row["eval"].items()}
        runs.append(kept)
    return {"config": result["config"], "env_id": result["env_id"],
            "wall_time_s": result["wall_time_s"], "base": result["base"], "runs": runs}


def _progress(row: dict[str, Any]) -> str:
    figures = "  ".join(f"{lvl} {row['eval'][lvl]['mean']:.3f}" for lvl in LEVELS
                        if lvl in row["eval"])
    return (f"  {row['method']:<16} seed {row['seed']}  validation "
            f"{row['best_validation']:.3f}  {figures}  ({row['seconds']:.0f} s)")


def copy_records(rows: list[dict[str, Any]], out: Path, records: Path) -> list[Path]:
    """Copy every run's result records into a board folder, named by method, seed and level
    (the record's ``method`` names the seed, so the board shows one row per run), and list
    them as run here."""
    from derl_bench.evaluation.record import mark_run_here

    records.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows:
        for level, figures in row["eval"].items():
            if "record" not in figures:  # a run rebuilt from the board's evidence: already there
                continue
            record = json.loads(Path(figures["record"]).read_text())
            record["method"] = f"{row['method']} (seed {row['seed']})"
            path = records / f"{slug(row['method'])}-s{row['seed']}-{level}.json"
            write_json_atomic(path, record)
            written.append(path)
    if written:
        mark_run_here(records.parent, written)
    return written


def _settings(config: ProxyConfig | dict[str, Any]) -> dict[str, Any]:
    """What two runs must share for their rows to be one result (all but :data:`RERUN_FREE`)."""
    found = config_json(config) if isinstance(config, ProxyConfig) else config
    return {k: v for k, v in found.items() if k not in RERUN_FREE}


def _row_path(out: Path, method: str, seed: int) -> Path:
    return out / "runs" / f"{slug(method)}-s{seed}" / "row.json"


def _json_or_none(path: Path) -> Any:
    """What the JSON file ``path`` holds; ``None`` when it is missing or unreadable (a run
    killed while writing it leaves it so)."""
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except ValueError:
        return None


def _finished_row(out: Path, config: ProxyConfig, method: str, seed: int,
                  ) -> dict[str, Any] | None:
    """The row a (method, seed) run with the same settings finished in ``out``, if any."""
    kept = _json_or_none(_row_path(out, method, seed))
    return kept["row"] if kept and kept.get("settings") == _settings(config) else None


def _earlier_run(out: Path, config: ProxyConfig, records: Path | None = None,
                 ) -> dict[str, Any] | None:
    """The result an earlier run with the same settings left: ``results.json`` in ``out``,
    else the evidence of the board ``records`` (its committed runs, rebuilt by
    :func:`evidence_result`). A run of further methods or seeds adds its rows to it instead of
    replacing it."""
    earlier = _json_or_none(out / "results.json")
    if earlier is None and records is not None:
        earlier = evidence_result(records)
    if earlier is None or _settings(earlier.get("config", {})) != _settings(config):
        return None
    return earlier


def evidence_result(board: Path) -> dict[str, Any] | None:
    """A board's runs rebuilt from its evidence (``evidence/runs.json``, ``generations.json``
    and ``candidates.jsonl``): the config, the base policy's figures, the wall time, the
    generation table and every run's row, as ``results.json`` holds them but for the local
    paths of the runs' records; ``None`` for a board without ``runs.json``."""
    evidence = board / EVIDENCE
    if not (evidence / RUNS).is_file() or not (evidence / "generations.json").is_file():
        return None
    runs = json.loads((evidence / RUNS).read_text())
    generations = json.loads((evidence / "generations.json").read_text())
    per_run = {(g["method"], g["seed"]): g for g in generations["runs"]}
    proposals: dict[tuple[str, int], list[dict[str, Any]]] = {}
    candidates = evidence / "candidates.jsonl"
    for line in (candidates.read_text().splitlines() if candidates.is_file() else []):
        c = json.loads(line)
        proposals.setdefault((c.pop("method"), c.pop("seed")), []).append(c)
    rows = [{**r, **per_run[r["method"], r["seed"]],
             "candidates": proposals.get((r["method"], r["seed"]), [])} for r in runs["runs"]]
    return {"config": runs["config"], "env_id": runs["env_id"],
            "wall_time_s": runs["wall_time_s"], "base": runs["base"],
            "generations": generations["table"], "runs": rows}


__all__ = ["CANDIDATE_FIELDS", "RETRAIN_OFFSET", "RUNS", "base_figures", "base_model",
           "copy_records", "evidence_result", "meta_config_for", "rescore_run", "retrain_picked",
           "run_job", "run_proxy", "runs_evidence", "score_rewards", "worker_init",
           "write_evidence"]
