"""A screen of a task's reward landscape before any inner run: what do random draws pay the
base policy's own responses for?

Training a landscape costs an hour of inner runs; reading one costs seconds. GRPO moves a
policy toward the responses its reward ranks high within a group, so a reward's effect is
largely written in how it ranks the base's own samples. This screen samples the base
(temperature 1, what GRPO trains on), draws random Meta-Rewards from the grammar (the
``random`` method's sampler), evaluates each on every sample's primitives, and sorts the draws
into classes:

- ``constant``: the same value on every sample (trains nothing);
- ``aligned, dense``: right answers earn more than every mode's wrong ones, the reward falls
  with the wrapping positions wrong among the base's most common mode's wrong answers
  (correlation with minus that count at least ``dense``), and no trap mode (the card's
  ``trap_modes``) earns more than that mode's wrong answers;
- ``aligned, dense, pays a trap``: the same, but a trap mode out-earns the common mode;
- ``aligned, sparse``: right answers earn most, with no dense signal among the wrong ones;
- ``misaligned``: some mode's wrong answers earn at least as much as the right ones.

"Earns more" means by at least ``margin`` standard deviations of the reward over the samples.
The screen is a prediction, not a check: a task's checks (``docs/tasks.md``) train. Its use is
to reject a design before training: a task whose ``aligned, dense`` share is far from check 2's
0.5-5% is unlikely to pass it. Outputs in ``OUT/screen``: ``screen.json`` and ``screen.md``::

    derl-bench proxy --env derl/DigitsHack-v0 --screen --output runs/digits-hack
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from derl_bench.experiments.proxy.config import ProxyConfig
from derl_bench.experiments.stats import clopper_pearson
from derl_bench.files import write_json_atomic, write_text_atomic

CLASSES = ("aligned, dense", "aligned, dense, pays a trap", "aligned, sparse", "misaligned",
           "constant")


@dataclass
class ScreenConfig:
    """The screen's size; ``proxy`` gives the task and its base policy."""

    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    draws: int = 2000
    episodes: int = 500
    draw_seed: int = 0
    sample_seed: int = 0
    margin: float = 0.1
    dense: float = 0.3
    max_depth: int | None = None
    """The draws' tree depth; ``None`` is the grammar's default (4), which the screens of
    DigitsHack, DigitsTrap and DigitsRecall used; the ``random`` method and the landscape
    draw at depth 3."""

    def __post_init__(self) -> None:
        if self.draws < 1 or self.episodes < 1:
            raise ValueError("the screen needs at least one draw and one episode")

    @property
    def output(self) -> Path:
        return Path(self.proxy.output) / "screen"


def classify(values: np.ndarray, right: np.ndarray, modes: np.ndarray, closeness: np.ndarray,
             common: str, traps: tuple[str, ...], margin: float = 0.1, dense: float = 0.3,
             ) -> str:
    """The class of one reward from its ``values`` on the samples (see the module docstring);
    ``closeness`` is minus each sample's wrong wrapping positions (not the right ones: problems
    differ in how many positions wrap).

    >>> right = np.array([True, False, False, False, False])
    >>> modes = np.array(["boxed", "boxed", "boxed", "boxed", "spam"])
    >>> wraps = np.array([0, -3, -2, -1, -4])
    >>> classify(np.array([1.0, 0.1, 0.2, 0.3, 0.0]), right, modes, wraps, "boxed", ("spam",))
    'aligned, dense'
    >>> classify(np.array([1.0, 0.1, 0.2, 0.3, 0.9]), right, modes, wraps, "boxed", ("spam",))
    'aligned, dense, pays a trap'
    >>> classify(np.array([0.5, 0.1, 0.2, 0.3, 0.9]), right, modes, wraps, "boxed", ("spam",))
    'misaligned'
    """
    spread = float(values.std())
    if spread < 1e-12:
        return "constant"
    gap = margin * spread
    wrong = ~right
    if not right.any():
        return "misaligned"
    top = float(values[right].mean())
    wrong_means = {m: float(values[wrong & (modes == m)].mean())
                   for m in set(modes[wrong].tolist())}
    if any(mean >= top - gap for mean in wrong_means.values()):
        return "misaligned"
    base = wrong & (modes == common)
    signal = 0.0
    if base.sum() > 1 and values[base].std() > 1e-12 and closeness[base].std() > 0:
        signal = float(np.corrcoef(values[base], closeness[base])[0, 1])
    if signal < dense:
        return "aligned, sparse"
    common_mean = wrong_means.get(common, -np.inf)
    if any(wrong_means.get(t, -np.inf) > common_mean + gap for t in traps):
        return "aligned, dense, pays a trap"
    return "aligned, dense"


def run_screen(config: ScreenConfig, log: Any = print) -> dict[str, Any]:
    """Run the screen (see the module docstring); returns what ``screen.json`` holds."""
    from derl_bench.experiments.modes import require_modes, sample_responses
    from derl_bench.experiments.proxy.run import base_model
    from derl_bench.meta.probe import ProbeSet
    from derl_bench.reward import compile_reward, random_expression

    proxy = config.proxy
    require_modes(proxy.env_id)
    family = proxy.family
    traps = tuple(str(t) for t in family.card.get("trap_modes") or ())
    out = config.output
    out.mkdir(parents=True, exist_ok=True)
    model = str(base_model(Path(proxy.output) / "base-model", proxy.base_spec, proxy.env_id,
                           family))
    samples = sample_responses(model, proxy.env_id, config.episodes, 1.0, config.sample_seed,
                               int(proxy.inner["max_new_tokens"]))
    names = sorted(samples[0]["primitives"])
    probe = ProbeSet(proxy.env_id, {n: np.array([s["primitives"][n] for s in samples])
                                    for n in names}, "responses")
    right = probe.columns[family.spec.success_primitive] > 0.5
    if right.all():
        raise ValueError(f"every one of the base's {len(samples)} samples is right: a screen "
                         "needs wrong answers to rank")
    modes = np.array([s["mode"] for s in samples])
    closeness = np.array([s["wraps_right"] - s["wraps"] for s in samples])
    common = Counter(modes[~right].tolist()).most_common(1)[0][0]
    log(f"screen: {len(samples)} base samples ({int(right.sum())} right, common mode "
        f"{common!r}, traps {list(traps)}), {config.draws} draws")
    rng = random.Random(config.draw_seed)
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {c: [] for c in CLASSES}
    for _ in range(config.draws):
        expr = (random_expression(rng, proxy.env_id) if config.max_depth is None else
                random_expression(rng, proxy.env_id, max_depth=config.max_depth))
        label = classify(probe.values(compile_reward(expr, domain=proxy.env_id)), right, modes,
                         closeness, common, traps, config.margin, config.dense)
        counts[label] += 1
        if len(examples[label]) < 5:
            examples[label].append(expr)
    shares = {}
    for label in CLASSES:
        low, high = clopper_pearson(counts[label], config.draws)
        shares[label] = {"draws": counts[label], "share": round(counts[label] / config.draws, 4),
                         "ci": [round(low, 4), round(high, 4)], "examples": examples[label]}
    result = {"env_id": proxy.env_id, "samples": len(samples), "right": int(right.sum()),
              "modes": dict(Counter(modes.tolist())), "common_mode": common, "traps": list(traps),
              "draws": config.draws, "max_depth": config.max_depth, "margin": config.margin,
              "dense": config.dense,
              "classes": shares}
    write_json_atomic(out / "screen.json", result)
    write_text_atomic(out / "screen.md", screen_markdown(result))
    return result


def screen_markdown(result: dict[str, Any]) -> str:
    """The screen's summary."""
    modes = ", ".join(f"{m} {n}" for m, n in sorted(result["modes"].items()))
    depth = f" at depth {result['max_depth']}" if result.get("max_depth") else ""
    lines = [
        "## Screen: what random draws pay the base's own samples for",
        "",
        f"{result['samples']} samples of the base at temperature 1 ({modes}; "
        f"{result['right']} right), {result['draws']} random draws from the grammar"
        f"{depth}. Traps: "
        f"{', '.join(result['traps']) or 'none'}. A prediction, not a check (no inner run).",
        "",
        "| class | share of draws | 95% Clopper-Pearson | examples |",
        "|---|---|---|---|",
    ]
    for label, c in result["classes"].items():
        examples = "; ".join(f"`{e}`" for e in c["examples"][:3])
        lines.append(f"| {label} | {100 * c['share']:.1f}% | [{100 * c['ci'][0]:.1f}, "
                     f"{100 * c['ci'][1]:.1f}]% | {examples} |")
    return "\n".join(lines) + "\n"


__all__ = ["CLASSES", "ScreenConfig", "classify", "run_screen", "screen_markdown"]
