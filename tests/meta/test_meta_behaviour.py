"""No inner run spent twice: rewards are keyed by behaviour, constant ones are never trained."""

from __future__ import annotations

import json
import random

import numpy as np

from derl_bench.family import resolve_family
from derl_bench.meta import MetaConfig, Proposal, run_meta
from derl_bench.meta import loop as meta_loop
from derl_bench.meta.probe import behaviour_key, probe_set
from derl_bench.reward import compile_reward, random_expression

ENV = "derl/Arithmetic-v0"
INNER = {"env_id": ENV, "model": "tiny", "steps": 1, "group_size": 2, "prompts_per_step": 1,
         "max_new_tokens": 8, "tensorboard": False}


class Scripted:
    """A proposer that writes the given generations, in order."""

    def __init__(self, generations: list[list[str]]) -> None:
        self.generations, self.drawn, self.scores = generations, 0, []

    def propose(self, n: int) -> list[Proposal]:
        exprs = self.generations[self.drawn]
        self.drawn += 1
        return [Proposal(e, "scripted") for e in exprs[:n]]

    def observe(self, proposals: list[Proposal], scores: list[float]) -> None:
        self.scores.append(list(scores))

    def state_dict(self) -> dict:
        return {"drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.drawn = state["drawn"]


def test_affinely_related_rewards_train_once_and_constant_ones_never(tmp_path, monkeypatch):
    scripted = Scripted([["outcome", "2 * g1 + 1", "0.5 + 0 * format_boxed", "format_boxed"],
                         ["3 * outcome - 2", "format_boxed * 4"]])
    monkeypatch.setattr(meta_loop, "make_proposer", lambda *a, **k: scripted)
    config = MetaConfig(name="b", method="random", outer_steps=2, population=4,
                        validation_episodes=2, inner=INNER, output_dir=str(tmp_path),
                        progress=False, executor="local", seed=1, invalid_score=0.0)
    result = run_meta(config)
    records = [json.loads(line)
               for line in (tmp_path / "candidates.jsonl").read_text().splitlines()]
    trained = [r for r in records if "run" in r and "duplicate_of" not in r]
    assert sorted(r["expr"] for r in trained) == ["format_boxed", "outcome"]
    copies = {r["expr"]: r["duplicate_of"] for r in records if "duplicate_of" in r}
    outcome_run = next(r["run"] for r in trained if r["expr"] == "outcome")
    boxed_run = next(r["run"] for r in trained if r["expr"] == "format_boxed")
    assert copies == {"2 * g1 + 1": outcome_run, "3 * outcome - 2": outcome_run,
                      "format_boxed * 4": boxed_run}
    constant = [r for r in records if r["status"] == "constant"]
    assert [r["expr"] for r in constant] == ["0.5 + 0 * format_boxed"]
    assert "run" not in constant[0] and not (tmp_path / "inner" / "g000-c02").exists()
    # A cache hit counts toward the budget exactly as its first run did: same score, same slot.
    by_expr = {r["expr"]: r["score"] for r in records}
    assert by_expr["2 * g1 + 1"] == by_expr["outcome"] == by_expr["3 * outcome - 2"]
    assert scripted.scores[0][2] == 0.0 and len(scripted.scores[1]) == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["constant_rewards"] == 1 and summary["generations"][0]["constant"] == 1
    assert len(result.candidates) == 6


def test_a_probe_set_key_is_rarely_wrong_on_a_larger_probe():
    # Keys measured on the default probe set (32 problems) against a disjoint, 4x larger one:
    # a collision on the small probe that the large one separates is a wrong key.
    family = resolve_family(ENV)
    small, large = (probe_set(ENV, family, problems=32, seed=0),
                    probe_set(ENV, family, problems=128, seed=1))
    rng = random.Random(0)
    rewards = {}
    for _ in range(400):
        reward = compile_reward(random_expression(rng, ENV, max_depth=3), env=ENV)
        rewards[reward.hash] = reward
    keys = {h: (behaviour_key(r, small), behaviour_key(r, large)) for h, r in rewards.items()}
    by_small: dict[str | None, set] = {}
    for small_key, large_key in keys.values():
        by_small.setdefault(small_key, set()).add(large_key)
    merged = [k for k, group in by_small.items() if k is not None and len(group) > 1]
    classes = len([k for k in by_small if k is not None])
    assert classes > 50                                    # the key separates real behaviours
    assert len(merged) / classes < 0.05, merged            # and rarely merges distinct ones
    constant_small = [large_key for small_key, large_key in keys.values() if small_key is None]
    assert sum(k is not None for k in constant_small) <= 0.05 * max(1, len(constant_small))


def test_behaviour_keys_follow_the_advantage_normalisation():
    probe = probe_set(ENV, resolve_family(ENV), problems=4)
    outcome = compile_reward("outcome", env=ENV)
    scaled = compile_reward("3 * outcome", env=ENV)
    shifted = compile_reward("outcome + 2", env=ENV)
    assert behaviour_key(outcome, probe) == behaviour_key(scaled, probe)
    # Without the std scaling (Dr. GRPO) only a shift leaves the advantages unchanged.
    assert behaviour_key(outcome, probe, scale_by_std=False) == behaviour_key(
        shifted, probe, scale_by_std=False)
    assert behaviour_key(outcome, probe, scale_by_std=False) != behaviour_key(
        scaled, probe, scale_by_std=False)
    assert np.isfinite(probe.values(outcome)).all()


def test_every_method_trains_its_kth_candidate_with_the_same_inner_seed(tmp_path, monkeypatch):
    # Common random numbers: a search method's k-th proposal and a hand-made reward's k-th run
    # train with one seed, and each slot has its own; a repeated reward is still not retrained.
    scripted = Scripted([["outcome", "format_boxed"], ["2 * outcome", "digit_match"]])
    monkeypatch.setattr(meta_loop, "make_proposer", lambda *a, **k: scripted)
    common = {"outer_steps": 2, "population": 2, "validation_episodes": 2, "inner": INNER,
              "progress": False, "executor": "local", "seed": 3}
    search = run_meta(MetaConfig(name="s", method="random", output_dir=str(tmp_path / "s"),
                                 **common))
    monkeypatch.undo()
    fixed = run_meta(MetaConfig(name="f", method="fixed", reward="outcome",
                                output_dir=str(tmp_path / "f"), **common))
    search_seeds = [c["inner_seed"] for c in search.candidates]
    assert search_seeds == [c["inner_seed"] for c in fixed.candidates]
    assert len(set(search_seeds)) == 4
    repeat = search.candidates[2]
    assert repeat["expr"] == "2 * outcome" and "duplicate_of" in repeat
    assert repeat["score"] == search.candidates[0]["score"]
    assert not any("duplicate_of" in c for c in fixed.candidates), "fixed trains every slot"


def test_run_seeds_train_every_candidate_with_the_recipe_seed(tmp_path, monkeypatch):
    scripted = Scripted([["outcome", "format_boxed"]])
    monkeypatch.setattr(meta_loop, "make_proposer", lambda *a, **k: scripted)
    result = run_meta(MetaConfig(name="r", method="random", outer_steps=1, population=2,
                                 validation_episodes=2, inner=INNER, progress=False,
                                 executor="local", seed=3, inner_seeds="run",
                                 output_dir=str(tmp_path)))
    assert [c["inner_seed"] for c in result.candidates] == [None, None]
