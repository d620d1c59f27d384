"""Episodes -> training rows: prompt and env tokens masked, advantages per episode."""

from __future__ import annotations

import pytest
import torch

from derl_bench.rollout import Episode, Step, collate, episode_groups


def step(prompt, completion, **primitives):
    return Step(prompt, completion, "text", "act", dict(primitives))


def test_every_step_of_an_episode_carries_its_advantage_and_only_completions_train():
    episodes = [
        Episode(0, 11, [step([1, 2, 3], [4, 5]), step([1, 2, 3, 4, 5, 9, 9], [6])]),
        Episode(0, 11, [step([1, 2, 3], [7])]),
    ]
    batch = collate(episodes, [0.5, -0.5], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 0, 0, 0],
                                        [1, 2, 3, 4, 5, 9, 9, 6],
                                        [1, 2, 3, 7, 0, 0, 0, 0]]
    assert batch.loss_mask.tolist() == [[0, 0, 0, 1, 1, 0, 0, 0],
                                        [0, 0, 0, 0, 0, 0, 0, 1],
                                        [0, 0, 0, 1, 0, 0, 0, 0]]
    assert batch.attention_mask.sum(1).tolist() == [5, 8, 4]
    assert batch.advantages.tolist() == [0.5, 0.5, -0.5]
    assert batch.episode_index.tolist() == [0, 0, 1]
    assert episode_groups(episodes) == [0, 0]


def test_slice_trims_padding_and_zero_advantage_rows_can_be_dropped():
    episodes = [Episode(0, 0, [step([1], [2, 3, 4, 5])]), Episode(0, 0, [step([1], [2])])]
    batch = collate(episodes, [0.0, 1.0], pad_id=0)
    assert batch.slice(slice(1, 2)).input_ids.tolist() == [[1, 2]]
    kept = collate(episodes, [0.0, 1.0], pad_id=0, skip_zero_advantage=True)
    assert len(kept) == 1 and kept.advantages.tolist() == [1.0]


def test_episode_helpers():
    ep = Episode(3, 7, [step([1], [2], success=0.0), step([1], [2], success=1.0)])
    assert ep.length == 2 and ep.last("success") == 1.0 and ep.last("missing", -1.0) == -1.0
    assert ep.primitive_steps == [{"success": 0.0}, {"success": 1.0}]


def test_mismatched_advantages_are_rejected():
    with pytest.raises(ValueError):
        collate([Episode(0, 0, [step([1], [2])])], [1.0, 2.0], pad_id=0)
    assert isinstance(collate([], [], pad_id=0).input_ids, torch.Tensor)
