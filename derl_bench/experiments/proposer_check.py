"""The proposer check: can a reward proposer learn, measured on cheap surrogate objectives.

Training an inner policy per proposal is what makes reward discovery expensive, and noisy. Before
any inner run is spent, this check asks whether a proposer's outer loop *can* learn: it runs the
proposer for ``generations`` x ``population`` proposals against a scoring rule whose optimum is
known, computed in microseconds from the reward's values on a probe set of the env's primitive
vectors (:mod:`derl_bench.meta.probe`), with no inner training.

Rules (``KIND:ARGUMENT``; every score lies in [-1, 1], 1 is the optimum, and a proposal that does
not compile scores -1):

- ``rank:EXPR`` — Spearman rank agreement of the proposal's values with the target reward
  ``EXPR`` over the probe set. Optimum: any reward that orders the probe responses exactly as
  the target does (a positive monotone transform of it, on the env's own vectors). A constant
  reward scores 0.
- ``pays:NAME`` — pays for primitive ``NAME`` with positive weight: over the probe vectors, the
  share where raising ``NAME`` from the low to the high end of its range (the rest held fixed)
  raises the reward, minus the share where it lowers it. Optimum: strictly increasing in
  ``NAME`` at every probe vector.
- ``noisy-rank:EXPR`` (and ``noisy-pays:NAME``) — the same score, but what the proposer
  *observes* is a validation-like measurement: the score mapped linearly onto a success rate in
  ``[noise_low, noise_high]`` and measured on ``noise_n`` problems (a binomial draw), the
  size of the noise the proxy's validation carries. The check reports the noise-free score of
  the proposals, which is what the proposer should improve.

Proposers: ``derl`` (the Meta-Optimizer with the outer-loop settings given), ``derl-frozen`` (the
same cold-started model and sampler with learning rate 0: the control that cannot learn),
``random`` (random search) and ``revolve`` (island evolution), built by the meta loop's own
:func:`~derl_bench.meta.loop.make_proposer`. The two Meta-Optimizer proposers are cold-started on
each corpus asked for (``paper``: the DERL paper's formulas; ``generator``: grammar draws), once
per corpus (fine-tuning seed 0) and shared by every seed, so a seed sets the proposal sampling,
the updates and the noise; ``derl`` and ``derl-frozen`` draw the same generation 0 (common
random numbers).

    derl-bench proposer-check --output runs/proposer-check              # the full check
    derl-bench proposer-check --small --output runs/proposer-check-ci   # CI-sized

Outputs: ``results.json`` (every proposal's score, every generation's statistics, the
summary), ``summary.md`` (the table) and ``curves.png`` (mean score per generation with a 95%
band). The endpoint, stated before any run: each seed's mean noise-free proposal score over
generations ``endpoint_from`` to the end, DERL minus each other proposer, paired by seed, with a
95% confidence interval.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from derl_bench.experiments.stats import mean_ci, mean_sd, paired_difference
from derl_bench.files import write_text_atomic
from derl_bench.grpo.config import TrainConfig
from derl_bench.meta.config import MetaConfig
from derl_bench.meta.probe import ProbeSet, probe_set
from derl_bench.meta.search import Proposer
from derl_bench.reward import MetaReward, MetaRewardError, compile_reward, primitive_set

PROPOSERS = ("derl", "derl-frozen", "random", "revolve")
LEARNERS = ("derl", "derl-frozen")
RULE_KINDS = ("rank", "pays")
OPTIMUM = 1.0 - 1e-9


@dataclass(frozen=True)
class OuterSettings:
    """The Meta-Optimizer's outer loop: the ``optimizer_*`` fields of a meta recipe, with the
    recipe's defaults (the settings this check selected, docs/proposer-check.md)."""

    learning_rate: float = MetaConfig.optimizer_learning_rate
    kl_coef: float = MetaConfig.optimizer_kl_coef
    epochs: int = MetaConfig.optimizer_epochs
    reference_reset: bool = MetaConfig.optimizer_reference_reset
    advantage: str = MetaConfig.optimizer_advantage
    temperature: float = MetaConfig.optimizer_temperature
    max_new_tokens: int = MetaConfig.optimizer_max_new_tokens
    sft_examples: int = MetaConfig.optimizer_sft_examples
    sft_steps: int = MetaConfig.optimizer_sft_steps


@dataclass
class CheckConfig:
    """The check's budget and rules. The defaults are the full check (docs/proposer-check.md)."""

    output: str = "runs/proposer-check"
    env_id: str = "derl/Arithmetic-v0"
    rules: list[str] = field(default_factory=lambda: [
        "rank:g1 + 0.5 * g2", "pays:answer_closeness", "noisy-rank:g1 + 0.5 * g2"])
    proposers: list[str] = field(default_factory=lambda: list(PROPOSERS))
    cold_starts: list[str] = field(default_factory=lambda: ["paper", "generator"])
    seeds: list[int] = field(default_factory=lambda: list(range(10)))
    generations: int = 20
    population: int = 8
    endpoint_from: int = 10
    """First generation of the endpoint window (the official code runs 20 generations; the
    window is its second half)."""
    probe_problems: int = 32
    noise_n: int = 200
    noise_low: float = 0.0
    noise_high: float = 0.1
    outer: OuterSettings = field(default_factory=OuterSettings)
    max_depth: int = 3
    """``random``/``revolve``: deepest expression tree drawn from the grammar."""
    cache: str | None = None
    """Where the Meta-Optimizer's initial weights and cold starts are kept (default
    ``<output>/cache``): checks that share it fine-tune each cold start once."""
    workers: int = 1
    """Processes that run (rule, proposer, seed) units side by side; the results do not depend
    on it (every unit is seeded on its own)."""

    def __post_init__(self) -> None:
        unknown = [p for p in self.proposers if p not in PROPOSERS]
        if unknown:
            raise ValueError(f"unknown proposers {unknown}; known: {', '.join(PROPOSERS)}")
        if not self.seeds or self.generations < 1 or self.population < 2:
            raise ValueError("the check needs a seed, a generation and a population >= 2")
        if not 0 <= self.endpoint_from < self.generations:
            raise ValueError("endpoint_from must name a generation of the run")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if isinstance(self.outer, dict):
            self.outer = OuterSettings(**self.outer)


SMALL: dict[str, Any] = {"seeds": [0, 1], "generations": 3, "population": 4, "endpoint_from": 1,
         "probe_problems": 4}
"""``--small``: every proposer, rule and cold start at a size CI runs in about a minute."""


# -- rules -------------------------------------------------------------------------------


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    _, inverse = np.unique(x, return_inverse=True)
    return (np.bincount(inverse, weights=ranks) / np.bincount(inverse))[inverse]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation with averaged ties; 0 when either side is constant.

    >>> spearman(np.array([1., 2., 3.]), np.array([10., 20., 40.]))
    1.0
    >>> spearman(np.array([1., 1., 1.]), np.array([1., 2., 3.]))
    0.0
    """
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return 0.0 if denominator == 0 else round(float((ra * rb).sum()) / denominator, 12)


@dataclass(frozen=True)
class Rule:
    """A scoring rule (see the module docstring)."""

    name: str
    kind: str
    argument: str
    noisy: bool

    def score(self, reward: MetaReward | None, probe: ProbeSet) -> float:
        """The noise-free score of ``reward`` (``None``: it did not compile) in [-1, 1]."""
        if reward is None:
            return -1.0
        if self.kind == "rank":
            target = compile_reward(self.argument, env=probe.env_id)
            return spearman(probe.values(reward), probe.values(target))
        low, high = _ends(self.argument, probe)
        raised = probe.with_value(self.argument, high).values(reward)
        lowered = probe.with_value(self.argument, low).values(reward)
        scale = np.maximum(1.0, np.maximum(np.abs(raised), np.abs(lowered)))
        change = np.where(np.abs(raised - lowered) <= 1e-9 * scale, 0.0,
                          np.sign(raised - lowered))
        return float(change.mean())


def _ends(name: str, probe: ProbeSet) -> tuple[float, float]:
    low, high = primitive_set(probe.env_id).range(name)
    column = probe.columns[name]
    return (low if math.isfinite(low) else float(column.min()),
            high if math.isfinite(high) else float(column.max()))


def parse_rule(text: str, env_id: str) -> Rule:
    """``KIND:ARGUMENT`` as a :class:`Rule`, checked against the env's primitives."""
    kind, sep, argument = text.partition(":")
    noisy = kind.startswith("noisy-")
    base = kind.removeprefix("noisy-")
    if not sep or base not in RULE_KINDS or not argument.strip():
        raise ValueError(f"rule {text!r}: expected rank:EXPR, pays:NAME or noisy-<kind>:...")
    argument = argument.strip()
    chosen = primitive_set(env_id)
    if base == "rank":
        compile_reward(argument, env=env_id)
    else:
        argument = chosen.aliases.get(argument, argument)
        if argument not in chosen.names:
            raise ValueError(f"rule {text!r}: {argument!r} is not a primitive of {env_id}")
    return Rule(text, base, argument, noisy)


def observed(score: float, rule: Rule, config: CheckConfig, rng: np.random.Generator,
             ) -> float:
    """What the proposer is told: the score itself, or its validation-like measurement."""
    if not rule.noisy:
        return score
    p = config.noise_low + (config.noise_high - config.noise_low) * (score + 1) / 2
    return float(rng.binomial(config.noise_n, min(1.0, max(0.0, p))) / config.noise_n)


# -- proposers -----------------------------------------------------------------------------


def _proposer(config: CheckConfig, name: str, cold_start: str | None, seed: int,
              rule: Rule, workdir: Path) -> Proposer:
    from derl_bench.meta.loop import make_proposer
    from derl_bench.meta.optimizer import MetaOptimizer

    outer = config.outer
    worst = observed(-1.0, rule, config, np.random.default_rng(0))
    meta = MetaConfig(
        name="proposer-check", method=name, seed=seed, population=config.population,
        inner=TrainConfig(env_id=config.env_id, seed=seed), max_depth=config.max_depth,
        optimizer_model=str(_cache(config) / "meta-optimizer-init"),
        optimizer_learning_rate=outer.learning_rate, optimizer_kl_coef=outer.kl_coef,
        optimizer_epochs=outer.epochs, optimizer_reference_reset=outer.reference_reset,
        optimizer_advantage=outer.advantage, optimizer_temperature=outer.temperature,
        optimizer_max_new_tokens=outer.max_new_tokens, invalid_score=worst,
        output_dir=str(workdir), progress=False, executor="local")
    proposer = make_proposer(meta, config.env_id, warm_start=False)
    if name in LEARNERS and cold_start is not None and outer.sft_steps:
        # One cold start per corpus, shared by every seed (see the module docstring).
        cast(MetaOptimizer, proposer).warm_start(outer.sft_examples, outer.sft_steps, seed=0,
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


# -- the check -------------------------------------------------------------------------------


def _runs(config: CheckConfig) -> list[tuple[str, str | None]]:
    return [(name, cold) for name in config.proposers
            for cold in (config.cold_starts if name in LEARNERS else [None])]


def label(name: str, cold_start: str | None) -> str:
    """How a proposer run is named in tables and plots."""
    return name if cold_start is None else f"{name} ({cold_start})"


def endpoint(rows: list[dict[str, Any]], config: CheckConfig) -> dict[int, float]:
    """Per seed: the mean noise-free proposal score over the endpoint window."""
    by_seed: dict[int, list[float]] = {}
    for row in rows:
        if row["generation"] >= config.endpoint_from:
            by_seed.setdefault(row["seed"], []).append(row["mean_score"])
    return {seed: float(np.mean(values)) for seed, values in sorted(by_seed.items())}


def summarize(rows: list[dict[str, Any]], config: CheckConfig) -> list[dict[str, Any]]:
    """Per rule and cold start: each proposer's endpoint (mean ± SE over seeds), share at
    the optimum, valid and distinct shares in the window, the final drift from the cold
    start, and DERL's paired difference with every other proposer."""
    out = []
    for rule in config.rules:
        for cold in config.cold_starts:
            entry: dict[str, Any] = {"rule": rule, "cold_start": cold, "proposers": {},
                                     "derl_minus": {}}
            picked: dict[str, dict[int, float]] = {}
            for name, run_cold in _runs(config):
                if run_cold not in (None, cold):
                    continue
                mine = [r for r in rows if r["rule"] == rule and r["proposer"] == name
                        and r["cold_start"] == run_cold]
                window = [r for r in mine if r["generation"] >= config.endpoint_from]
                per_seed = endpoint(mine, config)
                picked[name] = per_seed
                mean, sd = mean_sd(list(per_seed.values()))
                last = [r for r in mine if r["generation"] == config.generations - 1]
                entry["proposers"][name] = {
                    "endpoint": round(mean, 4),
                    "se": round(sd / math.sqrt(len(per_seed)), 4),
                    "optimum_share": round(float(np.mean([r["optimum_share"] for r in window])), 4),
                    "valid_share": round(float(np.mean([r["valid_share"] for r in window])), 4),
                    "distinct_share": round(float(np.mean([r["distinct_share"] for r in window])),
                                            4),
                    "kl_from_start": round(float(np.mean([r.get("kl_from_start", 0.0)
                                                          for r in last])), 5),
                }
            if "derl" in picked:
                for other, per_seed in picked.items():
                    if other != "derl":
                        seeds = sorted(set(per_seed) & set(picked["derl"]))
                        entry["derl_minus"][other] = paired_difference(
                            [picked["derl"][s] for s in seeds], [per_seed[s] for s in seeds])
            out.append(entry)
    return out


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
    probe = probe_set(config.env_id, config.probe_problems)
    log(f"probe set: {len(probe)} primitive vectors ({probe.source}); "
        f"{len(rules)} rules x {len(_runs(config))} proposer runs x {len(config.seeds)} seeds, "
        f"{config.generations} generations x {config.population}")
    for corpus in config.cold_starts:  # fine-tune each shared cold start once, up front
        if any(name in LEARNERS for name in config.proposers):
            _proposer(config, "derl", corpus, 0, rules[0], out)
    units = [(rule, name, cold, seed) for rule in rules for name, cold in _runs(config)
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
        for name, cold in _runs(config):
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


def _fmt(d: dict[str, float]) -> str:
    return (f"{d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] "
            f"(MDE {d['mde']:.3f})")


def summary_markdown(result: dict[str, Any]) -> str:
    """The check's table: endpoint per proposer and DERL's paired differences."""
    config = result["config"]
    outer = config["outer"]
    lines = [
        f"# Proposer check: {config['env_id']}",
        "",
        "Generated by `derl-bench proposer-check`; see "
        "[docs/proposer-check.md](../../docs/proposer-check.md) for the method. "
        f"{config['generations']} generations x {config['population']} proposals, seeds "
        f"{', '.join(map(str, config['seeds']))}; probe set of {result['probe']['size']} "
        f"primitive vectors ({result['probe']['source']}). Endpoint: each seed's mean "
        f"noise-free proposal score over generations {config['endpoint_from']}-"
        f"{config['generations'] - 1} (scores in [-1, 1], optimum 1); differences are paired "
        "by seed, with a 95% t interval and the minimal detectable effect (MDE, 80% power). "
        f"Outer loop: learning rate {outer['learning_rate']}, KL {outer['kl_coef']}, "
        f"{outer['epochs']} epoch(s) per update, reference reset "
        f"{'on' if outer['reference_reset'] else 'off'}, advantage {outer['advantage']}, "
        f"temperature {outer['temperature']}; cold start {outer['sft_steps']} SFT steps. "
        f"Noisy rules: success rate in [{config['noise_low']}, {config['noise_high']}] measured "
        f"on {config['noise_n']} problems. Wall time {result['wall_time_s'] / 60:.1f} min.",
        "",
        "| rule | cold start | proposer | endpoint | at optimum | valid | distinct | "
        "KL from start | DERL minus this |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in result["summary"]:
        for name, figures in entry["proposers"].items():
            diff = entry["derl_minus"].get(name)
            lines.append(
                f"| `{entry['rule']}` | {entry['cold_start']} | {name} | "
                f"{figures['endpoint']:+.3f} ± {figures['se']:.3f} | "
                f"{100 * figures['optimum_share']:.0f}% | {100 * figures['valid_share']:.0f}% | "
                f"{100 * figures['distinct_share']:.0f}% | {figures['kl_from_start']:.4f} | "
                f"{_fmt(diff) if diff else '–'} |")
    lines += ["", "![mean proposal score per generation](curves.png)", ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Mean noise-free proposal score per generation, with a 95% band over seeds: one panel per
    rule and cold start, one line per proposer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = result["config"]
    rows = result["rows"]
    panels = [(rule, cold) for cold in config["cold_starts"] for rule in config["rules"]]
    columns = len(config["rules"])
    fig, axes = plt.subplots(len(config["cold_starts"]), columns, squeeze=False,
                             figsize=(4.2 * columns, 3.2 * len(config["cold_starts"])))
    for (rule, cold), ax in zip(panels, axes.flat, strict=True):
        for name in config["proposers"]:
            run_cold = cold if name in LEARNERS else None
            mine = [r for r in rows if r["rule"] == rule and r["proposer"] == name
                    and r["cold_start"] == run_cold]
            if not mine:
                continue
            gens = sorted({r["generation"] for r in mine})
            bands = [mean_ci([r["mean_score"] for r in mine if r["generation"] == g])
                     for g in gens]
            line, = ax.plot(gens, [b[0] for b in bands], marker=".", label=name)
            ax.fill_between(gens, [b[1] for b in bands], [b[2] for b in bands],
                            color=line.get_color(), alpha=0.15)
        ax.set_title(f"{rule} ({cold} cold start)", fontsize=8)
        ax.set_xlabel("generation")
        ax.set_ylabel("mean proposal score")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def small(config: CheckConfig) -> CheckConfig:
    """``config`` at the ``--small`` size."""
    return replace(config, **SMALL, outer=replace(config.outer, sft_steps=10, sft_examples=32))


__all__ = ["CheckConfig", "OuterSettings", "PROPOSERS", "Rule", "label", "parse_rule",
           "run_check", "small", "spearman", "summarize"]
