"""The proxy study (leaderboards/arithmetic/study/): each script at a small size, and the
committed figures recomputed from the committed evidence."""

from __future__ import annotations

import json

from tests.scripts import REPO, load_script

STUDY = "leaderboards/arithmetic/study"
EVIDENCE = REPO / "leaderboards" / "arithmetic" / "evidence" / "semantics-corpus.json"


def test_the_corpus_comparison_recomputes_from_its_scores(data_root):
    committed = json.loads(EVIDENCE.read_text())
    script = load_script(f"{STUDY}/structure_by_semantics.py")
    # the same formulas are chosen today: the corpus, the compiler and the classes agree
    chosen = script.chosen_formulas(committed["per_class"])
    assert {k: v for k, v in chosen.items() if v} == {
        kind: row["formulas"] for kind, row in committed["table"].items()}
    table = script.corpus_table(chosen, committed["scores"], committed["seeds"])
    assert table == committed["table"]


def test_the_studys_table_is_the_evidences():
    committed = json.loads(EVIDENCE.read_text())
    doc = (REPO / STUDY / "README.md").read_text()
    for kind, row in committed["table"].items():
        d = row["official_minus_derl"]
        line = (f"| {kind} | {100 * row['derl']:.1f}% | {100 * row['official']:.1f}% | "
                f"{100 * d['mean']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}] |")
        assert line.replace("-", "\N{MINUS SIGN}") in doc, line


def test_the_candidates_script_scores_a_base_and_each_reward(tmp_path, data_root):
    from derl_bench.experiments.proxy import HAND_MADE

    script = load_script(f"{STUDY}/proxy_candidates.py")
    found = script.main(tmp_path, sft_steps=2, grpo_steps=1, tasks=["chain_sum"])
    assert list(found) == ["chain_sum"]
    row = found["chain_sum"]
    assert set(row) == {"base", "sft_s", *HAND_MADE}
    for label in ("base", *HAND_MADE):
        assert row[label]["n"] == 200 and 0.0 <= row[label]["success"] <= 1.0
    assert json.loads((tmp_path / "results.json").read_text()) == found
