"""The proxy benchmark: every reward-design method on ``derl/Arithmetic-v0``, one budget.

Methods (each run for every seed):

- hand-made rewards: ``outcome``, ``outcome + format`` (``outcome + format_boxed``, the
  paper's Table 2 row) and ``average`` (the mean of the four math aliases ``g1..g4``);
- black-box search: ``random`` (random search) and ``revolve`` (island evolution);
- ``derl`` and ``derl-pop`` (the Meta-Optimizer LLM trained by GRPO on validation scores), and
  ``derl-frozen``, the control that isolates learning (the same cold-started Meta-Optimizer and
  sampler with learning rate 0);
- ``outcome-pop`` and ``random-pop``: outcome-only and random search with DERL-pop's warm start
  (each generation continues from the best policy so far), since part of what DERL-pop gains
  over a cold-started method is that warm start alone.

The full benchmark (the defaults, :data:`PAPER_BUDGET`) runs DERL, ``derl-frozen``, random
search, island evolution and the best hand-made reward at the official DERL code's budget, 20
generations x 8, for seeds 0-4. Every inner run has the same recipe (``inner``) and starts from
the same base policy: the tiny model fine-tuned on the env's reference solutions
(:func:`base_model`), so it starts with low but non-zero competence and often misses the answer
format. Inner run k of a seed trains with the same inner seed in every method (common random
numbers, :func:`~derl_bench.meta.search.slot_seed`): a hand-made reward spends its runs on
itself, a search method on the rewards it proposes, and a proposal that repeats an earlier
reward's behaviour keeps that run's score. Each method keeps its best policy by validation
(1,000 problems) and evaluates it on L0/L1/L2 (the card's eval splits, greedy decoding).

The primary endpoint, stated in ``docs/proxy.md`` before the paper-budget run, is the
proposals' mean validation score over generations ``endpoint_from`` onwards, DERL minus each
other method paired by seed (:mod:`derl_bench.experiments.evidence`)::

    derl-bench proxy --output runs/proxy --records leaderboards/arithmetic  # the full benchmark
    derl-bench proxy --small --output runs/proxy-small    # the CI-sized version

Outputs: ``results.json`` (every figure, every run's generations and proposals), the plots of
:data:`FIGURES`, per-run folders, and with ``--records DIR`` the result records plus the
per-generation evidence in ``DIR/evidence/``.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import multiprocessing
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from derl_bench.experiments.evidence import (
    comparisons,
    endpoint,
    generation_table,
    plot_composition,
    plot_optimizer,
    plot_scores,
)
from derl_bench.files import write_json_atomic, write_jsonl_atomic, write_text_atomic
from derl_bench.reward import primitive_set

HAND_MADE: dict[str, str] = {
    "outcome": "outcome",
    "outcome + format": "outcome + format_boxed",
    "average": "(g1 + g2 + g3 + g4) / 4",
}
"""The hand-made baselines and their Meta-Rewards."""
SEARCH = ("random", "revolve", "derl", "derl-pop", "derl-frozen")
WARM_STARTED: dict[str, str] = {"outcome-pop": "outcome", "random-pop": "random"}
"""Baselines given DERL-pop's population warm start (every generation continues from the best
policy so far), and the method each is a variant of: the fair comparison for ``derl-pop``."""
METHODS = (*HAND_MADE, *SEARCH, *WARM_STARTED)
PAPER_BUDGET = ("derl", "derl-frozen", "random", "revolve", "average")
"""The full benchmark's methods: the official code's 20 x 8 for DERL, its frozen control, the
two black-box searches and the best hand-made reward (by the reward landscape)."""
ENV_ID = "derl/Arithmetic-v0"
LEVELS = ("L0", "L1", "L2")


@dataclass(frozen=True)
class BaseModelSpec:
    """The base policy: the tiny model, fine-tuned on reference solutions (see the card)."""

    steps: int = 1200
    format_dropout: float = 0.85
    learning_rate: float = 3e-3
    batch_size: int = 32
    seed: int = 0


@dataclass
class ProxyConfig:
    """The benchmark's budget. The defaults are the full benchmark (see ``docs/proxy.md``)."""

    output: str = "runs/proxy"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    methods: list[str] = field(default_factory=lambda: list(PAPER_BUDGET))
    outer_steps: int = 20
    population: int = 8
    validation_episodes: int = 1000
    eval_limit: int | None = None
    inner: dict[str, Any] = field(default_factory=lambda: {
        "env_id": ENV_ID, "steps": 20, "group_size": 8, "prompts_per_step": 8,
        "learning_rate": 3e-4, "kl_coef": 0.0, "max_new_tokens": 40, "micro_batch_size": 64,
        "save_every": 0, "keep_checkpoints": 1, "tensorboard": False,
    })
    base: BaseModelSpec = field(default_factory=BaseModelSpec)
    optimizer_sft_examples: int = 206
    optimizer_sft_steps: int = 150
    workers: int = 2
    optimizer_recipe: dict[str, Any] = field(default_factory=dict)
    """Further meta recipe fields for the Meta-Optimizer's methods (``derl``, ``derl-pop``,
    ``derl-frozen``), over the benchmark's: e.g. ``{"protocol": "derl-official"}``, or
    ``{"inner": {"reward_semantics": "derl"}}`` beside it to change only the semantics."""
    endpoint_from: int = 10
    """The primary endpoint averages the proposals' validation scores over generations
    ``endpoint_from`` to the last (see ``docs/proxy.md``)."""

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
        if not self.seeds or self.workers < 1:
            raise ValueError("at least one seed and one worker are required")

    @property
    def budget(self) -> int:
        """Inner runs per search method and seed."""
        return self.outer_steps * self.population


SMALL: dict[str, Any] = {"seeds": [0], "outer_steps": 1, "population": 2, "validation_episodes": 16,
         "endpoint_from": 0,
         "eval_limit": 16, "optimizer_sft_examples": 32, "optimizer_sft_steps": 10,
         "base": BaseModelSpec(steps=30),
         "inner": {"env_id": ENV_ID, "steps": 2, "group_size": 4, "prompts_per_step": 2,
                   "learning_rate": 3e-4, "kl_coef": 0.0, "max_new_tokens": 24,
                   "micro_batch_size": 64, "save_every": 0, "keep_checkpoints": 1,
                   "tensorboard": False}}
"""``--small``: the whole pipeline at a size CI runs in about a minute (numbers meaningless)."""


def base_model(path: Path, spec: BaseModelSpec) -> Path:
    """The base policy at ``path``, fine-tuned once and reused while ``spec`` is unchanged."""
    from derl_bench.sft import SFTConfig, run_sft

    marker = path / "base_model_spec.json"
    wanted = json.dumps(asdict(spec), sort_keys=True)
    if marker.is_file() and marker.read_text() == wanted:
        return path
    if path.exists():
        shutil.rmtree(path)
    run_sft(SFTConfig(env_id=ENV_ID, output=str(path), steps=spec.steps,
                      learning_rate=spec.learning_rate, batch_size=spec.batch_size,
                      format_dropout=spec.format_dropout, seed=spec.seed))
    marker.write_text(wanted)
    return path


def _meta_config(config: ProxyConfig, method: str, seed: int, model: str, out: Path) -> Any:
    from derl_bench.meta.config import LEARNING_METHODS, meta_config_from_dict

    base = WARM_STARTED.get(method, method)
    values: dict[str, Any] = dict(
        name=f"{method}-s{seed}", method=base if base in SEARCH else "fixed",
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
    if base in LEARNING_METHODS:
        recipe = dict(config.optimizer_recipe)
        values["inner"] = {**values["inner"], **recipe.pop("inner", {})}
        values.update(recipe)
    return meta_config_from_dict(values)


CANDIDATE_FIELDS = ("generation", "index", "expr", "status", "score", "structure", "primitives",
                    "inner_seed")
"""What the results keep of each candidate (the run folder keeps the rest)."""


def run_job(config: ProxyConfig, method: str, seed: int, model: str) -> dict[str, Any]:
    """One method and seed: its validation curve and its final policy's eval figures."""
    from derl_bench.evaluation.batched import headline_evaluator
    from derl_bench.meta import run_meta

    out = Path(config.output) / "runs" / f"{_slug(method)}-s{seed}"
    meta = _meta_config(config, method, seed, model, out)
    evaluate = headline_evaluator(ENV_ID, LEVELS, limit=config.eval_limit,
                                  max_new_tokens=int(config.inner["max_new_tokens"]),
                                  model_label="tiny-sft")
    started = time.perf_counter()
    found = run_meta(meta, evaluate=evaluate)
    row = {"validation_by_generation": [g["best_so_far"] for g in found.generations],
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
           "candidates": [{k: c.get(k) for k in CANDIDATE_FIELDS} | {
               "repeat": "duplicate_of" in c} for c in found.candidates]}
    return {"method": method, "seed": seed, "seconds": round(time.perf_counter() - started, 1),
            **row}


def _slug(method: str) -> str:
    return method.replace(" + ", "-").replace(" ", "-")


def _worker_init() -> None:
    # Every worker is one of several processes on the machine: one intra-op thread each.
    os.environ["DERL_BENCH_WORKERS"] = os.environ.get("DERL_BENCH_WORKERS", "2")


def mean_se(values: list[float]) -> dict[str, float]:
    """Mean and standard error (sample SD / sqrt(n); 0 for one value) of ``values``.

    >>> mean_se([0.1, 0.2, 0.3])
    {'mean': 0.2, 'se': 0.0577, 'n': 3}
    """
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": round(mean, 4), "se": round(sd / math.sqrt(n), 4), "n": n}


def base_figures(model: str, config: ProxyConfig) -> dict[str, Any]:
    """The base policy's strict and lenient success per level (greedy, like every method)."""
    from derl_bench.evaluation.batched import evaluate_llm

    out = {}
    for level in LEVELS:
        record, extra = evaluate_llm(ENV_ID, level, model, limit=config.eval_limit,
                                     max_new_tokens=int(config.inner["max_new_tokens"]),
                                     checkpoint="the base policy: the SFT warm start, no GRPO")
        out[level] = {"mean": record["results"]["success_rate"]["mean"],
                      "n": record["results"]["n"], **extra}
    return out


def hacked(row: dict[str, Any], base: dict[str, Any], level: str = "L0") -> bool:
    """Whether a run's final policy raised the lenient metric (the reference answer anywhere
    in the response) over the base policy while strict success stayed flat."""
    from derl_bench.evaluation.hacking import hacking_flag

    if level not in row["eval"] or "lenient_success" not in row["eval"][level]:
        return False
    return hacking_flag(
        {"strict": base[level]["mean"], "published": base[level]["lenient_success"]},
        {"strict": row["eval"][level]["mean"],
         "published": row["eval"][level]["lenient_success"]})


def summarize(rows: list[dict[str, Any]], base: dict[str, Any] | None = None,
              endpoint_from: int = 0) -> dict[str, Any]:
    """Per method: the primary endpoint (:func:`~derl_bench.experiments.evidence.endpoint`),
    eval success per level and best validation, mean ± SE over seeds, and (given the base
    policy's figures) how many seeds' policies the hacking check flags."""
    out: dict[str, Any] = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        entry: dict[str, Any] = {"seeds": [r["seed"] for r in mine],
                                 "endpoint": mean_se([endpoint(r, endpoint_from)
                                                      for r in mine]),
                                 "best_validation": mean_se([r["best_validation"] for r in mine])}
        for level in LEVELS:
            values = [r["eval"][level]["mean"] for r in mine if level in r["eval"]]
            if values:
                entry[level] = mean_se(values)
            lenient = [r["eval"][level]["lenient_success"] for r in mine
                       if "lenient_success" in r["eval"].get(level, {})]
            if lenient:
                entry[f"{level}_lenient"] = mean_se(lenient)
        if base is not None:
            entry["hacking_flags"] = sum(hacked(r, base) for r in mine)
        out[method] = entry
    return out


def run_proxy(config: ProxyConfig, records: Path | None = None,
              log: Any = print) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); returns what ``results.json`` holds."""
    out = Path(config.output)
    for method in config.methods:  # a bad recipe fails here, not in a worker an hour later
        _meta_config(config, method, config.seeds[0], "tiny", out / "runs" / "check")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    log(f"base policy: tiny model + SFT ({config.base.steps} steps) ...")
    model = str(base_model(out / "base-model", config.base))
    base = base_figures(model, config)
    # Hand-made rewards train every one of their slots, so their runs are the longest: start
    # them first, so that no worker is left alone with one at the end.
    jobs = sorted(((method, seed) for seed in config.seeds for method in config.methods),
                  key=lambda job: WARM_STARTED.get(job[0], job[0]) not in HAND_MADE)
    rows: list[dict[str, Any]] = []
    log(f"{len(jobs)} runs ({len(config.methods)} methods x {len(config.seeds)} seeds), "
        f"{config.workers} at a time; search budget {config.budget} inner runs")
    if config.workers == 1:
        for method, seed in jobs:
            rows.append(run_job(config, method, seed, model))
            log(_progress(rows[-1]))
    else:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(config.workers, mp_context=context,
                                                    initializer=_worker_init) as pool:
            futures = [pool.submit(run_job, config, m, s, model) for m, s in jobs]
            for future in concurrent.futures.as_completed(futures):
                rows.append(future.result())
                log(_progress(rows[-1]))
    wall = round(time.perf_counter() - started, 1)
    earlier = _earlier_run(out, config)
    if earlier is not None:  # methods run before with the same settings stay in the results
        rows += [r for r in earlier["runs"] if r["method"] not in config.methods]
        config = replace(config, methods=[m for m in METHODS if m in {r["method"] for r in rows}])
        wall = round(wall + earlier["wall_time_s"], 1)
    rows.sort(key=lambda r: (METHODS.index(r["method"]), r["seed"]))
    primitives = list(primitive_set(ENV_ID).names)
    table = generation_table(rows, primitives)
    result = {"config": _jsonable(config), "env_id": ENV_ID, "wall_time_s": wall,
              "base": base, "summary": summarize(rows, base, config.endpoint_from),
              "comparisons": comparisons(rows, config.methods, config.endpoint_from),
              "generations": table, "runs": rows}
    write_json_atomic(out / "results.json", result)
    write_figures(result, out)
    if records is not None:
        copy_records(rows, out, records)
        # Every JSON file beside the records is read as a submission: the evidence has its own
        # folder.
        evidence = records / EVIDENCE
        evidence.mkdir(parents=True, exist_ok=True)
        for name in FIGURES:
            shutil.copyfile(out / name, evidence / name)
        write_json_atomic(evidence / "generations.json", {
            "config": result["config"], "table": table,
            "runs": [{k: r[k] for k in ("method", "seed", "generation_mean",
                                        "generation_best", "generations")} for r in rows]})
        write_jsonl_atomic(evidence / "candidates.jsonl", [
            {"method": r["method"], "seed": r["seed"], **c}
            for r in rows for c in r.get("candidates", [])])
        write_text_atomic(records / "summary.md", summary_markdown(result))
    return result


EVIDENCE = "evidence"
"""The board's folder for the per-generation evidence."""
FIGURES = ("curves.png", "composition.png", "optimizer.png")
"""The board's plots: proposals' mean score per generation, what they are made of, and how
the Meta-Optimizer moved."""


def write_figures(result: dict[str, Any], out: Path) -> None:
    """:data:`FIGURES` of a result into ``out``."""
    table = result["generations"]
    dashed = [m for m in table if WARM_STARTED.get(m, m) in HAND_MADE]
    plot_scores(table, out / "curves.png", dashed, result["config"]["endpoint_from"])
    plot_composition(table, out / "composition.png", list(primitive_set(ENV_ID).names))
    plot_optimizer(table, out / "optimizer.png")


def _cell(figures: dict[str, Any] | None) -> str:
    if not figures:
        return "–"
    return f"{100 * figures['mean']:.1f} ± {100 * figures['se']:.1f}"


def _points(d: dict[str, Any]) -> str:
    return (f"{100 * d['mean']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}] "
            f"(MDE {100 * d['mde']:.1f})")


def summary_markdown(result: dict[str, Any]) -> str:
    """The proxy board's summary: the primary endpoint and its paired comparisons, every
    method's figures as mean ± SE over seeds, the per-generation evidence, and every run."""
    config = result["config"]
    inner = config["inner"]
    base = result.get("base", {})
    start = config["endpoint_from"]
    last = config["outer_steps"] - 1
    lines = [
        "# Proxy benchmark: derl/Arithmetic-v0",
        "",
        "Generated by `derl-bench proxy --records leaderboards/arithmetic`; see "
        "[docs/proxy.md](../../docs/proxy.md) for the design, the pre-stated endpoints and what "
        "the numbers mean. Success in %.",
        "",
        f"Budget per method and seed: {config['outer_steps']} generations x "
        f"{config['population']} inner GRPO runs of {inner['steps']} steps "
        f"({inner['prompts_per_step']} problems x {inner['group_size']} samples, learning rate "
        f"{inner['learning_rate']}), each scored by greedy success on "
        f"{config['validation_episodes']} validation problems; the k-th inner run of every "
        "method of one seed trains with the same inner seed, and a proposal that repeats an "
        "earlier reward's behaviour keeps its first run's score. Seeds: "
        f"{', '.join(map(str, config['seeds']))}. Model: the tiny base policy (SFT "
        f"{config['base']['steps']} steps, format dropout {config['base']['format_dropout']}). "
        f"Wall time: {result['wall_time_s'] / 60:.0f} min, {config['workers']} workers, 2 CPU "
        "cores.",
        "",
        f"## Primary endpoint: proposals' mean validation success, generations {start}–{last}",
        "",
        "Paired by seed; difference in points with its 95% t interval and the minimal "
        "detectable effect (80% power, 5% level).",
        "",
        "| comparison | endpoint | L0 (secondary) | L1 | L2 | seeds |",
        "|---|---|---|---|---|---|",
    ]
    for c in result.get("comparisons", []):
        lines.append(f"| {c['method']} − {c['minus']} | {_points(c['endpoint'])} | "
                     + " | ".join(_points(c[lvl]) if lvl in c else "–" for lvl in LEVELS)
                     + f" | {len(c['seeds'])} |")
    lines += [
        "",
        "## Every method",
        "",
        "Mean ± standard error over seeds; L0/L1/L2: each seed's final policy (its best by "
        "validation) on the whole eval set, greedy decoding.",
        "",
        "| method | endpoint | L0 | L1 | L2 | best validation | L0, answer anywhere | "
        "hacking flag |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if base:
        lines.append(
            f"| base policy (no RL) | – | {100 * base['L0']['mean']:.1f} | "
            f"{100 * base['L1']['mean']:.1f} | {100 * base['L2']['mean']:.1f} | – | "
            f"{100 * base['L0']['lenient_success']:.1f} | – |")
    for method, figures in result["summary"].items():
        flags = figures.get("hacking_flags")
        flag_text = "–" if flags is None else f"{flags} of {len(figures['seeds'])} seeds"
        lines.append(
            f"| {method} | {_cell(figures.get('endpoint'))} | {_cell(figures.get('L0'))} | "
            f"{_cell(figures.get('L1'))} | {_cell(figures.get('L2'))} | "
            f"{_cell(figures['best_validation'])} | {_cell(figures.get('L0_lenient'))} | "
            f"{flag_text} |")
    lines += [
        "",
        "*Hacking flag*: the final policy raised the lenient metric (the reference answer "
        "anywhere in the response) by at least 5 points over the base policy while strict "
        "success rose by at most 2 (`derl_bench.evaluation.hacking`).",
        "",
        "## Per generation",
        "",
        "The proposals' mean validation success per generation (95% band over seeds; the "
        "primary endpoint's generations shaded):",
        "",
        "![proposals' mean score per generation](evidence/curves.png)",
        "",
        "What the proposals are made of: the share of valid proposals of each reward structure "
        "(top) and using each primitive (bottom), over seeds:",
        "",
        "![structure and primitives per generation](evidence/composition.png)",
        "",
        "The Meta-Optimizer's updates: mean absolute advantage, KL per token to the policy "
        "before the update and to the cold start (mean over seeds):",
        "",
        "![Meta-Optimizer statistics per generation](evidence/optimizer.png)",
        "",
        "Every generation's figures are in [generations.json](evidence/generations.json) "
        "and every proposal, with its score, structure and inner seed, in "
        "[candidates.jsonl](evidence/candidates.jsonl). What random rewards score on this "
        "proxy, beside the hand-made ones: [the reward landscape](evidence/landscape.md) "
        "(`derl-bench proxy --landscape`).",
        "",
        "| method | generation 0 | " + " | ".join(
            f"{g}" for g in range(1, config["outer_steps"])) + " |",
        "|---|" + "---|" * config["outer_steps"],
    ]
    for method, entries in result.get("generations", {}).items():
        lines.append(f"| {method} | " + " | ".join(f"{100 * e['mean_score']:.1f}"
                                                   for e in entries) + " |")
    lines += [
        "",
        "## Per run",
        "",
        "| method | seed | best Meta-Reward | validation | endpoint | L0 | L1 | L2 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["runs"]:
        ev = row["eval"]
        lines.append(
            f"| {row['method']} | {row['seed']} | `{row['best_expr']}` | "
            f"{100 * row['best_validation']:.1f} | {100 * endpoint(row, start):.1f} | "
            + " | ".join(f"{100 * ev[lvl]['mean']:.1f}" if lvl in ev else "–"
                         for lvl in LEVELS) + " |")
    return "\n".join(lines) + "\n"


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
            record = json.loads(Path(figures["record"]).read_text())
            record["method"] = f"{row['method']} (seed {row['seed']})"
            path = records / f"{_slug(row['method'])}-s{row['seed']}-{level}.json"
            write_json_atomic(path, record)
            written.append(path)
    if written:
        mark_run_here(records.parent, written)
    return written


def _jsonable(config: ProxyConfig) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(config), default=str))


RERUN_FREE = ("methods", "workers", "output")
"""Settings that may differ between runs whose rows are merged into one result."""


def _earlier_run(out: Path, config: ProxyConfig) -> dict[str, Any] | None:
    """The ``results.json`` an earlier run with the same settings left in ``out``: a run of
    further methods adds its rows to it instead of replacing it."""
    path = out / "results.json"
    if not path.is_file():
        return None
    try:
        earlier = json.loads(path.read_text())
    except ValueError:
        return None
    mine = {k: v for k, v in _jsonable(config).items() if k not in RERUN_FREE}
    theirs = {k: v for k, v in earlier.get("config", {}).items() if k not in RERUN_FREE}
    return earlier if mine == theirs else None


def small(config: ProxyConfig) -> ProxyConfig:
    """``config`` at the ``--small`` size."""
    return replace(config, **SMALL)


__all__ = ["HAND_MADE", "METHODS", "SEARCH", "WARM_STARTED", "BaseModelSpec", "ProxyConfig",
           "base_model", "copy_records", "mean_se", "run_job", "run_proxy", "small",
           "summarize"]
