"""Turn episodes into training tensors: one row per step, completion tokens unmasked.

Each row is a step's prompt ids followed by its completion ids, right-padded. ``loss_mask`` is
1 exactly on the completion tokens: prompt tokens (task, history, env observations) and padding
never carry gradient. Every step of an episode carries the episode's advantage, which is how the
multi-turn protocol shares the group-relative advantage across the episode's generations::

    >>> from derl_bench.rollout.types import Step
    >>> ep = Episode(0, 0, [Step([5, 6], [7, 2], "x", "x", {})])
    >>> b = collate([ep], [0.5], pad_id=0)
    >>> b.input_ids.tolist(), b.loss_mask.tolist(), b.advantages.tolist()
    ([[5, 6, 7, 2]], [[0.0, 0.0, 1.0, 1.0]], [0.5])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from derl_bench.rollout.types import Episode


@dataclass
class TrainBatch:
    """Right-padded rows of prompt + completion tokens."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    episode_index: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def slice(self, rows: slice) -> TrainBatch:
        """A micro-batch, trimmed to its longest row."""
        width = int(self.attention_mask[rows].sum(1).max())
        return TrainBatch(self.input_ids[rows, :width], self.attention_mask[rows, :width],
                          self.loss_mask[rows, :width], self.advantages[rows],
                          self.episode_index[rows])

    def to(self, device: str | torch.device) -> TrainBatch:
        return TrainBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask,
                                                   self.loss_mask, self.advantages,
                                                   self.episode_index)))


def collate(episodes: Sequence[Episode], advantages: Sequence[float] | np.ndarray, pad_id: int,
            skip_zero_advantage: bool = False) -> TrainBatch:
    """Rows for every step of every episode (see the module docstring).

    ``skip_zero_advantage`` drops steps whose advantage is exactly 0 (degenerate groups), which
    contribute nothing to the policy term; keep them when the KL term should see them.
    """
    if len(episodes) != len(advantages):
        raise ValueError(f"{len(episodes)} episodes but {len(advantages)} advantages")
    rows, advs, owners = [], [], []
    for index, (episode, adv) in enumerate(zip(episodes, advantages, strict=True)):
        if skip_zero_advantage and adv == 0:
            continue
        for step in episode.steps:
            if not step.completion_ids:
                continue
            rows.append((step.prompt_ids, step.completion_ids))
            advs.append(float(adv))
            owners.append(index)
    width = max((len(p) + len(c) for p, c in rows), default=1)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.float32)
    for r, (prompt, completion) in enumerate(rows):
        n = len(prompt) + len(completion)
        ids[r, :n] = torch.tensor(list(prompt) + list(completion), dtype=torch.long)
        attention[r, :n] = 1
        loss_mask[r, len(prompt):n] = 1
    return TrainBatch(ids, attention, loss_mask, torch.tensor(advs, dtype=torch.float32),
                      torch.tensor(owners, dtype=torch.long))
