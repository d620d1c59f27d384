"""``scripts/structure_by_semantics.py``'s corpus comparison (docs/meta-loop.md, "The same
rewards under both semantics") recomputed from its committed evidence."""

from __future__ import annotations

import json

from tests.scripts import REPO, load_script

EVIDENCE = REPO / "leaderboards" / "arithmetic" / "evidence" / "semantics-corpus.json"


def test_the_corpus_comparison_recomputes_from_its_scores(data_root):
    committed = json.loads(EVIDENCE.read_text())
    script = load_script("scripts/structure_by_semantics.py")
    # the same formulas are chosen today: the corpus, the compiler and the classes agree
    chosen = script.chosen_formulas(committed["per_class"])
    assert {k: v for k, v in chosen.items() if v} == {
        kind: row["formulas"] for kind, row in committed["table"].items()}
    table = script.corpus_table(chosen, committed["scores"], committed["seeds"])
    assert table == committed["table"]


def test_the_docs_table_is_the_evidences():
    committed = json.loads(EVIDENCE.read_text())
    doc = (REPO / "docs" / "meta-loop.md").read_text()
    for kind, row in committed["table"].items():
        d = row["official_minus_derl"]
        line = (f"| {kind} | {100 * row['derl']:.1f}% | {100 * row['official']:.1f}% | "
                f"{100 * d['mean']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}] |")
        assert line.replace("-", "\N{MINUS SIGN}") in doc, line
