"""Proving a reward-discovery task: does its planted reward beat every hand-made one?

A task of the suite (``docs/tasks.md``) is worth a board only if its reward landscape holds a
reward measurably better than the hand-made ones. Its card names the reward its design plants
(``planted_reward``); this experiment trains it beside each hand-made reward (outcome, outcome
+ format, the average of g1..g4) with the proxy's inner recipe, one inner run per reward and
seed, every seed fresh (:func:`~derl_bench.meta.search.fresh_seeds`), and scores each policy on
the validation split. The design is planned before the confirming run:

1. **Pilot** on ``pilot_seeds`` seeds: the spread of the paired differences *planted minus each
   hand-made reward* gives the minimal detectable effect a confirming run of ``n`` seeds would
   have (the same t formula as every comparison, :func:`planned_mde`). The confirmation's size
   is planned from it (:func:`planned_seeds`): the fewest seeds, at least ``seeds`` and at most
   ``max_seeds``, at which ``margin`` x the planned MDE is within every pilot difference.
2. **Confirm** on that many further fresh seeds: the paired differences with Holm-corrected
   intervals (:func:`~derl_bench.experiments.stats.holm`). The task passes when the planted
   reward beats every hand-made reward by at least ``3 x`` the planned MDE and every corrected
   interval excludes 0.

A card whose planted reward combines primitives may also name its ``planted_parts`` (label ->
Meta-Reward, for example each part alone and their sum). They are trained on the same seeds
and compared with the planted reward in the same Holm family: the task then passes only if
the planted reward also beats each part (its corrected interval excludes 0), which shows that
the combination, not one of its parts, is what the task rewards.

Outputs in ``OUT/planted``: ``planted.json`` (every score) and ``planted.md``::

    derl-bench proxy --env derl/DigitsSparse-v0 --planted --output runs/digits-sparse
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from derl_bench.experiments.proxy.config import HAND_MADE, ProxyConfig
from derl_bench.experiments.stats import (
    above_zero,
    format_p,
    holm,
    mean_sd,
    paired_difference,
    t_quantile,
)
from derl_bench.files import write_json_atomic, write_text_atomic
from derl_bench.reward.planted import planted_parts, planted_reward

PILOT_OFFSET = 0
CONFIRM_OFFSET = 1_000
"""Where the pilot's and the confirmation's fresh seeds start (disjoint ranges)."""
RECONFIRM_OFFSET = 8_000
"""Where a further confirmation's seeds start (``--confirm-offset``): one stated after a first
confirmation, with a size planned from its spread (docs/tasks.md)."""


@dataclass
class PlantedConfig:
    """The check's size; ``proxy`` gives the task, base policy, inner recipe and validation."""

    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    pilot_seeds: int = 4
    seeds: int = 8
    """The confirmation's smallest size; the pilot may plan more (:func:`planned_seeds`)."""
    max_seeds: int = 32
    margin: float = 3.0
    """The planted reward must beat every hand-made one by ``margin`` x the planned MDE."""
    confirm_offset: int = CONFIRM_OFFSET
    """Where the confirmation's fresh seeds start. A confirmation stated after an earlier one
    (a larger size planned from its spread) starts elsewhere, so that none of its seeds was
    seen; the pilot's seeds stay those of ``PILOT_OFFSET``."""

    def __post_init__(self) -> None:
        if self.pilot_seeds < 2 or self.seeds < 2 or self.max_seeds < self.seeds:
            raise ValueError("the pilot and the confirmation need at least 2 seeds each, and "
                             "max_seeds at least seeds")
        if not self.pilot_seeds <= self.confirm_offset - PILOT_OFFSET:
            raise ValueError(f"confirm_offset {self.confirm_offset} would reuse the pilot's "
                             f"seeds (offsets {PILOT_OFFSET} to "
                             f"{PILOT_OFFSET + self.pilot_seeds - 1})")

    @property
    def output(self) -> Path:
        return Path(self.proxy.output) / "planted"


def planned_mde(pilot_differences: list[float], n: int, power: float = 0.8) -> float:
    """The MDE of a paired comparison over ``n`` seeds whose differences spread as the
    pilot's did (two-sided, 5% level).

    >>> round(planned_mde([0.1, 0.2, 0.15, 0.05], 8), 4)
    0.0744
    """
    _, sd = mean_sd(pilot_differences)
    return (t_quantile(0.975, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def planned_seeds(pilot: dict[str, list[float]], low: int, high: int, margin: float) -> int:
    """The confirmation's size: the fewest seeds from ``low`` to ``high`` at which ``margin`` x
    the MDE planned from each pilot difference (name -> per-seed differences) is at most that
    difference's pilot mean; ``high`` when none is.

    >>> planned_seeds({"a": [0.5, 0.8, 0.2, 0.7]}, 8, 32, 3.0)
    19
    >>> planned_seeds({"a": [0.1, 0.1, 0.1, 0.11]}, 8, 32, 3.0)
    8
    """
    for n in range(low, high + 1):
        if all(margin * planned_mde(d, n) <= sum(d) / len(d) for d in pilot.values()):
            return n
    return high


def _scores(config: PlantedConfig, model: str, exprs: list[str], seeds: list[int], stage: str,
            log: Any) -> dict[str, list[float]]:
    from derl_bench.experiments.landscape import LandscapeConfig, score_jobs

    jobs = [(exprs, seed, config.output / f"{stage}-{seed}") for seed in seeds]
    scores = score_jobs(LandscapeConfig(proxy=config.proxy), model, jobs, log)
    return {expr: [scores[expr, s] for s in seeds] for expr in exprs}


def run_planted(config: PlantedConfig, log: Any = print) -> dict[str, Any]:
    """Run the check (see the module docstring); returns what ``planted.json`` holds."""
    from derl_bench.experiments.proxy.run import base_model
    from derl_bench.meta.search import fresh_seeds

    proxy = config.proxy
    config.output.mkdir(parents=True, exist_ok=True)
    model = str(base_model(Path(proxy.output) / "base-model", proxy.base_spec, proxy.env_id,
                           proxy.family))
    planted = planted_reward(proxy.env_id, proxy.family)
    parts = planted_parts(proxy.env_id, proxy.family)
    rewards = {"planted": planted, **HAND_MADE, **parts}
    exprs = list(dict.fromkeys(rewards.values()))
    pilot_seeds = fresh_seeds(config.pilot_seeds, PILOT_OFFSET)
    log(f"pilot: {len(exprs)} rewards x seeds {pilot_seeds}")
    pilot = _scores(config, model, exprs, pilot_seeds, "pilot", log)
    differences = {name: [a - b for a, b in zip(pilot[planted], pilot[expr], strict=True)]
                   for name, expr in HAND_MADE.items()}
    n = planned_seeds(differences, config.seeds, config.max_seeds, config.margin)
    mde = {name: planned_mde(d, n) for name, d in differences.items()}
    seeds = fresh_seeds(n, config.confirm_offset)
    log(f"planned: {n} seeds; MDE per comparison: "
        + ", ".join(f"{k} {100 * v:.2f}" for k, v in mde.items()))
    confirm = _scores(config, model, exprs, seeds, "confirm", log)
    against = {**HAND_MADE, **parts}
    names = list(against)
    confirmed = holm([paired_difference(confirm[planted], confirm[against[name]])
                      for name in names])
    # The margin over the planned MDE is asked of the hand-made rewards (the task's claim); a
    # part need only be beaten (its corrected interval above 0).
    comparisons = {name: {**d, "planned_mde": round(mde[name], 4) if name in mde else None,
                          "part": name in parts,
                          "passes": bool(above_zero(d) and (
                              name in parts or d["mean"] >= config.margin * mde[name]))}
                   for name, d in zip(names, confirmed, strict=True)}
    result = {
        "env_id": proxy.env_id, "planted": planted, "rewards": rewards, "parts": parts,
        "validation_episodes": proxy.validation_episodes, "margin": config.margin,
        "pilot": {"seeds": pilot_seeds, "scores": pilot},
        "confirm": {"seeds": seeds, "scores": confirm},
        "comparisons": comparisons,
        "passes": all(c["passes"] for c in comparisons.values()),
    }
    write_json_atomic(config.output / "planted.json", result)
    write_text_atomic(config.output / "planted.md", planted_markdown(result))
    return result


def planted_markdown(result: dict[str, Any]) -> str:
    """The check's summary for the task's board."""
    confirm = result["confirm"]
    n = len(confirm["seeds"])
    lines = [
        "## The planted reward against the hand-made ones",
        "",
        f"Each reward trained with the proxy's inner recipe on fresh seeds and scored on "
        f"{result['validation_episodes']} validation problems. Pilot: "
        f"{len(result['pilot']['seeds'])} seeds, used only to plan the confirmation's size and "
        f"MDE; confirmation: {n} further seeds. Success in %.",
        "",
        "| reward | pilot mean | confirmation mean ± SD |",
        "|---|---|---|",
    ]
    for name, expr in result["rewards"].items():
        pilot = result["pilot"]["scores"][expr]
        mean, sd = mean_sd(confirm["scores"][expr])
        lines.append(f"| {name} (`{expr}`) | {100 * sum(pilot) / len(pilot):.1f} | "
                     f"{100 * mean:.1f} ± {100 * sd:.1f} |")
    lines += [
        "",
        f"Planted minus each hand-made reward{' and each part' if result.get('parts') else ''}"
        f", paired by seed; the interval is Holm-corrected over the "
        f"{len(result['comparisons'])} comparisons; the check asks for a difference of at least "
        f"{result['margin']:g} x the MDE planned from the pilot over each hand-made reward"
        f"{' and an interval above 0 over each part' if result.get('parts') else ''}:",
        "",
        "| minus | difference, points | Holm 95% interval | Holm p | planned MDE | passes |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in result["comparisons"].items():
        mde = "–" if d.get("planned_mde") is None else f"{100 * d['planned_mde']:.1f}"
        label = f"{name} (part)" if d.get("part") else name
        interval, p = ((f"[{100 * d['holm_low']:+.1f}, {100 * d['holm_high']:+.1f}]",
                        format_p(d["p_holm"])) if d.get("p_holm") is not None
                       else (d.get("test", "no test"), "–"))
        lines.append(f"| {label} | {100 * d['mean']:+.1f} | {interval} | {p} | "
                     f"{mde} | {'yes' if d['passes'] else 'no'} |")
    beaten = "every hand-made reward and each of its parts" if result.get("parts") else \
        "every hand-made reward"
    verdict = (f"The planted reward beats {beaten}: the task passes this check."
               if result["passes"] else
               f"The planted reward does not beat {beaten} as the check asks: the task fails "
               "this check.")
    return "\n".join([*lines, "", verdict]) + "\n"


__all__ = ["CONFIRM_OFFSET", "PILOT_OFFSET", "RECONFIRM_OFFSET", "PlantedConfig", "planned_mde",
           "planned_seeds", "planted_markdown", "run_planted"]
