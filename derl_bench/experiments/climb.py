"""Climbability: can a search reach a task's planted reward by small steps?

A task that separates searchers (``docs/tasks.md``) plants a reward that random draws rarely
hit; a searcher that proposes edits of what scored well must still be able to *climb* to it.
This experiment measures that around the planted reward:

1. **Neighbours.** One-edit neighbours of the planted reward, drawn with the subtree mutation
   that island evolution uses (:func:`derl_bench.meta.evolve.mutate`), until ``neighbours``
   behaviour classes on the probe set (:func:`~derl_bench.meta.probe.behaviour_key`) are found.
   A draw constant on the probe set, or in the planted reward's own class, is counted and not
   trained; a draw in a class already found adds to that class's weight, so the shares below
   are over *draws*, as a mutating searcher meets them.
2. **Score.** Every neighbour class, the planted reward and each hand-made reward train one
   inner run per fresh seed of ``seeds`` (:func:`~derl_bench.meta.search.fresh_seeds`) with the
   proxy's inner recipe and are scored on the validation split.
3. **Judge.** A neighbour *climbs* when its mean score is above outcome's mean on the same
   seeds (:data:`CLIMB_BAR`): a step from the planted reward that still trains better than the
   sparse success signal alone is one a searcher can stand on, even where another hand-made
   reward (outcome + format on a gate) scores higher. The task is climbable when at least
   ``threshold`` of the draws climb. How many of them also reach the planted reward's mean is
   reported beside it, the best hand-made reward's mean too, and the share over classes with
   its Clopper-Pearson interval.

Outputs in ``OUT/climb``: ``climb.json`` and ``climb.md``::

    derl-bench proxy --env derl/DigitsTrap-v0 --climb --output runs/digits-trap

The **upward step** (:func:`run_upward`) asks the same question from below: starting from the
rewards a board's searchers picked that pay only the planted reward's first part, how many
one-edit neighbours pay *every* part of the planted reward and train better than the pick?
A reward *pays* a primitive when raising it raises the reward on more probe vectors than it
lowers it (:meth:`~derl_bench.meta.probe.ProbeSet.pays`); the parts are the planted reward's
primitives. Each start gets ``draws`` mutations; the neighbours that pay every part are
grouped by behaviour class, and each class and its start train one inner run per fresh seed.
A neighbour *steps up* when its class's mean is above its start's on the same seeds. The
shares are over all draws (constant ones included), with Clopper-Pearson intervals over
draws. Outputs in ``OUT/upward``: ``upward.json`` and ``upward.md``::

    derl-bench proxy --env derl/DigitsBalance-v0 --upward BOARD/evidence/runs.json \
        --output runs/digits-balance
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from derl_bench.experiments.proxy.config import HAND_MADE, ProxyConfig
from derl_bench.experiments.stats import clopper_pearson, mean_sd
from derl_bench.files import write_json_atomic, write_text_atomic
from derl_bench.meta.search import fresh_seeds

if TYPE_CHECKING:
    from derl_bench.family import Family
    from derl_bench.meta.probe import ProbeSet
    from derl_bench.reward import MetaReward

CLIMB_BAR = "outcome"
"""The hand-made reward a neighbour must score above to climb (docs/tasks.md, check 3)."""
CLIMB_OFFSET = 7_000
"""Where the climb's fresh seeds start (disjoint from every other check's)."""
UPWARD_OFFSET = 7_100
"""Where the upward step's fresh seeds start (disjoint from every other check's)."""


@dataclass
class ClimbConfig:
    """The climb's size; ``proxy`` gives the task, base policy, inner recipe and validation."""

    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    neighbours: int = 40
    seeds: list[int] = field(default_factory=lambda: fresh_seeds(2, CLIMB_OFFSET))
    draw_seed: int = 0
    threshold: float = 0.3

    def __post_init__(self) -> None:
        if self.neighbours < 1 or not self.seeds:
            raise ValueError("the climb needs at least one neighbour and one seed")
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")

    @property
    def output(self) -> Path:
        return Path(self.proxy.output) / "climb"


def draw_neighbours(planted: str, env_id: str, count: int, seed: int = 0,
                    ) -> tuple[dict[str, int], dict[str, int]]:
    """One-edit neighbours of ``planted``: ``count`` behaviour classes, each as its first
    draw -> how many draws fell in it, and the draw counts (``draws``, ``constant``,
    ``same``: in the planted reward's class).

    >>> classes, counts = draw_neighbours("digit_match * progress", "derl/DigitsTrap-v0", 3)
    >>> len(classes), sum(classes.values()) + counts["constant"] + counts["same"] == \\
    ...     counts["draws"]
    (3, True)
    """
    from derl_bench.family import resolve_family
    from derl_bench.meta.evolve import mutate
    from derl_bench.meta.probe import behaviour_key, probe_set
    from derl_bench.reward import compile_reward, env_primitives

    rng = random.Random(seed)
    family = resolve_family(env_id)
    probe, declared = probe_set(env_id, family), env_primitives(env_id, family)
    own = behaviour_key(compile_reward(planted, declared), probe)
    first: dict[Any, str] = {}
    weights: dict[str, int] = {}
    counts = {"draws": 0, "constant": 0, "same": 0}
    while len(weights) < count:
        counts["draws"] += 1
        if counts["draws"] > 200 * count:
            raise RuntimeError(f"only {len(weights)} neighbour classes of {planted!r} in "
                               f"{counts['draws'] - 1} draws")
        child = mutate(planted, env_id, rng)
        key = behaviour_key(compile_reward(child, declared), probe)
        if key is None:
            counts["constant"] += 1
        elif key == own:
            counts["same"] += 1
        elif key in first:
            weights[first[key]] += 1
        else:
            first[key] = child
            weights[child] = 1
    return weights, counts


def _train_and_score(proxy: ProxyConfig, exprs: list[str], seeds: list[int], out: Path,
                     log: Any) -> dict[tuple[str, int], float]:
    """Each of ``exprs`` trained once per seed of ``seeds`` from the proxy's base policy, in
    populations of the proxy's size, and scored on its validation split."""
    from derl_bench.experiments.landscape import LandscapeConfig, score_jobs
    from derl_bench.experiments.proxy.run import base_model

    model = str(base_model(Path(proxy.output) / "base-model", proxy.base_spec, proxy.env_id,
                           proxy.family))
    size = int(proxy.population)
    jobs = [(exprs[i:i + size], seed, out / f"s{seed}-{i // size:03d}")
            for seed in seeds for i in range(0, len(exprs), size)]
    return score_jobs(LandscapeConfig(proxy=proxy, seeds=seeds, confirm_seeds=[]), model, jobs,
                      log)


def _row(expr: str, seeds: list[int], scores: dict[tuple[str, int], float]) -> dict[str, Any]:
    values = [scores[expr, s] for s in seeds]
    return {"expr": expr, "scores": values, "mean": round(mean_sd(values)[0], 4)}


def run_climb(config: ClimbConfig, log: Any = print) -> dict[str, Any]:
    """Run the experiment (see the module docstring); returns what ``climb.json`` holds."""
    from derl_bench.reward.planted import planted_reward

    out = config.output
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    proxy = config.proxy
    planted = planted_reward(proxy.env_id, proxy.family)
    weights, counts = draw_neighbours(planted, proxy.env_id, config.neighbours,
                                      config.draw_seed)
    exprs = list(dict.fromkeys([planted, *HAND_MADE.values(), *weights]))
    log(f"climb: {len(weights)} neighbour classes of {planted!r} ({counts['draws']} draws), "
        f"the planted and {len(HAND_MADE)} hand-made rewards, seeds {config.seeds}")
    scores = _train_and_score(proxy, exprs, config.seeds, out, log)

    def row(expr: str) -> dict[str, Any]:
        return _row(expr, config.seeds, scores)

    hand = {name: row(expr) for name, expr in HAND_MADE.items()}
    best_name = max(hand, key=lambda name: hand[name]["mean"])
    bar, top = hand[CLIMB_BAR]["mean"], row(planted)["mean"]
    neighbours = []
    for expr, weight in weights.items():
        entry = row(expr)
        neighbours.append({**entry, "draws": weight, "climbs": entry["mean"] > bar,
                           "reaches_planted": entry["mean"] >= top})
    neighbours.sort(key=lambda r: -r["mean"])
    draws = sum(weights.values())
    climbing = [r for r in neighbours if r["climbs"]]
    share = sum(r["draws"] for r in climbing) / draws
    low, high = clopper_pearson(len(climbing), len(neighbours))
    result = {
        "env_id": proxy.env_id, "planted": row(planted), "hand_made": hand,
        "best_hand_made": best_name, "bar": CLIMB_BAR, "seeds": config.seeds,
        "validation_episodes": proxy.validation_episodes, "drawn": counts,
        "neighbours": neighbours, "threshold": config.threshold,
        "climbing_draw_share": round(share, 4),
        "climbing_classes": len(climbing), "classes": len(neighbours),
        "climbing_class_share_ci": [round(low, 4), round(high, 4)],
        "reaching_planted_draw_share": round(
            sum(r["draws"] for r in neighbours if r["reaches_planted"]) / draws, 4),
        "passes": share >= config.threshold,
        "wall_time_s": round(time.perf_counter() - started, 1),
    }
    write_json_atomic(out / "climb.json", result)
    write_text_atomic(out / "climb.md", climb_markdown(result))
    return result


def climb_markdown(result: dict[str, Any]) -> str:
    """The climb's summary for the task's board."""
    drawn, bar = result["drawn"], result.get("bar", CLIMB_BAR)
    low, high = result["climbing_class_share_ci"]
    seeds = ", ".join(str(s) for s in result["seeds"])
    lines = [
        "## Climbability: one-edit neighbours of the planted reward",
        "",
        f"{drawn['draws']} subtree mutations of `{result['planted']['expr']}` (island "
        f"evolution's operator): {drawn['constant']} constant on the probe set and "
        f"{drawn['same']} in the planted reward's own behaviour class (not trained); the "
        f"others fall in {result['classes']} classes, each trained once per fresh seed "
        f"({seeds}) with the proxy's inner recipe and scored on "
        f"{result['validation_episodes']} validation problems. Success in %; a neighbour "
        f"*climbs* when its mean is above {bar}'s (the best hand-made reward here: "
        f"{result['best_hand_made']}).",
        "",
        "| reward | draws | mean | per seed | climbs |",
        "|---|---|---|---|---|",
    ]
    fixed = [("planted", result["planted"]), *result["hand_made"].items()]
    for name, r in fixed:
        lines.append(f"| {name} (`{r['expr']}`) | – | {100 * r['mean']:.1f} | "
                     + ", ".join(f"{100 * s:.1f}" for s in r["scores"]) + " | – |")
    for r in result["neighbours"]:
        lines.append(f"| `{r['expr']}` | {r['draws']} | {100 * r['mean']:.1f} | "
                     + ", ".join(f"{100 * s:.1f}" for s in r["scores"])
                     + f" | {'yes' if r['climbs'] else 'no'} |")
    share = 100 * result["climbing_draw_share"]
    lines += [
        "",
        f"Climbing: {share:.1f}% of the trained draws ({result['climbing_classes']} of "
        f"{result['classes']} classes, 95% Clopper-Pearson interval over classes "
        f"[{100 * low:.1f}, {100 * high:.1f}]%); reaching the planted reward's mean: "
        f"{100 * result['reaching_planted_draw_share']:.1f}% of the draws.",
        "",
        (f"At least {100 * result['threshold']:.0f}% of the draws climb: the task passes this "
         "check." if result["passes"] else
         f"Fewer than {100 * result['threshold']:.0f}% of the draws climb: the task fails this "
         "check."),
    ]
    return "\n".join(lines) + "\n"


def paid_parts(reward: MetaReward, probe: ProbeSet, parts: tuple[str, ...],
               ) -> tuple[str, ...]:
    """The primitives of ``parts`` that ``reward`` (a compiled Meta-Reward) pays on ``probe``.

    >>> from derl_bench.family import resolve_family
    >>> from derl_bench.meta.probe import probe_set
    >>> from derl_bench.reward import compile_reward
    >>> probe = probe_set("derl/DigitsBalance-v0", resolve_family("derl/DigitsBalance-v0"),
    ...                   problems=4)
    >>> parts = ("digit_recall", "length_fit")
    >>> def paid(expr):
    ...     return paid_parts(compile_reward(expr, domain=probe.env_id), probe, parts)
    >>> paid("digit_recall * length_fit**2"), paid("digit_recall - length_fit"), paid("outcome")
    (('digit_recall', 'length_fit'), ('digit_recall',), ())
    """
    return tuple(name for name in parts if probe.pays(reward, name) > 0)


def _parts(env_id: str, family: Family) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The planted reward's primitives, and those of the first part its card names."""
    from derl_bench.reward import compile_reward, env_primitives
    from derl_bench.reward.planted import planted_parts, planted_reward

    declared = env_primitives(env_id, family)
    parts = compile_reward(planted_reward(env_id, family), declared).primitives
    named = planted_parts(env_id, family)
    if not named:
        raise ValueError(f"the upward step starts from picks that pay the planted reward's "
                         f"first part, and {env_id}'s card names none (planted_parts)")
    first = compile_reward(next(iter(named.values())), declared).primitives
    return parts, first


def upward_starts(evidence: list[Path], probe: ProbeSet, parts: tuple[str, ...],
                  first: tuple[str, ...]) -> list[str]:
    """The distinct rewards picked in the boards' ``runs.json`` files ``evidence`` that pay
    exactly ``first`` of ``parts``, in the order the files list them."""
    from derl_bench.reward import compile_reward

    starts: list[str] = []
    for path in evidence:
        try:
            runs = json.loads(Path(path).read_text())["runs"]
            picked = [str(run["picked"]["expr"]) for run in runs]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a board's runs.json (runs[].picked.expr): "
                             f"{err}") from err
        for expr in picked:
            if expr in starts:
                continue
            if paid_parts(compile_reward(expr, domain=probe.env_id), probe, parts) == first:
                starts.append(expr)
    return starts


def draw_upward(start: str, env_id: str, draws: int, seed: int, probe: ProbeSet,
                parts: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, int]]:
    """``draws`` one-edit neighbours of ``start``: those that pay every one of ``parts``,
    grouped by behaviour class (behaviour key -> its first draw and how many draws fell in
    it), and the draw counts (``draws``, ``constant``, ``same``: in ``start``'s class,
    ``pays_all``).

    >>> from derl_bench.family import resolve_family
    >>> from derl_bench.meta.probe import probe_set
    >>> probe = probe_set("derl/DigitsBalance-v0", resolve_family("derl/DigitsBalance-v0"),
    ...                   problems=4)
    >>> classes, counts = draw_upward("digit_recall", probe.env_id, 50, 0, probe,
    ...                               ("digit_recall", "length_fit"))
    >>> counts["draws"], sum(c["draws"] for c in classes.values()) == counts["pays_all"]
    (50, True)
    """
    from derl_bench.meta.evolve import mutate
    from derl_bench.meta.probe import behaviour_key
    from derl_bench.reward import compile_reward

    rng = random.Random(seed)
    own = behaviour_key(compile_reward(start, domain=env_id), probe)
    classes: dict[str, Any] = {}
    counts = {"draws": draws, "constant": 0, "same": 0, "pays_all": 0}
    for _ in range(draws):
        child = compile_reward(mutate(start, env_id, rng), domain=env_id)
        key = behaviour_key(child, probe)
        if key is None:
            counts["constant"] += 1
        elif key == own:
            counts["same"] += 1
        elif paid_parts(child, probe, parts) == parts:
            counts["pays_all"] += 1
            found = classes.setdefault(key, {"expr": child.expr, "draws": 0})
            found["draws"] += 1
    return classes, counts


@dataclass
class UpwardConfig:
    """The upward step's size; ``proxy`` gives the task, base policy, inner recipe and
    validation, ``evidence`` the boards' ``runs.json`` files whose picks are the starts."""

    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    evidence: list[Path] = field(default_factory=list)
    draws: int = 100
    seeds: list[int] = field(default_factory=lambda: fresh_seeds(2, UPWARD_OFFSET))
    draw_seed: int = 0
    max_starts: int | None = None

    def __post_init__(self) -> None:
        if self.draws < 1 or not self.seeds or not self.evidence:
            raise ValueError("the upward step needs at least one draw, one seed and one "
                             "board's runs.json")

    @property
    def output(self) -> Path:
        return Path(self.proxy.output) / "upward"


def run_upward(config: UpwardConfig, log: Any = print) -> dict[str, Any]:
    """Run the upward step (see the module docstring); returns what ``upward.json`` holds."""
    from derl_bench.meta.probe import probe_set

    proxy = config.proxy
    probe = probe_set(proxy.env_id, proxy.family)
    parts, first = _parts(proxy.env_id, proxy.family)
    starts = upward_starts(config.evidence, probe, parts, first)[:config.max_starts]
    if not starts:
        raise ValueError(f"no pick in {', '.join(map(str, config.evidence))} pays only "
                         f"{', '.join(first)} of the planted reward's {', '.join(parts)}")
    out = config.output
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    drawn: list[tuple[str, dict[str, Any], dict[str, int]]] = []
    classes: dict[str, str] = {}  # behaviour key -> the class's first draw, over all starts
    for index, start in enumerate(starts):
        found, counts = draw_upward(start, proxy.env_id, config.draws,
                                    config.draw_seed * 1_000_003 + index, probe, parts)
        drawn.append((start, found, counts))
        for key, cls in found.items():
            classes.setdefault(key, cls["expr"])
    exprs = list(dict.fromkeys([*(s for s, found, _ in drawn if found), *classes.values()]))
    log(f"upward: {len(starts)} starts paying {', '.join(first)} only, {config.draws} draws "
        f"each; {len(classes)} classes pay {', '.join(parts)}; {len(exprs)} rewards to train "
        f"on seeds {config.seeds}")
    scores = _train_and_score(proxy, exprs, config.seeds, out, log) if exprs else {}

    def row(expr: str) -> dict[str, Any]:
        return _row(expr, config.seeds, scores)

    rows = []
    for start, found, counts in drawn:
        entry: dict[str, Any] = {"start": start, "drawn": counts, "neighbours": []}
        if found:
            entry.update(row(start))
            for key, cls in found.items():
                neighbour = row(classes[key])
                neighbour.update(draws=cls["draws"], steps_up=neighbour["mean"] > entry["mean"])
                entry["neighbours"].append(neighbour)
            entry["neighbours"].sort(key=lambda r: -r["mean"])
        rows.append(entry)
    total = sum(r["drawn"]["draws"] for r in rows)
    paying = sum(r["drawn"]["pays_all"] for r in rows)
    stepping = sum(n["draws"] for r in rows for n in r["neighbours"] if n["steps_up"])
    result = {
        "env_id": proxy.env_id, "parts": list(parts), "first": list(first),
        "evidence": [str(p) for p in config.evidence], "seeds": config.seeds,
        "validation_episodes": proxy.validation_episodes, "draws_per_start": config.draws,
        "starts": rows, "draws": total, "pays_all_draws": paying,
        "pays_all_share": round(paying / total, 4),
        "pays_all_ci": [round(x, 4) for x in clopper_pearson(paying, total)],
        "steps_up_draws": stepping, "steps_up_share": round(stepping / total, 4),
        "steps_up_ci": [round(x, 4) for x in clopper_pearson(stepping, total)],
        "wall_time_s": round(time.perf_counter() - started, 1),
    }
    write_json_atomic(out / "upward.json", result)
    write_text_atomic(out / "upward.md", upward_markdown(result))
    return result


def upward_markdown(result: dict[str, Any]) -> str:
    """The upward step's summary for the task's board."""
    parts, first = " and ".join(result["parts"]), ", ".join(result["first"])
    seeds = ", ".join(str(s) for s in result["seeds"])
    starts = result["starts"]
    lines = [
        f"## The upward step: from picks paying {first} only to rewards paying {parts}",
        "",
        f"{len(starts)} distinct picks that pay {first} and no other part of the planted "
        f"reward, {result['draws_per_start']} subtree mutations of each (island evolution's "
        f"operator). A neighbour that pays {parts} and is not constant or in its start's "
        f"behaviour class trains, with its start, one inner run per fresh seed ({seeds}), "
        f"scored on {result['validation_episodes']} validation problems (success in %). It "
        "*steps up* when its mean is above its start's.",
        "",
        "| start | mean | draws paying every part | neighbour | draws | mean | steps up |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in starts:
        if not r["neighbours"]:
            lines.append(f"| `{r['start']}` | – | 0 of {r['drawn']['draws']} | – | – | – | – |")
            continue
        for i, n in enumerate(r["neighbours"]):
            head = (f"| `{r['start']}` | {100 * r['mean']:.1f} | {r['drawn']['pays_all']} of "
                    f"{r['drawn']['draws']} ") if i == 0 else "| | | "
            lines.append(f"{head}| `{n['expr']}` | {n['draws']} | {100 * n['mean']:.1f} | "
                         f"{'yes' if n['steps_up'] else 'no'} |")
    low, high = result["pays_all_ci"]
    up_low, up_high = result["steps_up_ci"]
    lines += [
        "",
        f"Of {result['draws']} draws, {result['pays_all_draws']} pay {parts} "
        f"({100 * result['pays_all_share']:.2f}%, 95% Clopper-Pearson [{100 * low:.2f}, "
        f"{100 * high:.2f}]%) and {result['steps_up_draws']} of them step up "
        f"({100 * result['steps_up_share']:.2f}% of the draws, [{100 * up_low:.2f}, "
        f"{100 * up_high:.2f}]%).",
    ]
    return "\n".join(lines) + "\n"


__all__ = ["CLIMB_OFFSET", "UPWARD_OFFSET", "ClimbConfig", "UpwardConfig", "climb_markdown",
           "draw_neighbours", "draw_upward", "paid_parts", "run_climb", "run_upward",
           "upward_markdown", "upward_starts"]
