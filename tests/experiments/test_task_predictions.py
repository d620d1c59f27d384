"""The tasks' design predictions (``scripts/predict_modes.py``, ``scripts/grammar_shares.py``)
recomputed: every figure the boards' ``predictions.md`` and the DigitsRecallSparse study show
comes out of the scripts again, at the sizes they were run at."""

from __future__ import annotations

import re

import pytest

from tests.scripts import REPO, load_script

FLAT = re.compile(r"`([a-z_0-9]+)` ([-\d.]+)")


def _tables(text: str) -> list[list[list[str]]]:
    """Every markdown table of ``text``: its rows' cells, the header first, the rule left out."""
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if not set(line) <= set("|-"):
                rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _graded(text: str) -> dict[str, dict[str, float]]:
    """The mode table of a predictions text as {mode: {column: value}}, with the primitives
    named under it as "the same on every mode" given to every mode."""
    head, *rows = _tables(text)[0]
    graded = {row[0]: {name: float(cell) for name, cell in zip(head[2:], row[2:], strict=True)}
              for row in rows}
    same = next((line for line in text.splitlines() if line.startswith("The same on every")), "")
    for name, value in FLAT.findall(same):
        for columns in graded.values():
            columns[name] = float(value)
    return graded


@pytest.mark.parametrize("board", ["digitsrecall", "digitsrecallsparse", "digitsbalance"])
def test_the_boards_predictions_recompute(board):
    committed = (REPO / "leaderboards" / board / "evidence" / "predictions.md").read_text()
    env_id = re.search(r"on (derl/\S+-v0)'s", committed).group(1)
    script = load_script("scripts/predict_modes.py")
    # the script's defaults are the sizes every board's predictions were run at
    assert _graded(script.mode_table(env_id, 500)) == _graded(committed)
    assert "20000 draws of" in committed
    shares = _tables(script.draw_shares(env_id, 20_000))[0]
    # the draw table names the planted reward's primitives the hand-made rewards do not use;
    # an earlier file may list more of the card's primitives beside them
    assert shares[0] == _tables(committed)[1][0] and len(shares) > 1
    assert all(row in _tables(committed)[1] for row in shares), shares


def test_the_grammar_shares_in_the_recall_sparse_study_recompute():
    doc = (REPO / "leaderboards" / "digitsrecallsparse" / "study" / "README.md").read_text()
    table = next(t for t in _tables(doc) if t[0][0] == "primitives on the card")
    script = load_script("scripts/grammar_shares.py")
    env_id, first, second = "derl/DigitsRecallSparse-v0", "digit_recall", "length_fit"
    size = len(script.primitive_set(env_id).names)
    for row in table[1:]:
        extra = int(row[0].split()[0]) - size
        a, b, both = script.shares(env_id, first, second, extra)
        assert [f"{100 * a:.1f}%", f"{100 * b:.1f}%", f"{100 * both:.2f}%"] == row[1:], row
