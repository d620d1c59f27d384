"""GRPO for a command policy on ALFWorld: an inner run's metrics, its validation score and its
model; the Meta-Reward sees the think/action parser's format_valid and every primitive."""

from __future__ import annotations

import json

import pytest
import torch

from derl_bench.grpo.commands import CommandGRPOConfig, respond, train_commands
from derl_bench.observers.think_action import parse_think_action
from derl_bench.policies.command_model import init_command_model

ALFWORLD = "derl/ALFWorld-v0"


def test_the_response_is_the_command_in_valid_tags():
    assert parse_think_action(respond("go to cabinet 10")) == ("go to cabinet 10", True)


@pytest.mark.parametrize("reward,kl", [("success + goal_progress_delta", 0.0),
                                       ("format_valid * success", 0.1)])
def test_an_inner_run_trains_and_scores(tmp_path, data_root, reward, kl):
    base = init_command_model(tmp_path / "base", ALFWORLD)
    config = CommandGRPOConfig(model=str(base), output_dir=str(tmp_path / "run"),
                               env_id=ALFWORLD, meta_reward=reward, steps=2, games_per_step=2,
                               group_size=2, pool=4, validation_games=2, envs=4, num_threads=1,
                               max_episode_steps=6, kl_coef=kl, learning_rate=1e-2)
    history = train_commands(config)
    steps, final = history[:-1], history[-1]
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        assert 0.0 <= row["groups_with_advantage"] <= 1.0
        assert row["time/game_reset_s"] >= 0 and row["time/model_rollout_s"] > 0
        assert row["commands/trained"] >= 0
    assert 0.0 <= final["score"] <= 1.0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["score"] == final["score"] and result["validation_games"] == 2
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    from derl_bench.policies import load_model_and_tokenizer

    before, _ = load_model_and_tokenizer(str(base))
    after, _ = load_model_and_tokenizer(str(tmp_path / "run" / "model"))
    moved = any(not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters(),
                                                      strict=True))
    assert moved == any(r["commands/trained"] > 0 for r in steps)


def test_the_training_pool_leaves_out_the_games_the_base_was_taught_on(tmp_path):
    import numpy as np

    from derl_bench.grpo.commands import base_games, training_pool

    base = tmp_path / "base"
    base.mkdir()
    (base / "dagger.json").write_text(json.dumps({"pool": list(range(0, 60, 2)),
                                                  "games_in_split": 100,
                                                  "config": {"seed": 0, "pool": 30}}))
    config = CommandGRPOConfig(model=str(base), output_dir=str(tmp_path / "run"), env_id=ALFWORLD,
                               pool=40)
    pool = training_pool(config, 100)
    assert len(set(pool.tolist())) == 40 and not set(pool.tolist()) & set(range(0, 60, 2))
    assert np.array_equal(pool, training_pool(config, 100))  # seeded
    # A record without its pool: the pool its seed drew, as run_dagger draws it.
    (base / "dagger.json").write_text(json.dumps({"games_in_split": 100,
                                                  "config": {"seed": 3, "pool": 10}}))
    drawn = set(np.random.default_rng(3).permutation(100)[:10].tolist())
    assert base_games(base, 100) == drawn
    with pytest.raises(ValueError, match="too large"):
        training_pool(CommandGRPOConfig(model=str(base), output_dir="x", env_id=ALFWORLD,
                                        pool=95), 100)
