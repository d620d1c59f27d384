"""Every figure ``docs/tasks.md`` and a task's study state, recomputed from its committed evidence
(``leaderboards/<task>/evidence/``), and the board's ``summary.md`` rebuilt from it.

What each evidence file gives (``scripts/recompute_tasks.py`` prints them all):

- ``planted.json`` (check 1): every reward's confirmation scores per seed, so each mean ± SD,
  the planted-minus-hand-made differences Holm-corrected together, the MDEs planned from the
  pilot's scores and the verdict;
- ``landscape.json`` (check 2): every draw's scores, so how many draws score under 2%, how many
  beat the best hand-made reward's 2-seed mean, and how many the confirmation finds measurably
  better (each interval above 0), uncorrected and Holm-corrected, and check 2's rule over the
  raw draws (each hand-made reward beaten, Holm across the confirmed rewards) with its
  Clopper-Pearson interval;
- ``climb.json`` (check 3): every one-edit neighbour's scores per seed, so which climb above
  the best hand-made reward, the share of the trained draws that do and the verdict;
- ``upward.json`` (check 3's upward step, where run): every start's and neighbour's scores per
  seed, so which neighbours step up (their mean above their start's on the same seeds), the
  shares of the draws that pay every planted part and that step up, with Clopper-Pearson
  intervals, and the chance that ``MUTATIONS`` mutations of a pick take the step;
- ``modes.json``: each policy's modes, wrap positions right, primitives and success;
- the board: ``runs.json`` (per run: seconds, the picked reward and its re-trains' scores per
  level and seed, the pick's and the mechanism's re-scores, the selected policy's figures) with
  ``generations.json``, from which :func:`board_result` rebuilds the result ``summary.md`` was
  rendered from. A board made before ``runs.json`` was written has only its generations and
  records: the mechanism's recorded endpoint and the selected policies are recomputed, and what
  cannot be (the per-seed re-trains, run seconds, picks) is said to be missing, not invented;
- ``evidence/controls/`` (the control searchers against random search, a board of its own):
  its figures as a board's, each family of :data:`~derl_bench.experiments.controls.FAMILIES`
  (Holm within it, the sign-flip and McNemar tests) and each method's share of trained
  proposals that validate at the "found the class" threshold or above.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from derl_bench.experiments.climb import CLIMB_BAR
from derl_bench.experiments.controls import (
    FOUND_CLASS,
    control_comparisons,
    control_lines,
    control_pairs,
)
from derl_bench.experiments.evidence import (
    best_so_far_table,
    comparisons,
    endpoint,
    planted_target,
    trains_a_run,
)
from derl_bench.experiments.landscape import draw_share, judge
from derl_bench.experiments.planted import planned_mde
from derl_bench.experiments.proxy.config import LEVELS, slug
from derl_bench.experiments.proxy.report import (
    BEST_SO_FAR_AT,
    EVIDENCE,
    mean_se,
    summarize,
    summary_markdown,
)
from derl_bench.experiments.proxy.run import RUNS, evidence_result
from derl_bench.experiments.stats import (
    above_zero,
    clopper_pearson,
    describe,
    holm,
    mean_sd,
    paired_difference,
)

MISSING = "not in the evidence"
"""How the output marks a figure its evidence cannot give."""


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def planted_figures(planted: dict[str, Any]) -> list[str]:
    """Check 1 from ``planted.json``: each reward's confirmation mean ± SD, the planted reward
    minus each hand-made one (Holm over the comparisons, the MDE planned from the pilot) and
    the verdict, all recomputed from the per-seed scores."""
    confirm, pilot = planted["confirm"]["scores"], planted["pilot"]["scores"]
    n = len(planted["confirm"]["seeds"])
    expr = planted["planted"]
    lines = [f"check 1, planted `{expr}`: {n} confirmation seeds "
             f"(pilot {len(planted['pilot']['seeds'])})"]
    for name, reward in planted["rewards"].items():
        mean, sd = mean_sd(confirm[reward])
        lines.append(f"  {name} (`{reward}`): {_pct(mean)} ± {_pct(sd)} (mean ± SD)")
    names = [name for name in planted["rewards"] if name != "planted"]
    found = holm([paired_difference(confirm[expr], confirm[planted["rewards"][name]])
                  for name in names])
    parts = set(planted.get("parts") or {})
    verdicts = []
    for name, d in zip(names, found, strict=True):
        if name in parts:  # a part need only be beaten (the check's rule, planted.py)
            passes = above_zero(d)
            verdicts.append(passes)
            lines.append(f"  planted − {name} (part): {describe(d)}; "
                         f"{'passes' if passes else 'fails'}")
            continue
        planned = planned_mde([a - b for a, b in zip(pilot[expr], pilot[planted["rewards"][name]],
                                                     strict=True)], n)
        passes = d["mean"] >= planted["margin"] * planned and above_zero(d)
        verdicts.append(passes)
        lines.append(f"  planted − {name}: {describe(d)}; planned MDE {_pct(planned)}; "
                     f"{'passes' if passes else 'fails'}")
    lines.append(f"  verdict: {'passes' if all(verdicts) else 'fails'}")
    return lines


def landscape_figures(landscape: dict[str, Any]) -> list[str]:
    """Check 2 from ``landscape.json``, recomputed from every draw's and confirmation's
    scores."""
    randoms, hand = landscape["random"], landscape["hand_made"]
    kept, draws = landscape["drawn"]["kept"], landscape["drawn"]["draws"]
    found = judge([{k: c[k] for k in ("expr", "hand_made", "scores")}
                   for c in landscape["confirm"]])
    # The best hand-made reward is the confirmation's (fresh seeds), as the landscape judges.
    best_name = next(h for h in hand if hand[h]["expr"] == found["best_hand_made"])
    best = hand[best_name]["mean"]
    confirmed = sum(not c["hand_made"] for c in landscape["confirm"])
    better, holm_better = len(found["measurably_better"]), len(found["measurably_better_holm"])
    return [
        f"check 2: {kept} rewards kept of {draws} draws; {confirmed} confirmed on "
        f"{len(landscape['confirm'][0]['scores'])} further seeds",
        f"  under 2%: {sum(r['mean'] < 0.02 for r in randoms)} of {kept}",
        f"  higher {len(randoms[0]['scores'])}-seed mean than the best hand-made reward "
        f"({best_name}, {_pct(best)}): {sum(r['mean'] > best for r in randoms)} of {kept}",
        f"  measurably better than every hand-made reward, uncorrected: {better} of {kept} "
        f"kept ({_pct(better / kept)}%); Holm-corrected over all "
        f"{confirmed * (len(hand))} comparisons: {holm_better}",
        *_check2_rule(landscape, found),
    ]


def _check2_rule(landscape: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """Check 2's rule (each reward against every hand-made one, Holm across the confirmed
    rewards) and the share of raw draws it gives, with its Clopper-Pearson interval; absent
    from a landscape that did not record its draws' classes."""
    if "weights" not in landscape["drawn"]:
        return [f"  check 2's rule over raw draws: {MISSING} (no class weights)"]
    share = draw_share(landscape, found["better_each_holm"])
    return [f"  check 2's rule (each hand-made reward beaten, Holm across the "
            f"{found['better_each_family']} confirmed rewards): "
            f"{len(found['better_each_holm'])} rewards, {share['winning_draws']} of "
            f"{share['draws']} raw draws ({_pct(share['share'])}%, 95% Clopper-Pearson "
            f"[{_pct(share['ci'][0])}, {_pct(share['ci'][1])}]%)"]


def climb_figures(climb: dict[str, Any]) -> list[str]:
    """Check 3 from ``climb.json``: which neighbours climb above outcome's mean on the same
    seeds (:data:`~derl_bench.experiments.climb.CLIMB_BAR`), and the share of the trained draws
    that do, recomputed from every neighbour's per-seed scores."""
    hand = {name: mean_sd(h["scores"])[0] for name, h in climb["hand_made"].items()}
    best = max(hand, key=lambda name: hand[name])
    bar = climb.get("bar", CLIMB_BAR)
    top = mean_sd(climb["planted"]["scores"])[0]
    rows = [(n["draws"], mean_sd(n["scores"])[0]) for n in climb["neighbours"]]
    draws = sum(weight for weight, _ in rows)
    climbing = [(weight, m) for weight, m in rows if round(m, 4) > round(hand[bar], 4)]
    low, high = clopper_pearson(len(climbing), len(rows))
    share = sum(weight for weight, _ in climbing) / draws
    reaching = sum(weight for weight, m in rows if round(m, 4) >= round(top, 4)) / draws
    constant = climb["drawn"]["constant"]
    return [
        f"check 3, climb from `{climb['planted']['expr']}`: {climb['drawn']['draws']} one-edit "
        f"draws, {constant} constant, {len(rows)} classes trained on {len(climb['seeds'])} seeds",
        f"  planted {_pct(top)}; {bar} {_pct(hand[bar])}; best hand-made ({best}) "
        f"{_pct(hand[best])}",
        f"  climbing above {bar}: {len(climbing)} of {len(rows)} classes, {_pct(share)}% of "
        f"the {draws} trained draws (95% Clopper-Pearson over classes "
        f"[{_pct(low)}, {_pct(high)}]%); reaching the planted reward: {_pct(reaching)}%",
        f"  verdict: {'passes' if share >= climb['threshold'] else 'fails'} "
        f"(at least {100 * climb['threshold']:.0f}% must climb)",
    ]


MUTATIONS = 24
"""The mutations of a pick the upward step's chance is read at: the board's last 3
generations of 8 proposals (the DigitsBalance study, "The upward step")."""


def upward_figures(upward: dict[str, Any]) -> list[str]:
    """Check 3's upward step from ``upward.json``: which neighbours step up (their mean above
    their start's on the same seeds), recounted from the per-seed scores, and the shares of the
    draws, with Clopper-Pearson intervals."""
    draws = sum(start["drawn"]["draws"] for start in upward["starts"])
    paying = sum(start["drawn"]["pays_all"] for start in upward["starts"])
    stepping, trained = 0, 0
    for start in upward["starts"]:
        if not start["neighbours"]:
            continue
        bar = round(mean_sd(start["scores"])[0], 4)
        for n in start["neighbours"]:
            trained += 1
            stepping += n["draws"] * (round(mean_sd(n["scores"])[0], 4) > bar)
    lines = [f"check 3, upward step from {len(upward['starts'])} picks paying "
             f"{', '.join(upward['first'])} only: {draws} one-edit draws, neighbours trained "
             f"on {len(upward['seeds'])} seeds"]
    for label, count in (("paying " + " and ".join(upward["parts"]), paying),
                         ("stepping up", stepping)):
        low, high = clopper_pearson(count, draws)
        lines.append(f"  {label}: {count} of {draws} draws, {100 * count / draws:.2f}% "
                     f"[{100 * low:.2f}, {100 * high:.2f}]")
    share = stepping / draws
    low, high = clopper_pearson(stepping, draws)
    lines.append(f"  {trained} start-neighbour pairs trained; chance that {MUTATIONS} mutations "
                 f"of a pick step up: {_pct(1 - (1 - share) ** MUTATIONS)}% "
                 f"[{_pct(1 - (1 - low) ** MUTATIONS)}, {_pct(1 - (1 - high) ** MUTATIONS)}]")
    return lines


def modes_figures(modes: dict[str, Any]) -> list[str]:
    """The modes table from ``modes.json``: shares in %."""
    lines = ["modes (% of the validation problems):"]
    for label, f in modes.items():
        shares = ", ".join(f"{m} {_pct(v)}" for m, v in sorted(f["modes"].items()))
        prims = f["primitives"]
        lines.append(f"  {label}: {shares}; wrap positions right {_pct(f['wrap_right'])}; "
                     f"g2 {_pct(prims.get('format_boxed', 0.0))}, "
                     f"g3 {_pct(prims.get('cot_steps', 0.0))}, "
                     f"g4 {_pct(prims.get('loose_outcome', 0.0))}; "
                     f"success {_pct(prims['outcome'])}")
    return lines


def board_result(board: Path) -> dict[str, Any] | None:
    """The result ``summary.md`` was rendered from, rebuilt from ``evidence/runs.json`` and
    ``evidence/generations.json`` (:func:`~derl_bench.experiments.proxy.run.evidence_result`);
    ``None`` for a board without ``runs.json``."""
    result = evidence_result(board)
    if result is None:
        return None
    rows, start = result["runs"], result["config"]["endpoint_from"]
    return {**result, "summary": summarize(rows, result["base"], start),
            "comparisons": comparisons(rows, result["config"]["methods"], start)}


def _old_board_rows(board: Path) -> list[dict[str, Any]]:
    """A board without ``runs.json``: its generations, and each run's selected policy from
    its records."""
    generations = _read(board / EVIDENCE / "generations.json") or {"runs": []}
    rows = []
    for g in generations["runs"]:
        figures = {}
        for level in LEVELS:
            record = _read(board / f"{slug(g['method'])}-s{g['seed']}-{level}.json")
            if record is not None:
                figures[level] = {"mean": record["results"]["success_rate"]["mean"]}
        rows.append({**g, "eval": figures})
    return rows


def board_figures(board: Path) -> list[str]:
    """The board's figures (:func:`board_result`), and whether ``summary.md`` renders from
    its evidence exactly; for a board made before ``runs.json``, what can be recomputed and
    what is missing."""
    result = board_result(board)
    if result is not None:
        lines = [f"board: {len(result['runs'])} runs, "
                 f"wall time {result['wall_time_s'] / 60:.0f} min"]
        for row in result["runs"]:
            picked = row.get("picked") or {}
            scores = "; ".join(f"{lvl} " + ", ".join(_pct(v) for v in picked[lvl]["scores"])
                               for lvl in LEVELS if lvl in picked)
            lines.append(f"  {row['method']} seed {row['seed']}: {row['seconds']:.0f} s; picked "
                         f"`{picked.get('expr', row.get('best_expr'))}` ({row.get('pick_rule')})"
                         f"; re-trains {scores or MISSING}")
        lines += _method_lines(result["summary"])
        lines += _comparison_lines(result["comparisons"])
        summary = board / "summary.md"
        same = summary.is_file() and summary.read_text() == summary_markdown(result, board)
        lines.append(f"  summary.md {'renders' if same else 'does NOT render'} exactly from the "
                     "evidence")
        return lines + best_so_far_figures(board)
    rows = _old_board_rows(board)
    if not rows:
        return []
    config = (_read(board / EVIDENCE / "generations.json") or {})["config"]
    start = config["endpoint_from"]
    lines = [f"board: {len(rows)} runs; evidence/{RUNS} is missing (the board was made before "
             "it was written): the per-seed re-train scores at L0/L1/L2, the seconds per run "
             f"and the picked rewards are {MISSING}, so the primary endpoint's figures "
             "(summary.md's means) cannot be recomputed; from the generations and records:"]
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        late = mean_se([endpoint(r, start) for r in mine])
        selected = {lvl: mean_se([r["eval"][lvl]["mean"] for r in mine])
                    for lvl in LEVELS if all(lvl in r["eval"] for r in mine)}
        lines.append(f"  {method}: mechanism, proposals' recorded mean over generations "
                     f"{start}–{config['outer_steps'] - 1}: {_cell(late)}; selected policy "
                     + ", ".join(f"{lvl} {_cell(v)}" for lvl, v in selected.items()))
    found = comparisons(rows, config["methods"], start)
    lines.append("  the proposals' recorded means compared (the only comparisons these files "
                 "allow, so the one Holm family here):")
    lines += [f"  derl − {c['minus']}: {describe(c['endpoint'])}" for c in found]
    return lines + best_so_far_figures(board)


def best_so_far_figures(board: Path) -> list[str]:
    """From ``candidates.jsonl``: each method's best validation score found after the inner
    runs it trained (mean over seeds; a repeated or constant proposal trains none), the runs
    it trained of the proposals it made, and, where the board holds its task's planted check,
    how many trained runs each seed needed to reach the planted reward's confirmed score."""
    path = board / EVIDENCE / "candidates.jsonl"
    if not path.is_file():
        return []
    candidates = [json.loads(line) for line in path.read_text().splitlines()]
    target = planted_target(board / EVIDENCE)
    table = best_so_far_table(candidates, target)
    lines = ["best so far against inner runs trained (mean over seeds)"
             + (f"; runs to reach the planted reward's confirmed {_pct(target)}%"
                if target is not None else "") + ":"]
    for method, entry in table.items():
        curve = entry["curve"]
        marks = ", ".join(f"{p['runs']} runs {_pct(p['mean'])}" for p in curve
                          if p["runs"] in BEST_SO_FAR_AT or p["runs"] == len(curve))
        reach = ""
        if target is not None:
            runs = entry["runs_to_reach"]
            reached = [r for r in runs if r is not None]
            reach = (f"; reached on {len(reached)} of {len(runs)} seeds, after "
                     + ", ".join("never" if r is None else str(r) for r in runs) + " runs")
        trained, made = entry["trained"], entry["proposals"]
        lines.append(f"  {method}: {marks}{reach}; trained {sum(trained)} runs of "
                     f"{sum(made)} proposals")
    return lines


def _cell(figures: dict[str, Any]) -> str:
    return f"{_pct(figures['mean'])} ± {_pct(figures['se'])}"


def _method_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    for method, f in summary.items():
        cells = [f"picked {lvl} {_cell(f[f'picked_{lvl}'])}" for lvl in LEVELS
                 if f"picked_{lvl}" in f]
        cells.append(f"mechanism {_cell(f['endpoint'])}")
        if "endpoint_rescored" in f:
            cells.append(f"re-scored {_cell(f['endpoint_rescored'])}")
        cells += [f"selected {lvl} {_cell(f[lvl])}" for lvl in LEVELS if lvl in f]
        lines.append(f"  {method}: " + "; ".join(cells))
    return lines


def _comparison_lines(found: list[dict[str, Any]]) -> list[str]:
    lines = []
    for c in found:
        for key in ("picked_L0", "picked_L1", "picked_L2", "endpoint"):
            if key in c:
                what = "mechanism" + (" (re-scored)" if c.get("endpoint_rescored") else "") \
                    if key == "endpoint" else key.replace("_", " ")
                lines.append(f"  {c['method']} − {c['minus']}, {what}: {describe(c[key])}")
    return lines


CONTROLS = "controls"
"""The folder of ``evidence/`` that holds the controls' own evidence and ``summary.md``."""


def controls_figures(board: Path) -> list[str]:
    """The controls' figures (see the module docstring); none for a board without them."""
    folder = board / EVIDENCE / CONTROLS
    result = board_result(folder)
    if result is None:
        return []
    lines = [f"controls (evidence/{CONTROLS}/):"] + [f"  {line}" for line in
                                                     board_figures(folder)]
    threshold = FOUND_CLASS.get(result["env_id"])
    methods = {row["method"] for row in result["runs"] if row.get("picked")}
    for family, pairs in control_pairs(methods).items():
        lines.append(f"  {family} family (Holm within it):")
        lines += [f"    {line}" for line in
                  control_lines(control_comparisons(result, pairs, threshold))]
    path = folder / EVIDENCE / "candidates.jsonl"
    if threshold is not None and path.is_file():
        trained: dict[str, list[bool]] = {}
        for line in path.read_text().splitlines():
            c = json.loads(line)
            if trains_a_run(c):
                trained.setdefault(c["method"], []).append(float(c["score"]) >= threshold)
        for method, hits in trained.items():
            lines.append(f"  {method}: {sum(hits)} of {len(hits)} trained proposals "
                         f"({_pct(sum(hits) / len(hits))}%) validate at "
                         f"{_pct(threshold)}% or more")
    return lines


def task_figures(board: Path) -> list[str]:
    """Every figure of one task's evidence (see the module docstring), in the order
    the docs state them (``docs/tasks.md`` and the task's study)."""
    evidence = board / EVIDENCE
    lines: list[str] = []
    for name, figures in (("planted.json", planted_figures),
                          ("landscape.json", landscape_figures), ("climb.json", climb_figures),
                          ("upward.json", upward_figures), ("modes.json", modes_figures)):
        found = _read(evidence / name)
        if found is None and name == "upward.json":
            continue  # run on the tasks used for a board only
        lines += figures(found) if found is not None else [f"{name}: {MISSING}"]
    return (lines + (board_figures(board) or [f"board: {MISSING}"])
            + controls_figures(board))


def summary_renders(board: Path) -> bool | None:
    """Whether ``summary.md`` is exactly what the board's evidence renders (``None``: the board
    has no ``runs.json`` to render from)."""
    result = board_result(board)
    if result is None:
        return None
    return (board / "summary.md").read_text() == summary_markdown(result, board)


__all__ = ["CONTROLS", "MISSING", "board_figures", "board_result", "controls_figures",
           "landscape_figures", "modes_figures", "planted_figures", "summary_renders",
           "task_figures", "upward_figures"]
