"""The function table is the one description of the language's functions: the evaluator, the
structure analysis, the canonical form, the docs and the Meta-Optimizer's prompt agree with it."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from derl_bench.reward import POINTWISE, TRAJECTORY, compile_reward, language_summary

DOCS = Path(__file__).resolve().parents[2] / "docs" / "meta-reward.md"
X_RANGE = (-3.0, 3.0)


def _call_text(name: str, x: str, rng: random.Random) -> tuple[str, list[float]]:
    function = POINTWISE[name]
    low, _ = function.arity
    constants = [rng.choice(c) for c in function.generated_constants]
    others = [round(rng.uniform(-2, 2), 2) for _ in range(low - 1 - len(constants))]
    args = [*others, *constants]
    return f"{name}({', '.join([x, *map(str, args)])})", args


@pytest.mark.parametrize("name", list(POINTWISE))
def test_evaluator_folding_and_interval_follow_the_table(name):
    rng = random.Random(name)
    function = POINTWISE[name]
    expr, args = _call_text(name, "x", rng)
    xs = np.array([-3.0, -1.5, -0.25, 0.0, 0.5, 2.0, 3.0])
    reward = compile_reward(expr, domain="math", primitives={"x": X_RANGE})
    values = reward.episodic({"x": xs.reshape(-1, 1)})
    expected = [function.scalar(float(x), *args) for x in xs]
    np.testing.assert_allclose(values, expected)
    low, high = reward.structure.range
    assert low <= values.min() and values.max() <= high
    # constant arguments fold to the same scalar meaning
    folded = compile_reward(expr.replace("(x", "(0.75", 1), domain="math", primitives=["x"])
    assert float(folded.canonical) == pytest.approx(function.scalar(0.75, *args))


def _listed(text: str, label: str) -> set[str]:
    match = re.search(rf"the {label} (.*?)(;|, which)", text, re.S)
    assert match, text
    return {item.split("(")[0].strip() for item in re.split(r"\),", match[1])}


def test_the_language_summary_lists_every_function_and_trajectory_term():
    text = language_summary()
    assert _listed(text, "functions") == set(POINTWISE)
    assert _listed(text, "trajectory terms") == set(TRAJECTORY)


def test_the_meta_optimizer_prompt_lists_every_function_and_trajectory_term():
    pytest.importorskip("torch")
    from derl_bench.meta.optimizer import build_prompt

    text = build_prompt("agent")[0]["content"]
    assert _listed(text, "functions") == set(POINTWISE)
    assert _listed(text, "trajectory terms") == set(TRAJECTORY)  # it once left out min


def test_the_language_reference_documents_every_function():
    docs = DOCS.read_text(encoding="utf-8")
    for function in POINTWISE.values():
        assert f"| `{function.signature}` | {function.meaning} |" in docs
    rows = re.findall(r"^\| `(\w+)\(x\)`", docs, re.M)
    assert set(TRAJECTORY) <= set(rows) | {"min"}  # min shares the max row
    assert "`min(x)`" in docs
