"""The reasoning_gym family's evaluation rules (the card's ``evaluation`` hook): L0/L1/L2 are
the eval slices of the card's ``benchmark_task``, generated and checked against the card's
checksums."""

from __future__ import annotations

import functools

from derl_bench.cards import sha256_lines
from derl_bench.evaluation.families import LevelsAdapter
from derl_bench.evaluation.protocol import EvalSet, LevelSpec, ManifestRef
from derl_bench.families.reasoning_gym.env import LEVELS, generate, generators, manifest_key
from derl_bench.family import Family


class ReasoningGymAdapter(LevelsAdapter):
    """``derl/ReasoningGym-v0``: one step; L0/L1/L2 are the eval slices of the card's
    ``benchmark_task``, checksummed on the card."""

    def __init__(self, env_id: str, family: Family) -> None:
        super().__init__(env_id, family)
        self.task = str(self.card["benchmark_task"])

    def levels(self) -> dict[str, LevelSpec]:
        card = self.card
        out = {}
        for level in LEVELS:
            digest = card["data_checksums"][manifest_key(self.task, level)]
            manifest = ManifestRef(f"{level}-eval", str(digest), int(card["sizes"]["eval"]),
                                   functools.partial(_reasoning_gym_ids, self.task, level))
            out[level] = LevelSpec(manifest, {"task": self.task, "level": level,
                                              "split": "eval"})
        return out

    def task_types(self, level: str) -> frozenset[str]:
        # An id names its generator (chain_sum:<digest>): the level's generators, read from
        # the card rather than generating its problems.
        self.level(level)
        return frozenset(name for name, _ in generators(self.task, level))

    def data_checksums(self, eval_set: EvalSet) -> dict[str, str]:
        # Generated, not read: the data is the level's eval manifest, checked on generation.
        kwargs = eval_set.spec.env_kwargs
        return {manifest_key(kwargs["task"], kwargs["level"]):
                sha256_lines(_reasoning_gym_ids(kwargs["task"], kwargs["level"]))}


def _reasoning_gym_ids(task: str, level: str) -> list[str]:
    return [p.problem_id for p in generate(task, level, "eval")]
