"""Rollouts: run an LLM policy in envs and collect token ids, masks and per-step primitives."""

from derl_bench.policies.session import admissible_actions, task_description
from derl_bench.rollout.batch import TrainBatch, collate
from derl_bench.rollout.collect import (
    grade_single_step,
    rollout_multi_turn,
    rollout_single_step,
    single_step_prompts,
)
from derl_bench.rollout.types import Episode, Step, episode_groups

__all__ = [
    "Episode",
    "Step",
    "TrainBatch",
    "admissible_actions",
    "collate",
    "episode_groups",
    "grade_single_step",
    "rollout_multi_turn",
    "rollout_single_step",
    "single_step_prompts",
    "task_description",
]
