"""Family specs: one typed description per env family, built from its card."""

from __future__ import annotations

import pickle
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

import derl_bench  # noqa: F401  (registers the ids)
from derl_bench import family
from derl_bench.cards import CardError, card_families, load_card
from derl_bench.evaluation.families import adapter_for
from derl_bench.family import FamilySpec, UnknownFamilyError, family_spec, family_specs
from derl_bench.observers.think_action import action_parser_for
from derl_bench.policies.prompts import AgentPrompt
from derl_bench.reward.primitives import primitive_set

REPO = Path(__file__).resolve().parents[2]
REGISTERED = sorted(i for i in gym.registry if i.startswith("derl/"))


def test_there_is_one_spec_per_card():
    assert sorted(family_specs()) == card_families()


@pytest.mark.parametrize("env_id", REGISTERED)
def test_every_registered_id_resolves_to_the_family_of_its_card(env_id):
    spec = family_spec(env_id)
    assert env_id in load_card(spec.name)["ids"]
    assert family_spec(f"derl_bench:{env_id}") is spec
    assert spec.env(f"derl_bench:{env_id}").env_id == env_id


@pytest.mark.parametrize("name", card_families())
def test_a_spec_says_what_its_card_declares(name):
    card, spec = load_card(name), family_spec(name)
    assert spec.card_version == card["card_version"]
    assert {i: e.entry_point for i, e in spec.ids.items()} == {
        i: e["entry_point"] for i, e in card["ids"].items()}
    assert list(spec.primitives) == list(card["primitives"])
    # the reward stage compiles against the spec's primitives, not a second reading of the card
    assert dict(primitive_set(name).ranges) == dict(spec.primitives)
    assert spec.success_primitive in spec.primitives
    assert spec.multi_turn == (card["episodes"] == "multi-turn")
    assert spec.max_steps == (card["max_steps"] if spec.multi_turn else 1)


def test_the_families_as_the_cards_declare_them():
    got = {s.name: (s.multi_turn, s.domain, s.success_primitive, s.max_steps)
           for s in family_specs().values()}
    assert got == {"alfworld": (True, "agent", "success", 30),
                   "scienceworld": (True, "agent", "success", 30),
                   "math": (False, "math", "outcome", 1),
                   "arithmetic": (False, "math", "outcome", 1),
                   "reasoning_gym": (False, "math", "outcome", 1),
                   "digits_sparse": (False, "math", "outcome", 1),
                   "digits_hack": (False, "math", "outcome", 1),
                   "digits_gate": (False, "math", "outcome", 1),
                   "digits_trap": (False, "math", "outcome", 1),
                   "digits_recall": (False, "math", "outcome", 1),
                   "digits_recall_sparse": (False, "math", "outcome", 1),
                   "digits_balance": (False, "math", "outcome", 1)}


@pytest.mark.parametrize("name", card_families())
def test_every_family_names_its_later_stage_parts_on_its_card(name):
    spec = family_spec(name)
    for env_id in spec.env_ids:
        assert adapter_for(env_id).spec is spec
        assert adapter_for(env_id).max_steps == spec.max_steps
        assert spec.board(spec.env(env_id).benchmark).title
    assert callable(action_parser_for(family.resolve_family(name)))
    if spec.multi_turn:
        intro = AgentPrompt(family.resolve_family(name).prompt).text.intro
        assert intro.startswith("You are an expert agent")


def test_registered_variants_resolve_to_their_family():
    card = gym.spec("derl/ALFWorld-v0")
    variants = {
        "derl/ALFWorldShort-v0": {"entry_point": card.entry_point, "kwargs": card.kwargs,
                                  "max_episode_steps": 5,
                                  "additional_wrappers": card.additional_wrappers},
        "derl/ScienceWorldBare-v0": {
            "entry_point": "derl_bench.families.scienceworld:ScienceWorldEnv"},
    }
    try:
        for env_id, registration in variants.items():
            gym.register(id=env_id, **registration)
        assert family_spec("derl/ALFWorldShort-v0").name == "alfworld"
        assert family_spec("derl_bench:derl/ScienceWorldBare-v0").name == "scienceworld"
    finally:
        for env_id in variants:
            gym.registry.pop(env_id, None)


@pytest.mark.parametrize("name", ["derl/Chess-v0", "chess", "CartPole-v1"])
def test_an_unknown_name_is_a_clear_error(name):
    with pytest.raises(UnknownFamilyError, match="not a derl-bench env id or family"):
        family_spec(name)


def test_a_leaderboard_name_and_a_prefixed_id_name_their_family():
    assert family_spec("gsm8k").name == "math" and family_spec("gsm8k").domain == "math"
    assert family_spec("derl_bench:derl/ALFWorld-v0").domain == "agent"


def test_a_spec_pickles_into_workers():
    spec = family_spec("derl/ScienceWorld-v0")
    assert pickle.loads(pickle.dumps(spec)) == spec


TOY_CARD = """---
family: toy
card_version: 1
episodes: multi-turn
max_steps: 7
success: success
domain: agent
ids:
  derl/Toy-v0:
    entry_point: derl_bench.families.alfworld:ALFWorldEnv
    observers: derl_bench.families.alfworld.observers:default_observers
primitives:
  success: [0, 1]
  env_reward: [-1, 1]
aliases: {g1: success}
---
A toy family: its card is all it takes for the spec.
"""


@pytest.fixture
def toy_cards(tmp_path, monkeypatch):
    fake = tmp_path / "envs"
    fake.mkdir()
    (fake / "toy.md").write_text(TOY_CARD)
    monkeypatch.setenv("DERL_BENCH_CARD_PATH", str(fake))
    family.reload()
    yield fake
    monkeypatch.undo()
    family.reload()


def test_a_new_family_needs_only_its_card(toy_cards):
    spec = family_spec("derl_bench:derl/Toy-v0")
    assert (spec.name, spec.env_ids, spec.multi_turn, spec.max_steps) == (
        "toy", ("derl/Toy-v0",), True, 7)
    assert dict(spec.primitives) == {"success": (0.0, 1.0), "env_reward": (-1.0, 1.0)}
    assert spec.aliases == {"g1": "success"}
    assert family_spec("alfworld").name == "alfworld"
    assert "derl/Toy-v0" in gym.registry


def test_reload_forgets_a_family_whose_card_went_away(toy_cards):
    (toy_cards / "toy.md").unlink()
    family.reload()
    assert "toy" not in family_specs() and "derl/Toy-v0" not in gym.registry
    with pytest.raises(UnknownFamilyError):
        family_spec("derl/Toy-v0")


def test_a_family_with_two_cards_is_rejected(toy_cards):
    (toy_cards / "alfworld.md").write_text((REPO / "envs" / "alfworld.md").read_text())
    with pytest.raises(CardError, match="'alfworld' has two cards"):
        family.reload()


def test_a_card_path_that_is_not_a_folder_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv("DERL_BENCH_CARD_PATH", str(tmp_path / "missing"))
    try:
        with pytest.raises(CardError, match="not a folder"):
            family.reload()
    finally:
        monkeypatch.undo()
        family.reload()


def test_an_unknown_hook_is_rejected():
    card = yaml.safe_load(TOY_CARD.split("---\n")[1])
    with pytest.raises(CardError, match="unknown hooks \\['reward'\\]"):
        FamilySpec.from_card({**card, "hooks": {"reward": "x:y"}})
    spec = FamilySpec.from_card({**card, "hooks": {"prompt": "derl_bench.nowhere:X"}})
    with pytest.raises(CardError, match="does not resolve"):
        spec.part("prompt")


@pytest.mark.parametrize("change, message", [
    (("episodes: multi-turn", "episodes: many"), "episodes is 'many'"),
    (("domain: agent\n", ""), "has no 'domain'"),
    (("success: success\n", "success: won\n"), "success primitive 'won' is not declared"),
    (("max_steps: 7\n", ""), "has no 'max_steps'"),
])
def test_a_card_that_misdeclares_its_family_is_rejected(change, message):
    text = TOY_CARD.replace(*change)
    card = yaml.safe_load(text.split("---\n")[1])
    with pytest.raises(CardError, match=message):
        FamilySpec.from_card(card)
