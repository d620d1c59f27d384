"""Walkthrough replays on a fixed sample of real games (the full run is
``python benchmarks/alfworld_replay.py``)."""

from __future__ import annotations

import random

import pytest

from benchmarks.alfworld_replay import random_admissible_episode, replay_walkthrough
from derl_bench.families.alfworld import ALFWorldEnv, games


def _sample(data_root) -> list[str]:
    seen = games.discover_games("valid_seen", data_root)
    unseen = games.discover_games("valid_unseen", data_root)
    train = random.Random(0).sample(games.discover_games("train", data_root), 4)
    return seen[::28] + unseen[::27] + sorted(train)


@pytest.fixture(scope="module")
def env(data_root):
    env = ALFWorldEnv(level="L0", split="eval")
    yield env
    env.close()


def test_sample_covers_every_task_type(data_root):
    assert len({games.task_type_index(g) for g in _sample(data_root)}) == 6


def test_walkthroughs_win_exactly_at_the_end(env, data_root):
    failures = {}
    for game_id in _sample(data_root):
        result = replay_walkthrough(env, game_id)
        if not result.ok:
            failures[game_id] = result.problems
        assert result.progress[-1] == 1.0
        assert max(result.progress) <= 1.0 and max(result.progress[:-1]) < 1.0
    assert failures == {}


def test_replay_detects_a_broken_walkthrough(env):
    game_id = games.level_games("L0", "eval")[0]
    _, info = env.reset(options={"game": game_id})
    for command in info["walkthrough"][:-1]:
        _, _, terminated, truncated, _ = env.step(command)
        assert not terminated and not truncated
    assert env.goal_progress() < 1.0


def test_random_admissible_agent_is_seeded(env):
    from gymnasium.wrappers import TimeLimit

    capped = TimeLimit(env, 30)  # the bare env has no cap; the protocol's 30 steps
    game_ids = games.level_games("L2", "eval")[:3]
    first = [random_admissible_episode(capped, g, seed=i) for i, g in enumerate(game_ids)]
    second = [random_admissible_episode(capped, g, seed=i) for i, g in enumerate(game_ids)]
    assert first == second
