"""The control searchers: worse and better than random search by construction, built from the
task's planted reward, filed apart on the boards, refused where a task plants nothing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from derl_bench.family import resolve_family
from derl_bench.grpo.config import ConfigError
from derl_bench.meta.config import MetaConfig
from derl_bench.meta.methods import CONTROLS_GROUP, method_named
from derl_bench.reward import compile_reward
from derl_bench.reward.planted import planted_reward

BALANCE = "derl/DigitsBalance-v0"
RECIPE = SimpleNamespace(seed=0, max_depth=3, family=resolve_family(BALANCE))


def _primitives(expr: str) -> set[str]:
    return set(compile_reward(expr, env=BALANCE).primitives)


def test_the_negative_control_never_draws_the_first_planted_part():
    negative = method_named("control-negative").proposer(RECIPE, BALANCE, False)
    random = method_named("random").proposer(RECIPE, BALANCE, False)
    drawn = [p.expr for p in negative.propose(300)]
    assert not any("digit_recall" in _primitives(expr) for expr in drawn)
    # random search over the same grammar does draw it: the control differs only there
    assert any("digit_recall" in _primitives(p.expr) for p in random.propose(300))
    again = method_named("control-negative").proposer(RECIPE, BALANCE, False)
    assert [p.expr for p in again.propose(300)] == drawn  # seeded


def test_the_planted_control_proposes_one_edit_neighbours_of_the_planted_reward():
    planted = planted_reward(BALANCE, RECIPE.family)
    proposer = method_named("control-planted").proposer(RECIPE, BALANCE, False)
    proposals = proposer.propose(200)
    assert all(p.parents == (planted,) and p.origin == "neighbour" for p in proposals)
    exprs = [p.expr for p in proposals]
    # each compiles; most differ from the planted reward, and most keep one of its parts
    assert all(compile_reward(expr, env=BALANCE) for expr in exprs)
    assert sum(expr != planted for expr in exprs) > 150
    kept = sum(bool(_primitives(expr) & {"digit_recall", "length_fit"}) for expr in exprs)
    assert kept > 100
    state = proposer.state_dict()
    follow = [p.expr for p in proposer.propose(5)]
    proposer.load_state_dict(state)
    assert [p.expr for p in proposer.propose(5)] == follow  # resumable


def test_the_one_part_control_pays_the_first_planted_part_in_every_draw():
    from derl_bench.reward.planted import planted_parts

    part = next(iter(planted_parts(BALANCE, RECIPE.family).values()))
    proposer = method_named("control-one-part").proposer(RECIPE, BALANCE, False)
    proposals = proposer.propose(200)
    assert all(p.parents == (part,) and p.origin == "part-given" for p in proposals)
    assert all(p.expr.startswith(f"{part} + (") for p in proposals)
    # each draw adds a random expression, compiled as one term beside the part
    added = [p.expr[len(f"{part} + "):] for p in proposals]
    assert all(compile_reward(p.expr, env=BALANCE) for p in proposals)
    assert len(set(added)) > 150
    random = method_named("random").proposer(RECIPE, BALANCE, False)
    assert added == [f"({p.expr})" for p in random.propose(200)]  # random's own draws
    state = proposer.state_dict()
    follow = [p.expr for p in proposer.propose(5)]
    proposer.load_state_dict(state)
    assert [p.expr for p in proposer.propose(5)] == follow  # resumable


def test_controls_are_filed_apart_and_refused_where_the_task_plants_nothing():
    from derl_bench.leaderboard.board import method_group

    for name in ("control-negative", "control-planted", "control-one-part"):
        assert method_named(name).group == CONTROLS_GROUP
        assert method_group(f"{name} (seed 3)", "final") == CONTROLS_GROUP
    inner = {"env_id": "derl/DigitsHack-v0", "model": "tiny"}  # a planted reward, no parts
    for name in ("control-negative", "control-one-part"):
        with pytest.raises(ConfigError, match="names none \\(planted_parts\\)"):
            MetaConfig(method=name, inner=inner)
    MetaConfig(method="control-planted", inner=inner)
    with pytest.raises(ConfigError, match="card names no planted_reward"):
        MetaConfig(method="control-planted", inner={"env_id": "derl/Arithmetic-v0",
                                                    "model": "tiny"})


def test_the_one_part_control_is_a_family_of_its_own():
    from derl_bench.experiments.controls import control_comparisons, control_pairs
    from derl_bench.experiments.proxy.report import _controls_section

    levels = {"random": [0.33, 0.06, 0.30, 0.31, 0.05, 0.32],
              "control-negative": [0.05, 0.06, 0.04, 0.06, 0.05, 0.07],
              "control-planted": [0.60, 0.33, 0.58, 0.31, 0.62, 0.35],
              "control-one-part": [0.34, 0.31, 0.29, 0.35, 0.33, 0.30]}
    result = {"env_id": "derl/DigitsBalance-v0",
              "runs": [{"method": m, "seed": s, "picked": {"L0": {"mean": v}}}
                       for m, values in levels.items() for s, v in enumerate(values)]}
    families = control_pairs({row["method"] for row in result["runs"]})
    assert families == {"primary": [("control-planted", "random"), ("random", "control-negative")],
                        "one-part": [("control-one-part", "random")]}
    [one_part] = control_comparisons(result, families["one-part"], threshold=0.193)
    # A family of one is not corrected: its Holm interval is its own t-interval.
    assert (one_part["holm_low"], one_part["holm_high"]) == pytest.approx(
        (one_part["ci_low"], one_part["ci_high"]), abs=1e-3)
    assert one_part["found"] == [6, 4]
    primary = control_comparisons(result, families["primary"], threshold=0.193)
    assert all(c["holm_high"] - c["holm_low"] > c["ci_high"] - c["ci_low"] for c in primary)
    text = "\n".join(_controls_section(result))
    assert "Family: primary" in text and "Family: one-part" in text
    assert text.index("control-one-part − random") > text.index("Family: one-part")
