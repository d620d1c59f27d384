"""The teacher-taught ALFWorld base: lockstep episodes, DAgger's labels on off-path states,
the base's build and its evaluation."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import derl_bench  # noqa: F401  (registers the envs)
from derl_bench.evaluation.commands import evaluate_commands
from derl_bench.families.alfworld.compact_state import CompactState
from derl_bench.families.alfworld.vocab import build_alfworld_tokenizer
from derl_bench.policies.command_model import build_command_model
from derl_bench.policies.commands import CommandPolicy, command_log_probs
from derl_bench.rollout.commands import play
from derl_bench.sft.dagger import DaggerConfig, labelled, run_dagger
from tests.numerics import assert_close_reordered

GAMES = [{"index": i} for i in (0, 5, 9)]


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    tokenizer = build_alfworld_tokenizer()
    return CommandPolicy(build_command_model(tokenizer).eval(), tokenizer)


@pytest.fixture(scope="module")
def envs(data_root):
    made = [gym.make("derl/ALFWorld-v0", level="L0", split="train", teacher=True,
                     max_episode_steps=8) for _ in range(2)]
    yield made
    for env in made:
        env.close()


def test_off_path_states_carry_the_teachers_label(envs, policy, data_root):
    """Every state a learner's (here random) commands reach is labelled with what the teacher
    says from that very state: replaying the executed commands on a fresh env gives the
    same teacher command at every step."""
    episodes = play(envs, policy, GAMES, CompactState, detour_share=0.7, seed=3)
    assert [e.game for e in episodes] == GAMES
    detours = [s for e in episodes for s in e.steps if s.actor == "detour"]
    assert detours, "the detours should leave the teacher's path"
    assert all(s.label is not None for e in episodes for s in e.steps)
    fresh = gym.make("derl/ALFWorld-v0", level="L0", split="train", teacher=True)
    try:
        for episode in episodes:
            _, info = fresh.reset(options=episode.game)
            for step in episode.steps:
                assert sorted(step.commands) == sorted(info["admissible_commands"])
                assert step.commands[step.label] == info["teacher_action"]
                _, _, terminated, _, info = fresh.step(step.commands[step.chosen])
            assert terminated == episode.won
    finally:
        fresh.close()


@pytest.mark.parametrize("decode", [False, True], ids=["scored", "decoded"])
def test_the_same_seed_plays_the_same_episodes_and_keeps_the_rollout_log_probs(envs, policy,
                                                                               decode):
    first = play(envs, policy, GAMES, CompactState, seed=11, decode=decode)
    again = play(envs, policy, GAMES, CompactState, seed=11, decode=decode)
    assert [[s.chosen for s in e.steps] for e in first] == [
        [s.chosen for s in e.steps] for e in again]
    steps = [s for e in first for s in e.steps]
    assert all(s.actor == "policy" for s in steps)
    # What the update recomputes, with gradients on, is what the rollout kept. The rollout
    # scored each turn's states together and the update scores them all at once: other
    # padding, so float32 sums in another order (tests/numerics.py; the longest sum is the
    # MLP's 256 terms).
    recomputed = command_log_probs(policy.model, [s.ids for s in steps], policy.end_id)
    kept = torch.tensor([s.log_prob for s in steps], dtype=torch.float64)
    now = torch.stack([lp[s.chosen] for s, lp in zip(steps, recomputed, strict=True)])
    assert now.requires_grad
    # The model runs in float32 (the log-softmax in float64): float32's rounding sets the bound.
    assert_close_reordered(now.detach().float(), kept.float(), terms=256)
    for lp in recomputed:
        assert float(lp.detach().exp().sum()) == pytest.approx(1.0, abs=1e-9)


def test_a_play_at_a_temperature_is_seeded_and_refuses_what_it_cannot_do(envs, policy):
    cold = play(envs, policy, GAMES, CompactState, seed=5, temperature=0.4)
    assert [[s.chosen for s in e.steps] for e in cold] == [
        [s.chosen for s in e.steps] for e in play(envs, policy, GAMES, CompactState, seed=5,
                                                   temperature=0.4)]
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            play(envs, policy, GAMES[:1], CompactState, temperature=bad)
    decoded = [[s.chosen for s in e.steps]
               for e in play(envs, policy, GAMES, CompactState, seed=5, temperature=0.4,
                             decode=True)]
    assert decoded == [[s.chosen for s in e.steps]
                       for e in play(envs, policy, GAMES, CompactState, seed=5,
                                     temperature=0.4, decode=True)]


def test_a_teacher_only_play_needs_no_policy_and_a_policy_play_needs_one(envs):
    episodes = play(envs, None, GAMES[:1], CompactState, teacher_share=1.0)
    assert all(s.actor == "teacher" and s.chosen == s.label for s in episodes[0].steps)
    with pytest.raises(ValueError, match="policy is needed"):
        play(envs, None, GAMES[:1], CompactState, teacher_share=0.5)


def _tiny(output, seed=0):
    return DaggerConfig(output=str(output), env_id="derl/ALFWorld-v0", seed=seed, pool=3,
                        bc_games=3, rounds=1, round_games=2, bc_updates=3, round_updates=2,
                        batch_size=4, envs=2, num_threads=1, max_episode_steps=8,
                        model={"num_hidden_layers": 1})


def test_the_base_is_a_model_folder_with_its_record_and_the_same_seed_writes_the_same_weights(
        tmp_path, data_root):
    from derl_bench.policies import load_model_and_tokenizer

    record = run_dagger(_tiny(tmp_path / "a"))
    again = run_dagger(_tiny(tmp_path / "b"))
    assert again["bc"] == {**record["bc"], "seconds": again["bc"]["seconds"]}
    assert record["bc"]["labelled_states"] > 0 and len(record["rounds"]) == 1
    assert record["rounds"][0]["data_states"] > record["bc"]["labelled_states"]
    saved = json.loads((tmp_path / "a" / "dagger.json").read_text())
    assert saved["config"]["seed"] == 0
    a, _ = load_model_and_tokenizer(str(tmp_path / "a"))
    b, tokenizer = load_model_and_tokenizer(str(tmp_path / "b"))
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(x, y)
    assert tokenizer.convert_tokens_to_ids("<eoc>") != tokenizer.unk_token_id
    result = evaluate_commands(tmp_path / "a", "L0", env="derl/ALFWorld-v0", limit=2, envs=2,
                               num_threads=1)
    assert result["games"] == 2 and 0.0 <= result["success"] <= 1.0
    assert set(result["by_task_type"]) <= {
        "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
        "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep",
        "pick_two_obj_and_place"}
    with pytest.raises(FileExistsError):
        run_dagger(_tiny(tmp_path / "a"))


def test_labelled_keeps_only_labelled_states(envs, policy):
    episodes = play(envs, policy, GAMES[:1], CompactState, teacher_share=1.0)
    episodes[0].steps[0].label = None
    assert len(labelled(episodes)) == len(episodes[0].steps) - 1
    assert np.isfinite([s.log_prob for s in episodes[0].steps]).sum() == 0  # nothing scored


def test_a_base_for_another_view_says_so_and_an_unknown_view_writes_nothing(tmp_path, data_root):
    from dataclasses import replace

    from derl_bench.cards import CardError
    from derl_bench.policies.command_model import model_view

    run_dagger(replace(_tiny(tmp_path / "tried"), view="tried"))
    assert model_view(tmp_path / "tried") == "tried"
    result = evaluate_commands(tmp_path / "tried", "L0", env="derl/ALFWorld-v0", limit=2,
                               envs=2, num_threads=1)
    assert result["policy_interface"] == "compact-tried-constrained"
    with pytest.raises(CardError, match="no command view 'memory'"):
        run_dagger(replace(_tiny(tmp_path / "memory"), view="memory"))
    assert not (tmp_path / "memory").exists()
