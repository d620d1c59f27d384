"""Primitives come from the env: each card declares them, its observers emit exactly them, and
Meta-Rewards, the random generator and the Meta-Optimizer prompt use that one list."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest

from derl_bench.cards import card_families, load_card
from derl_bench.cli import main
from derl_bench.family import family_spec
from derl_bench.meta import IslandEvolution, RandomSearch
from derl_bench.observers.think_action import ThinkActionWrapper
from derl_bench.reward import (
    ALIASES,
    PRIMITIVE_RANGES,
    UnknownDomainError,
    UnknownPrimitiveError,
    compile_reward,
    known_primitives,
    random_expression,
)

BASELINES = Path(__file__).resolve().parents[2] / "baselines"
ALFWORLD = "derl/ALFWorld-v0"


def _default_observer_names(family: str) -> list[str]:
    card = load_card(family)
    paths = {spec["observers"] for spec in card["ids"].values()}
    assert len(paths) == 1, f"{family}: one observer list per family"
    module, _, attr = paths.pop().partition(":")
    observers = getattr(importlib.import_module(module), attr)(None)
    return [name for observer in observers for name in observer.names]


@pytest.mark.parametrize("family", card_families())
def test_each_card_declares_the_primitives_its_observers_emit_with_ranges(family):
    declared = load_card(family)["primitives"]
    assert isinstance(declared, dict), "primitives: name -> [low, high]"
    assert all(len(r) == 2 and r[0] <= r[1] for r in declared.values())
    # agent families also read format_valid, which ThinkActionWrapper adds around the env
    wrapper = list(ThinkActionWrapper.primitive_names) if family_spec(family).multi_turn else []
    assert list(declared) == _default_observer_names(family) + wrapper
    assert set(load_card(family)["aliases"]) == {"g1", "g2", "g3", "g4"}


def test_env_ids_families_and_domains_name_primitive_sets():
    from derl_bench.reward import primitive_set

    alfworld = primitive_set(ALFWORLD)
    assert alfworld.names == primitive_set("alfworld").names
    assert "score" not in alfworld.names and "score" in primitive_set("derl/ScienceWorld-v0").names
    assert alfworld.range("env_reward") == (0.0, 1.0)
    assert primitive_set("derl/ScienceWorld-v0").range("env_reward") == (-2.0, 2.0)
    assert primitive_set("math").range("response_length") == (0.0, math.inf)
    # the historical domains merge their families, with the widest range
    assert set(known_primitives("agent")) == set(alfworld.names) | set(
        primitive_set("scienceworld").names)
    assert PRIMITIVE_RANGES["agent"]["env_reward"] == (-2.0, 2.0)
    assert ALIASES["agent"]["g2"] == "first_third(env_reward)" == alfworld.aliases["g2"]
    assert ALIASES["math"] == primitive_set("derl/GSM8K-v0").aliases
    with pytest.raises(UnknownDomainError, match="not a derl-bench env id"):
        primitive_set("derl/Pong-v0")


def test_a_primitive_the_env_does_not_emit_is_rejected_with_suggestions():
    with pytest.raises(UnknownPrimitiveError) as err:
        compile_reward("success + 0.1 * mean(score_delta)", env=ALFWORLD)
    assert err.value.name == "score_delta"
    assert err.value.position == 21
    assert "goal_progress_delta" in err.value.suggestions
    assert compile_reward("success + 0.1 * mean(score_delta)", domain="agent").primitives == (
        "score_delta", "success")
    reward = compile_reward("g1 + 0.5 * mean(goal_progress_delta)", env=ALFWORLD)
    assert reward.domain == ALFWORLD and reward.structure.range == (-0.5, 1.5)


def test_random_alfworld_candidates_use_only_alfworld_primitives():
    emitted = set(load_card("alfworld")["primitives"])
    outside = {}
    for seed in range(200):
        expr = random_expression(seed, ALFWORLD)
        used = set(compile_reward(expr, env=ALFWORLD).primitives)
        if used - emitted:
            outside[seed] = expr
    assert outside == {}
    drawn = {random_expression(seed, ALFWORLD) for seed in range(200)}
    assert len(drawn) > 150
    assert {p for e in drawn for p in compile_reward(e, env=ALFWORLD).primitives} == emitted


@pytest.mark.parametrize("proposer", [
    lambda: RandomSearch(ALFWORLD, seed=1),
    lambda: IslandEvolution(ALFWORLD, seed=1, islands=2, island_size=3, migrate_every=1),
], ids=["random-search", "island-evolution"])
def test_search_proposers_given_an_env_id_stay_within_its_primitives(proposer):
    search = proposer()
    emitted = set(load_card("alfworld")["primitives"])
    for _ in range(3):
        proposals = search.propose(6)
        for p in proposals:
            assert set(compile_reward(p.expr, env=ALFWORLD).primitives) <= emitted
        search.observe(proposals, [float(i) for i in range(len(proposals))])


def test_reward_check_with_an_env_exits_2_on_a_primitive_it_does_not_emit(capsys):
    assert main(["reward", "check", "score", "--env", ALFWORLD]) == 2
    assert "'score' is not a known primitive" in capsys.readouterr().err
    assert main(["reward", "check", "sucess", "--env", ALFWORLD]) == 2
    assert "did you mean 'success'?" in capsys.readouterr().err
    assert main(["reward", "check", "score", "--env", "derl/ScienceWorld-v0", "--json"]) == 0
    assert '"primitives": ["score"]' in capsys.readouterr().out
    assert main(["reward", "check", "score", "--env", "derl/Pong-v0"]) == 2


def test_train_rejects_a_recipe_whose_reward_reads_what_the_env_does_not_emit(tmp_path, capsys):
    recipe = BASELINES / "alfworld-outcome.yaml"
    status = main(["train", str(recipe), "meta_reward=success + score",
                   "--output", str(tmp_path / "run")])
    assert status == 2
    assert "'score' is not a known primitive" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # rejected before anything was written


@pytest.mark.parametrize("recipe",
                         sorted(set(BASELINES.glob("*.yaml")) - set(BASELINES.glob("meta-*"))),
                         ids=lambda p: p.stem)
def test_every_baseline_reward_compiles_against_its_env(recipe):
    from derl_bench.grpo.dispatch import load_recipe

    config = load_recipe(recipe)
    assert compile_reward(config.meta_reward, env=config.env_id).primitives


def test_the_meta_optimizer_prompt_lists_the_env_primitives():
    pytest.importorskip("torch")
    from derl_bench.meta.optimizer import build_prompt

    text = build_prompt(ALFWORLD)[0]["content"]
    assert ", ".join(load_card("alfworld")["primitives"]) in text
    assert "score" not in text.replace("score_", "")
