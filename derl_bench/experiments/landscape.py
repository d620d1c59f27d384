"""The proxy's reward landscape: what random Meta-Rewards score beside the hand-made ones.

A reward-discovery benchmark measures something only if its task has something to discover: a
reward that trains a better policy than the best hand-made one. This experiment checks that on
the proxy task (``derl/Arithmetic-v0``, the proxy's base policy and inner recipe):

1. **Draw.** ``rewards`` random Meta-Rewards from the grammar (the ``random`` method's
   sampler), keeping one per behaviour class on the env's probe set
   (:func:`~derl_bench.meta.probe.behaviour_key`) and none that is constant there: every
   reward drawn trains differently.
2. **Score.** Each reward, and each hand-made reward, trains one inner GRPO run per seed of
   ``seeds`` and is scored on the validation split, exactly as a search candidate is. Every
   seed of both stages is fresh (:func:`~derl_bench.meta.search.fresh_seeds`): no search
   slot trains with it.
3. **Confirm.** The ``confirm_top`` best random rewards by mean score, and every hand-made
   reward, train again on the fresh seeds ``confirm_seeds``. The maximum over hundreds of
   noisy means is biased upward, so only this second, independent measurement decides whether
   a reward beats the best hand-made one: the paired difference over the fresh seeds, with
   its 95% interval. A reward *measurably* beats it when the interval's lower end is above 0.

Outputs in ``output``: ``landscape.json`` (every reward's scores), ``landscape.md`` and
``landscape.png`` (the distribution of the random rewards' mean scores, hand-made rewards
marked)::

    derl-bench proxy --landscape --output runs/proxy
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import multiprocessing
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from derl_bench.experiments.proxy.config import ENV_ID, HAND_MADE, ProxyConfig
from derl_bench.experiments.proxy.run import base_model, score_rewards, worker_init
from derl_bench.experiments.stats import (
    above_zero,
    clopper_pearson,
    holm,
    mean_sd,
    paired_difference,
    t_p_value,
)
from derl_bench.files import write_json_atomic, write_text_atomic
from derl_bench.meta.search import fresh_seeds

LANDSCAPE_OFFSET = 4_000
"""Where the landscape's fresh seeds start: neither stage shares noise with a search slot."""


@dataclass
class LandscapeConfig:
    """The landscape's size; ``proxy`` gives the base policy, inner recipe and validation."""

    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    rewards: int = 200
    seeds: list[int] = field(default_factory=lambda: fresh_seeds(2, LANDSCAPE_OFFSET))
    confirm_top: int = 5
    confirm_seeds: list[int] = field(
        default_factory=lambda: fresh_seeds(6, LANDSCAPE_OFFSET + 100))
    draw_seed: int = 0
    max_depth: int = 3

    def __post_init__(self) -> None:
        if self.rewards < 1 or not self.seeds:
            raise ValueError("the landscape needs at least one reward and one seed")
        if set(self.seeds) & set(self.confirm_seeds):
            raise ValueError("confirm_seeds must be fresh: not among seeds")

    @property
    def output(self) -> Path:
        return Path(self.proxy.output) / "landscape"


def draw_rewards(count: int, seed: int = 0, max_depth: int = 3, env_id: str = ENV_ID,
                 ) -> tuple[list[str], dict[str, Any]]:
    """``count`` random Meta-Rewards for ``env_id``, one per behaviour class and none
    constant on the probe set, and how many draws were duplicates or constant (with
    ``weights``: each kept reward's number of draws, its own and the duplicates of its class,
    so that shares can be stated over draws as a searcher meets them).

    >>> exprs, drawn = draw_rewards(5)
    >>> len(exprs), drawn["kept"], drawn["draws"] >= 5
    (5, 5, True)
    """
    from derl_bench.family import resolve_family
    from derl_bench.meta.probe import behaviour_key, probe_set
    from derl_bench.reward import compile_reward, env_primitives, random_expression

    rng = random.Random(seed)
    family = resolve_family(env_id)
    probe, declared = probe_set(env_id, family), env_primitives(env_id, family)
    exprs: list[str] = []
    seen: dict[str, str] = {}
    weights: dict[str, int] = {}
    counts = {"draws": 0, "constant": 0, "duplicate": 0, "kept": 0}
    while len(exprs) < count:
        counts["draws"] += 1
        if counts["draws"] > 100 * count:
            raise RuntimeError(f"only {len(exprs)} distinct non-constant rewards in "
                               f"{counts['draws'] - 1} draws")
        expr = random_expression(rng, env_id, max_depth=max_depth)
        key = behaviour_key(compile_reward(expr, declared), probe)
        if key is None:
            counts["constant"] += 1
        elif key in seen:
            counts["duplicate"] += 1
            weights[seen[key]] += 1
        else:
            seen[key] = expr
            weights[expr] = 1
            exprs.append(expr)
    counts["kept"] = len(exprs)
    return exprs, {**counts, "weights": weights}


def _jobs(exprs: list[str], seeds: list[int], size: int, out: Path, stage: str,
          ) -> list[tuple[list[str], int, Path]]:
    return [(exprs[i:i + size], seed, out / f"{stage}-s{seed}-{i // size:03d}")
            for seed in seeds for i in range(0, len(exprs), size)]


def score_jobs(config: LandscapeConfig, model: str, jobs: list[tuple[list[str], int, Path]],
               log: Any) -> dict[tuple[str, int], float]:
    """Score every ``(rewards, inner seed, folder)`` job (:func:`score_rewards`), as many at
    once as the proxy has workers; returns each ``(reward, seed)``'s validation score."""
    scores: dict[tuple[str, int], float] = {}
    workers = config.proxy.workers
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context,
                                                initializer=worker_init) as pool:
        futures = {pool.submit(score_rewards, config.proxy, model, exprs, seed, out):
                   (exprs, seed) for exprs, seed, out in jobs}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            exprs, seed = futures[future]
            for expr, score in zip(exprs, future.result(), strict=True):
                scores[expr, seed] = score
            log(f"  {done}/{len(jobs)} populations scored")
    return scores


def _entry(expr: str, seeds: list[int], scores: dict[tuple[str, int], float]) -> dict[str, Any]:
    values = [scores[expr, s] for s in seeds]
    mean, sd = mean_sd(values)
    return {"expr": expr, "scores": values, "mean": round(mean, 4), "sd": round(sd, 4)}


def run_landscape(config: LandscapeConfig, log: Any = print) -> dict[str, Any]:
    """Run the experiment (see the module docstring); returns what ``landscape.json`` holds."""
    out = config.output
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    proxy = config.proxy
    model = str(base_model(Path(proxy.output) / "base-model", proxy.base_spec, proxy.env_id,
                           proxy.family))
    exprs, drawn = draw_rewards(config.rewards, config.draw_seed, config.max_depth,
                                proxy.env_id)
    hand = list(HAND_MADE.values())
    size = int(proxy.population)
    log(f"landscape: {len(exprs)} random rewards ({drawn['draws']} draws) and {len(hand)} "
        f"hand-made, seeds {config.seeds}")
    scores = score_jobs(config, model, _jobs(exprs + hand, config.seeds, size, out, "draw"), log)
    randoms = sorted((_entry(e, config.seeds, scores) for e in exprs),
                     key=lambda r: -r["mean"])
    hand_rows = {name: _entry(expr, config.seeds, scores) for name, expr in HAND_MADE.items()}
    top = [r["expr"] for r in randoms[:config.confirm_top]]
    log(f"confirming the top {len(top)} on fresh seeds {config.confirm_seeds} beside the "
        f"hand-made rewards")
    fresh = score_jobs(config, model,
                      _jobs(top + hand, config.confirm_seeds, size, out, "confirm"), log)
    confirm = [{"expr": expr, "hand_made": expr in hand,
                "scores": [fresh[expr, s] for s in config.confirm_seeds]} for expr in top + hand]
    result = {
        "env_id": proxy.env_id, "config": _jsonable(config), "drawn": drawn,
        "validation_episodes": proxy.validation_episodes,
        "hand_made": hand_rows, "random": randoms, "confirm": confirm,
        "wall_time_s": round(time.perf_counter() - started, 1),
    }
    found = judge(confirm)
    result.update(found)
    result["better_each_share"] = draw_share(result, found["better_each_holm"])
    planted = Path(proxy.output) / "planted" / "planted.json"
    if planted.is_file():
        attach_planted(result, json.loads(planted.read_text()))
    write_landscape(result, out)
    return result


def write_landscape(result: dict[str, Any], out: Path) -> None:
    """``landscape.json``, ``landscape.png`` and ``landscape.md`` of ``result`` in ``out``."""
    write_json_atomic(out / "landscape.json", result)
    plot_landscape(result, out / "landscape.png")
    write_text_atomic(out / "landscape.md", landscape_markdown(result))


def attach_planted(result: dict[str, Any], planted: dict[str, Any]) -> dict[str, Any]:
    """Mark the task's planted reward on a landscape: its mean on the planted check's
    confirmation seeds (fresh, but not the landscape's own), and how many random rewards the
    landscape's confirmation measured above every hand-made reward."""
    scores = planted["confirm"]["scores"][planted["planted"]]
    result["planted"] = {"expr": planted["planted"], "mean": round(sum(scores) / len(scores), 4),
                         "seeds": len(scores), "passes": planted["passes"]}
    return result


def judge(confirm: list[dict[str, Any]]) -> dict[str, Any]:
    """From the confirmation runs (fresh seeds): every reward's mean and its paired difference
    with each hand-made reward; the best hand-made reward (highest fresh mean); and the random
    rewards *measurably better than every hand-made reward* (each interval above 0).

    >>> found = judge([{"expr": "a", "hand_made": False, "scores": [0.3, 0.4, 0.5]},
    ...                {"expr": "h", "hand_made": True, "scores": [0.1, 0.1, 0.2]}])
    >>> found["best_hand_made"], found["measurably_better"], found["measurably_better_holm"]
    ('h', ['a'], ['a'])
    """
    hand = {c["expr"]: c["scores"] for c in confirm if c["hand_made"]}
    rows = []
    for c in confirm:
        rows.append({**c, "mean": round(sum(c["scores"]) / len(c["scores"]), 4),
                     "minus": {h: paired_difference(c["scores"], scores)
                               for h, scores in hand.items() if h != c["expr"]}})
    best = max(hand, key=lambda h: sum(hand[h]) / len(hand[h]))
    # A difference without spread has an interval of one point and no test: it never counts.
    beats = [r["expr"] for r in rows if not r["hand_made"]
             and all(d["ci_low"] > 0 and _strength(d) > -math.inf for d in r["minus"].values())]
    # The same question with every random-minus-hand-made comparison corrected together.
    keys = [(i, h) for i, r in enumerate(rows) if not r["hand_made"] for h in r["minus"]]
    adjusted = holm([rows[i]["minus"][h] for i, h in keys])
    above: dict[int, list[bool]] = {}
    for (i, _), d in zip(keys, adjusted, strict=True):
        above.setdefault(i, []).append(above_zero(d))
    beats_holm = [rows[i]["expr"] for i, ok in above.items() if all(ok)]
    # Check 2's rule: a reward is better than every hand-made one when each of its comparisons
    # is (an intersection-union test, so its weakest comparison decides, uncorrected within
    # the reward), and the weakest comparisons of the rewards are Holm-corrected together, one
    # per reward. A comparison without a spread has no test and cannot pass.
    randoms = [r for r in rows if not r["hand_made"] and r["minus"]]
    weakest = [min(r["minus"].values(), key=_strength) for r in randoms]
    per_reward = holm(weakest)
    better_each = [r["expr"] for r, d in zip(randoms, per_reward, strict=True)
                   if above_zero(d) and all(m["mean"] > 0 for m in r["minus"].values())]
    return {"confirm": rows, "best_hand_made": best, "measurably_better": beats,
            "measurably_better_holm": beats_holm, "better_each_holm": better_each,
            "better_each_family": sum(d.get("p") is not None for d in per_reward)}


def _strength(difference: dict[str, Any]) -> float:
    """A comparison's t statistic; minus infinity when it has no test."""
    if t_p_value(difference["mean"], difference["se"], int(difference["n"])) is None:
        return -math.inf
    return float(difference["mean"]) / float(difference["se"])


def draw_share(result: dict[str, Any], winners: list[str]) -> dict[str, Any]:
    """The share of the landscape's raw draws whose behaviour class is one of ``winners``,
    with its 95% Clopper-Pearson interval. Draws are independent and a draw wins exactly when
    its class does, so the count of winning draws is binomial. Classes never confirmed count
    as not winning, so the share is a lower bound.

    >>> draw_share({"drawn": {"draws": 400, "weights": {"a": 3, "b": 5}}}, ["a"])
    {'draws': 400, 'winning_draws': 3, 'share': 0.0075, 'ci': [0.0015, 0.0218]}
    """
    drawn = result["drawn"]
    weights = drawn.get("weights") or {}
    wins = sum(int(weights.get(expr, 1)) for expr in winners)
    low, high = clopper_pearson(wins, int(drawn["draws"]))
    return {"draws": int(drawn["draws"]), "winning_draws": wins,
            "share": round(wins / int(drawn["draws"]), 4), "ci": [round(low, 4), round(high, 4)]}


def _jsonable(config: LandscapeConfig) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(asdict(config), default=str))


def plot_landscape(result: dict[str, Any], path: Path) -> None:
    """The random rewards' mean validation scores as a histogram, hand-made rewards marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.hist([100 * r["mean"] for r in result["random"]], bins=30, color="0.6",
            label=f"{len(result['random'])} random rewards")
    # Hand-made rewards often tie: each line its own colour and dash, so none hides another.
    for (name, row), colour, dash in zip(result["hand_made"].items(), ("C0", "C1", "C2", "C3"),
                                         ("--", ":", "-.", (0, (5, 1))), strict=False):
        ax.axvline(100 * row["mean"], color=colour, linestyle=dash, linewidth=2, label=name)
    if "planted" in result:
        ax.axvline(100 * result["planted"]["mean"], color="C4", linewidth=2.5,
                   label=f"planted: {result['planted']['expr']}")
    ax.set_xlabel(f"validation success, % (mean of {len(result['config']['seeds'])} seeds)")
    ax.set_ylabel("rewards")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def landscape_markdown(result: dict[str, Any]) -> str:
    """The landscape's summary for the proxy board."""
    config, drawn = result["config"], result["drawn"]
    seeds = ", ".join(map(str, config["seeds"]))
    fresh = ", ".join(map(str, config["confirm_seeds"]))
    randoms = result["random"]
    lines = [
        "## The reward landscape",
        "",
        f"{len(randoms)} random Meta-Rewards (one per behaviour class on the probe set, none "
        f"constant; {drawn['draws']} draws, of which {drawn['duplicate']} repeated a class and "
        f"{drawn['constant']} were constant) and the hand-made rewards, each trained by the "
        f"proxy's inner recipe with seeds {seeds} and scored on "
        f"{result['validation_episodes']} validation problems. Wall time "
        f"{result['wall_time_s'] / 60:.0f} min.",
        "",
        "![reward landscape](landscape.png)",
        "",
        "| reward | mean validation, % | per seed |",
        "|---|---|---|",
    ]
    for name, row in result["hand_made"].items():
        lines.append(f"| {name} (`{row['expr']}`) | {100 * row['mean']:.1f} | "
                     + ", ".join(f"{100 * v:.1f}" for v in row["scores"]) + " |")
    best_stage1 = max(r["mean"] for r in result["hand_made"].values())
    share = sum(r["mean"] > best_stage1 for r in randoms) / len(randoms)
    hand = [c["expr"] for c in result["confirm"] if c["hand_made"]]
    lines += [
        "",
        f"{100 * share:.0f}% of the random rewards have a higher {len(config['seeds'])}-seed "
        "mean than the best hand-made reward. That maximum over noisy means is biased upward, "
        f"so the {config['confirm_top']} best were trained again on fresh seeds ({fresh}) "
        "beside every hand-made reward; the difference with each hand-made reward is paired "
        "by seed (points, 95% t interval):",
        "",
        f"| reward | mean validation, % (seeds {fresh}) | "
        + " | ".join(f"minus `{h}`" for h in hand) + " |",
        "|---|---|" + "---|" * len(hand),
    ]
    for row in result["confirm"]:
        cells = []
        for h in hand:
            d = row["minus"].get(h)
            cells.append("–" if d is None else
                         f"{100 * d['mean']:+.1f} [{100 * d['ci_low']:+.1f}, "
                         f"{100 * d['ci_high']:+.1f}]")
        lines.append(f"| `{row['expr']}` | {100 * row['mean']:.1f} | " + " | ".join(cells)
                     + " |")
    better = result["measurably_better"]
    lines += ["", f"The best hand-made reward on the fresh seeds: `{result['best_hand_made']}`. "
              + (("Measurably better than every hand-made reward (every interval above 0): "
                  + ", ".join(f"`{e}`" for e in better) + ".") if better else
                 "No random reward is measurably better than every hand-made reward (an "
                 "interval above 0 against each)."),
              f"Each interval is a single 95% interval, not corrected for the "
              f"{config['confirm_top']} rewards compared.",
              "",
              f"Of the {len(randoms)} random rewards drawn, {len(better)} "
              f"({100 * len(better) / len(randoms):.0f}%) are measurably better than every "
              "hand-made reward (a lower bound: only the best "
              f"{config['confirm_top']} were trained again); with all "
              f"{len(hand) * config['confirm_top']} comparisons Holm-corrected together, "
              f"{len(result.get('measurably_better_holm', []))}."]
    if "better_each_share" in result:
        share = result["better_each_share"]
        each = result["better_each_holm"]
        lines += ["", f"Check 2's rule, each reward against all three hand-made ones (its weakest "
                  f"comparison decides), Holm-corrected across the "
                  f"{result['better_each_family']} confirmed rewards: "
                  + (", ".join(f"`{e}`" for e in each) if each else "none")
                  + f". Over the {share['draws']} raw draws (duplicates of a class counted, "
                  f"constants included): {share['winning_draws']} "
                  f"({100 * share['share']:.1f}%, 95% Clopper-Pearson "
                  f"[{100 * share['ci'][0]:.1f}, {100 * share['ci'][1]:.1f}]%), a lower bound "
                  "as above."]
    if "planted" in result:
        planted = result["planted"]
        lines += ["", f"The task's planted reward `{planted['expr']}` scores "
                  f"{100 * planted['mean']:.1f}% on the planted check's {planted['seeds']} "
                  "confirmation seeds (marked on the histogram; its own fresh seeds, not "
                  "these)."]
    return "\n".join(lines) + "\n"


__all__ = ["LANDSCAPE_OFFSET", "LandscapeConfig", "attach_planted", "draw_rewards", "draw_share",
           "judge",
           "landscape_markdown", "plot_landscape", "run_landscape", "score_jobs",
           "score_rewards", "write_landscape"]
