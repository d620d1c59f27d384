"""Every board figure recomputable from its evidence; the pick by re-scoring."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from derl_bench.experiments.evidence import comparisons, generation_table
from derl_bench.experiments.proxy import ProxyConfig
from derl_bench.experiments.proxy.config import config_json
from derl_bench.experiments.proxy.report import summarize
from derl_bench.experiments.proxy.run import write_evidence
from derl_bench.experiments.recompute import MISSING, summary_renders, task_figures
from derl_bench.experiments.rescore import fresh_endpoint, pick, top_rewards
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
METHODS = ["derl", "derl-frozen", "outcome"]


def _script():
    return load_script("scripts/recompute_tasks.py")


def _stated_text(board: str) -> str:
    """What the docs state about ``board``'s task: docs/tasks.md and the board's study."""
    return "\n".join((REPO / path).read_text() for path in (
        "docs/tasks.md", f"leaderboards/{board}/study/README.md"))


def _candidates(method: str, seed: int) -> list[dict]:
    base = 0.1 * seed + (0.3 if method == "derl" else 0.0)
    return [{"generation": g, "index": i, "expr": f"digit_match * {i + 1}" if method != "outcome"
             else "outcome", "status": "scored", "score": round(base + 0.1 * i + 0.05 * g, 3),
             "structure": "linear", "primitives": ["digit_match"], "inner_seed": 8 * g + i,
             "repeat": g > 0 and method != "outcome"}
            for g in range(2) for i in range(2)]


def _row(method: str, seed: int) -> dict:
    cands = _candidates(method, seed)
    means = [sum(c["score"] for c in cands if c["generation"] == g) / 2 for g in range(2)]
    top = top_rewards(cands, 3)
    fresh = {t["expr"]: 0.5 - 0.1 * i + 0.01 * seed for i, t in enumerate(reversed(top))}
    picked = pick(top, fresh)
    rescored = {"seeds": [1], "scores": {e: [v] for e, v in fresh.items()},
                "pick": {"rule": "rescore", "top": top, "expr": picked}}
    if method != "outcome":
        rescored["endpoint"] = fresh_endpoint(cands, range(1, 2), fresh)
    level = {"derl": 0.8, "derl-frozen": 0.7, "outcome": 0.6}[method] + 0.013 * seed
    return {"method": method, "seed": seed, "seconds": 12.5 + seed,
            "generation_mean": means, "generation_best": [max(means)] * 2,
            "validation_by_generation": [max(means)] * 2, "best_expr": top[0]["expr"],
            "best_validation": top[0]["validation"], "candidates": cands,
            "generations": [{}, {}], "pick_rule": "rescore", "rescored": rescored,
            "eval": {lvl: {"mean": level, "n": 500, "lenient_success": level}
                     for lvl in ("L0", "L1", "L2")},
            "picked": {"expr": picked, "seeds": [7, 8], "validation": [0.5, 0.6],
                       **{lvl: {"scores": [level + 0.01 * k for k in range(2)],
                                "mean": round(level + 0.005, 4)}
                          for lvl in ("L0", "L1", "L2")}}}


def _board(tmp_path: Path) -> tuple[Path, dict]:
    rows = [_row(m, s) for m in METHODS for s in (0, 1, 2)]
    config = config_json(ProxyConfig(env_id="derl/DigitsHack-v0", methods=METHODS,
                                     seeds=[0, 1, 2], outer_steps=2, endpoint_from=1))
    base = {lvl: {"mean": 0.01, "n": 500, "lenient_success": 0.02} for lvl in ("L0", "L1", "L2")}
    result = {"config": config, "env_id": "derl/DigitsHack-v0", "wall_time_s": 95.0,
              "base": base, "summary": summarize(rows, base, 1),
              "comparisons": comparisons(rows, METHODS, 1),
              "generations": generation_table(rows, ["digit_match", "outcome"]), "runs": rows}
    board = tmp_path / "board"
    write_evidence(result, board)
    return board, result


def test_the_pick_is_the_best_rescored_reward_not_the_best_single_run():
    cands = [{"generation": 0, "expr": "outcome", "status": "scored", "score": 0.97},
             {"generation": 0, "expr": "digit_match", "status": "scored", "score": 0.90},
             {"generation": 1, "expr": "outcome", "status": "scored", "score": 0.97,
              "repeat": True},
             {"generation": 1, "expr": "progress", "status": "scored", "score": 0.80},
             {"generation": 1, "expr": "g3", "status": "failed", "score": None}]
    top = top_rewards(cands, 3)
    assert [t["expr"] for t in top] == ["outcome", "digit_match", "progress"]
    fresh = {"outcome": 0.76, "digit_match": 0.88, "progress": 0.81}
    assert pick(top, fresh) == "digit_match"
    assert pick(top_rewards(cands, 1), fresh) == "outcome"
    # The repeat of outcome counts at outcome's fresh score, not at its first run's 0.97.
    assert fresh_endpoint(cands, [1], fresh) == pytest.approx((0.76 + 0.81) / 2)


def test_the_pick_rule_is_a_setting_with_rescoring_by_default():
    assert ProxyConfig().pick == "rescore" and ProxyConfig().pick_top >= 3
    assert ProxyConfig().rescore_seeds >= 3
    with pytest.raises(ValueError, match="pick must be one of"):
        ProxyConfig(pick="best-of-all")
    with pytest.raises(ValueError, match="rescore_seeds"):
        ProxyConfig(pick="rescore", rescore_seeds=0)
    assert ProxyConfig(pick="best-run", rescore_seeds=0).pick == "best-run"


def test_a_board_renders_exactly_from_its_evidence_and_the_script_prints_every_run(
        tmp_path, capsys):
    board, result = _board(tmp_path)
    assert summary_renders(board) is True
    assert _script().main([str(board)]) == 0
    out = capsys.readouterr().out
    for row in result["runs"]:
        scores = ", ".join(f"{100 * v:.1f}" for v in row["picked"]["L2"]["scores"])
        assert (f"{row['method']} seed {row['seed']}: {row['seconds']:.0f} s; picked "
                f"`{row['picked']['expr']}`") in out
        assert f"L2 {scores}" in out
    mechanism = next(c for c in result["comparisons"] if c["minus"] == "derl-frozen")
    assert mechanism["endpoint_rescored"] and "mechanism (re-scored)" in out
    summary = (board / "summary.md").read_text()
    assert "(re-scored)" in summary and "best fresh mean picked" in summary


def test_a_changed_number_in_the_evidence_fails_the_recomputation(tmp_path, capsys):
    board, _ = _board(tmp_path)
    path = board / "evidence" / "runs.json"
    runs = json.loads(path.read_text())
    runs["runs"][0]["picked"]["L0"]["mean"] += 0.1
    path.write_text(json.dumps(runs))
    assert summary_renders(board) is False
    assert _script().main([str(board)]) == 1
    assert "does NOT render" in capsys.readouterr().out


def _points(line: str) -> str:
    """``+14.3 [+7.6, +21.1]`` as the docs write it (Unicode minus)."""
    return line.replace("-", "−")


def test_the_committed_tasks_figures_are_recomputed_and_what_is_missing_is_said():
    docs = _stated_text("digitshack")
    hack = REPO / "leaderboards/digitshack"
    lines = task_figures(hack)
    # Check 1: every planted-minus-hand-made difference and interval the docs state.
    found = [m.group(1) for x in lines if (m := re.search(r"planted − .*?: (\S+ \[.*?\])", x))]
    assert len(found) == 3 and all(_points(f) in docs for f in found)
    # The board was made before runs.json: the script says so instead of inventing figures.
    assert any("runs.json is missing" in x and MISSING in x for x in lines)
    # What its generations give: the mechanism's recorded means, as summary.md states them.
    summary = (hack / "summary.md").read_text()
    for x in lines:
        if m := re.match(r"  (\S+): mechanism, .*?: (\d+\.\d ± \d+\.\d)", x):
            assert re.search(rf"\| {m.group(1)} \| {re.escape(m.group(2))} \|", summary), x
    assert summary_renders(hack) is None


def test_a_planted_part_need_only_be_beaten_as_the_check_asks():
    from derl_bench.experiments.recompute import planted_figures

    seeds = list(range(8))
    planted = [0.90, 0.92, 0.95, 0.91, 0.93, 0.94, 0.90, 0.92]
    # The part trails the planted reward by 1-3 points on every seed: beaten, but by far less
    # than 3 x the MDE its noisy pilot would plan; a hand-made reward 20 points behind.
    part = [p - 0.01 - 0.01 * (i % 3) for i, p in enumerate(planted)]
    outcome = [p - 0.2 + 0.01 * (i % 2) for i, p in enumerate(planted)]
    result = {"planted": "a * b", "margin": 3.0, "parts": {"a": "a"},
              "rewards": {"planted": "a * b", "outcome": "outcome", "a": "a"},
              "pilot": {"seeds": seeds[:4], "scores": {"a * b": [0.9, 0.5, 0.9, 0.5],
                                                        "outcome": [0.7, 0.3, 0.7, 0.3],
                                                        "a": [0.5, 0.9, 0.5, 0.9]}},
              "confirm": {"seeds": seeds, "scores": {"a * b": planted, "outcome": outcome,
                                                      "a": part}}}
    lines = planted_figures(result)
    assert any(x.startswith("  planted − a (part):") and x.endswith("passes") for x in lines)
    assert any(x.startswith("  planted − outcome:") and x.endswith("passes") for x in lines)
    assert lines[-1] == "  verdict: passes"


def test_the_climb_is_recomputed_from_every_neighbours_scores():
    from derl_bench.experiments.recompute import climb_figures

    def row(expr: str, scores: list[float], draws: int = 1) -> dict:
        return {"expr": expr, "scores": scores, "draws": draws}

    climb = {"planted": row("a * b", [0.9, 0.8]), "seeds": [1, 2], "threshold": 0.3,
             "drawn": {"draws": 6, "constant": 1},
             "hand_made": {"outcome": row("outcome", [0.1, 0.2]),
                           "average": row("avg", [0.0, 0.1])},
             # 2 of the 5 trained draws climb above outcome's 15.0 (one reaches the planted)
             "neighbours": [row("a * c", [0.9, 0.9]), row("c * b", [0.3, 0.2]),
                            row("c", [0.1, 0.1], draws=3)]}
    lines = climb_figures(climb)
    assert "planted 85.0; outcome 15.0; best hand-made (outcome) 15.0" in lines[1]
    assert "2 of 3 classes, 40.0% of the 5 trained draws" in lines[2]
    assert "reaching the planted reward: 20.0%" in lines[2]
    assert lines[-1].startswith("  verdict: passes")
    # a hand-made reward above outcome (outcome + format on a gate) does not raise the bar:
    # a neighbour between outcome and the planted reward climbs
    climb["hand_made"]["outcome + format"] = row("outcome + format_boxed", [0.5, 0.5])
    lines = climb_figures(climb)
    assert "outcome 15.0; best hand-made (outcome + format) 50.0" in lines[1]
    assert "2 of 3 classes, 40.0% of the 5 trained draws" in lines[2]
    climb["neighbours"][1]["scores"] = [0.1, 0.1]
    assert climb_figures(climb)[-1].startswith("  verdict: fails")


def _checks_2_and_3_are_stated(lines: str, docs: str) -> None:
    """Check 2's share of raw draws with its interval, and check 3's climbing classes, as the
    docs state them."""
    share = re.search(r"(\d+) of (\d+) raw draws \((\S+)%, 95% Clopper-Pearson \[(\S+), (\S+)\]%",
                      lines)
    assert share is not None
    assert (f"{share.group(1)} of the {share.group(2)} raw draws, {share.group(3)}% (95% "
            f"Clopper-Pearson [{share.group(4)}, {share.group(5)}]%)") in docs
    climb = re.search(r"climbing above outcome: (\d+) of (\d+) classes, (\S+)% of the (\d+) "
                      r"trained", lines)
    assert climb is not None
    assert (f"{climb.group(1)} of {climb.group(2)} classes climbs above outcome "
            f"({climb.group(3)}% of the {climb.group(4)} trained draws") in docs


def _stated(board: str) -> tuple[str, str]:
    """What the docs state about ``board`` on one line, and the figures recomputed from its
    evidence (its controls' aside: their own test is below)."""
    figures = "\n".join(task_figures(REPO / "leaderboards" / board))
    return (" ".join(_stated_text(board).split()),
            figures.split("\ncontrols (evidence/controls/):")[0])


def test_the_recall_sparse_checks_the_docs_state_are_what_its_evidence_gives():
    docs, lines = _stated("digitsrecallsparse")
    # check 1: the planted reward minus the sum, as the docs state it
    sum_line = re.search(r"planted − their sum \(part\): (\S+) \[(\S+), (\S+)\]", lines)
    assert sum_line is not None
    assert f"{sum_line.group(1)} [{sum_line.group(2).replace('-', '−')}, {sum_line.group(3)}]" \
        in docs
    _checks_2_and_3_are_stated(lines, docs)


def test_best_so_far_counts_inner_runs_spent_and_the_runs_to_reach_the_planted_score():
    from derl_bench.experiments.evidence import best_so_far_table
    from derl_bench.experiments.recompute import best_so_far_figures

    def c(seed: int, gen: int, index: int, score: float, repeat: bool = False,
          status: str = "scored") -> dict:
        return {"method": "m", "seed": seed, "generation": gen, "index": index,
                "score": score, "repeat": repeat, "status": status}

    candidates = [c(0, 0, 0, 0.1), c(0, 0, 1, 0.5), c(0, 1, 0, 0.9, repeat=True),
                  c(0, 1, 1, 0.7), c(1, 0, 0, 0.3), c(1, 0, 1, 0.2), c(1, 1, 0, 0.4),
                  c(1, 1, 1, 0.0, status="constant")]
    table = best_so_far_table(candidates, target=0.6)["m"]
    # seed 0 trained 3 runs (the repeat is free), seed 1 trained 3 (the constant proposal
    # trains nothing): bests 0.1/0.5/0.7, 0.3/0.3/0.4
    assert [p["mean"] for p in table["curve"]] == [0.2, 0.4, 0.55]
    assert table["runs_to_reach"] == [3, None]
    assert table["proposals"] == [4, 4] and table["trained"] == [3, 3]
    # a seed that trained fewer runs keeps its last best while another searches on
    longer = best_so_far_table([*candidates, c(1, 2, 0, 0.8)])["m"]
    assert [p["mean"] for p in longer["curve"]] == [0.2, 0.4, 0.55, 0.75]
    assert longer["trained"] == [3, 4]
    lines = best_so_far_figures(REPO / "leaderboards/digitshack")
    assert "planted reward's confirmed 90.3%" in lines[0]
    assert len(lines) == 6 and all("reached on" in x for x in lines[1:])


def test_the_balance_checks_the_docs_state_are_what_its_evidence_gives():
    from derl_bench.experiments.recompute import climb_figures, landscape_figures, planted_figures

    docs, lines = _stated("digitsbalance")
    # The card's checks were run twice (its study): the first runs' evidence is in first/.
    first = REPO / "leaderboards/digitsbalance/evidence/first"
    earlier = "\n".join(
        line for name, figures in (("planted.json", planted_figures),
                                   ("landscape.json", landscape_figures),
                                   ("climb.json", climb_figures))
        for line in figures(json.loads((first / name).read_text())))
    for found_lines in (lines, earlier):
        # check 1: every comparison of the planted reward, as the docs state it
        for label in ("outcome", "outcome \\+ format", "average", "digit_recall \\(part\\)",
                      "length_fit \\(part\\)", "their sum \\(part\\)"):
            found = re.search(rf"planted − {label}: (\S+) \[(\S+), (\S+)\]", found_lines)
            assert found is not None, label
            stated = f"{found.group(1)} [{found.group(2).replace('-', '−')}, {found.group(3)}]"
            assert stated in docs, stated
        _checks_2_and_3_are_stated(found_lines, docs)


def test_the_balance_board_verdict_the_docs_state_is_what_its_evidence_gives():
    docs, lines = _stated("digitsbalance")
    # the primary family: DERL minus each method on the picked reward, and the mechanism
    found = re.findall(r"derl − (\S+), (?:picked L0|mechanism \(re-scored\)): (\S+) \[(\S+), "
                       r"(\S+)\] \(Holm p (\S+) over the 5 primary", lines)
    assert len(found) == 5
    for other, mean, low, high, p in found:
        assert f"{mean} [{low}, {high}]".replace("-", "−") in docs, other
        assert f"p {p}" in docs, other
    # every method's primary mean, and DERL's and the control's re-scored late proposals
    for method, figure in re.findall(r"  (\S+): picked L0 (\d+\.\d ± \d+\.\d);", lines):
        assert f"| {method} " in docs and f"| {figure} |" in docs, method
    for method, figure in re.findall(r"  (\S+): .*re-scored (\d+\.\d ± \d+\.\d)", lines):
        assert f"| {figure} |" in docs, method


def test_the_controls_figures_are_recomputed_from_their_evidence():
    """The controls' families and shares, as the DigitsBalance study states them, from the
    committed evidence of the board's controls; their summary renders from it exactly."""
    from derl_bench.experiments.recompute import CONTROLS, controls_figures

    docs = _stated_text("digitsbalance")
    balance = REPO / "leaderboards/digitsbalance"
    lines = controls_figures(balance)
    pairs = {m.group(1): m.group(2) for x in lines
             if (m := re.match(r"    (\S+ - \S+): (\S+) points .*?Holm 95% (\[.*?\])", x))}
    assert set(pairs) == {"control-planted - random", "random - control-negative",
                          "control-one-part - random"}
    for name, mean in pairs.items():
        assert f"{mean} points" in docs, name
    assert "+29.2 points, 95% [+21.2, +37.3]" in docs and any(
        "[+21.2, +37.3]" in x for x in lines)
    assert any(x == "  control-one-part: 251 of 306 trained proposals (82.0%) validate at "
                    "19.3% or more" for x in lines)
    assert "82.0% (251 of 306)" in docs
    assert summary_renders(balance / "evidence" / CONTROLS) is True
    assert controls_figures(REPO / "leaderboards/digitshack") == []


def test_the_upward_step_is_recomputed_from_every_start_and_neighbours_scores():
    from derl_bench.experiments.recompute import upward_figures

    def start(scores: list[float], neighbours: list[dict], pays_all: int) -> dict:
        return {"scores": scores, "neighbours": neighbours,
                "drawn": {"draws": 100, "pays_all": pays_all}}

    def neighbour(scores: list[float], draws: int) -> dict:
        return {"scores": scores, "draws": draws}

    upward = {"first": ["a"], "parts": ["a", "b"], "seeds": [1, 2], "starts": [
        # 2 draws above their start's 30.0, 1 level with it (not a step up), 1 below
        start([0.3, 0.3], [neighbour([0.5, 0.6], 2), neighbour([0.3, 0.3], 1),
                           neighbour([0.1, 0.2], 1)], pays_all=4),
        # a start none of whose draws pays both trains nothing and counts its draws
        {"drawn": {"draws": 100, "pays_all": 0}, "neighbours": []}]}
    lines = upward_figures(upward)
    assert "from 2 picks paying a only: 200 one-edit draws" in lines[0]
    assert lines[1].startswith("  paying a and b: 4 of 200 draws, 2.00% [")
    assert lines[2].startswith("  stepping up: 2 of 200 draws, 1.00% [0.12, ")
    # 1 - 0.99 ** 24 = 21.4%
    assert "3 start-neighbour pairs trained; chance that 24 mutations of a pick step up: " \
           "21.4% [" in lines[3]
