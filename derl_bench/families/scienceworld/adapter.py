"""ScienceWorld's evaluation rules (the card's ``evaluation`` hook): the RLVMR/DERL levels, a
fixed sample of each eval set, success and score, the published metric and the gold path.

ScienceWorld's eval sets hold 1661, 1684 and 549 (task, variation) pairs (``L<n>-eval``); the
protocol runs a fixed-seed sample of :data:`SCIENCEWORLD_SAMPLE` of each (see
:func:`~derl_bench.evaluation.protocol.sample_entries`); success is score 100 within 30 steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym

from derl_bench.envs.items import eval_splits
from derl_bench.evaluation.families import FamilyAdapter, success_of
from derl_bench.evaluation.protocol import EvalSet, LevelSpec, card_manifest

if TYPE_CHECKING:
    from derl_bench.families.scienceworld import ScienceWorldEnv

SCIENCEWORLD_SAMPLE = 100
SAMPLE_SEED = 0


class ScienceWorldAdapter(FamilyAdapter):
    """ScienceWorld: the RLVMR/DERL levels, a fixed sample of each eval set."""

    has_score = True
    has_published = True

    def levels(self) -> dict[str, LevelSpec]:
        return {level: LevelSpec(card_manifest(self.resolved, f"{level}-{kwargs['split']}"),
                                 kwargs, sample_size=SCIENCEWORLD_SAMPLE, sample_seed=SAMPLE_SEED)
                for level, kwargs in eval_splits(self.resolved, self.env_id).items()}

    def rlvmr_eval_set(self, level: str, seed: int) -> EvalSet:
        from derl_bench.families.scienceworld.rlvmr import scienceworld_entries

        spec = self.level(level)
        drawn = LevelSpec(spec.manifest, {**spec.env_kwargs, "protocol": "rlvmr"},
                          draws_seed=seed)
        return EvalSet(self.env_id, level, drawn, tuple(scienceworld_entries(level, seed)))

    def available_actions(self, env: gym.Env) -> str:
        from derl_bench.families.scienceworld.rlvmr import scienceworld_available_actions

        sw = cast("ScienceWorldEnv", env)
        return scienceworld_available_actions(sw.possible_actions(), sw.possible_objects())

    def reset_options(self, env: gym.Env, entry: str) -> dict[str, Any]:
        task, _, variation = entry.partition("\t")
        return {"task": task, "variation": int(variation)}

    def task_type(self, entry: str, info: Mapping[str, Any]) -> str:
        return entry.partition("\t")[0]

    def outcome(self, env: gym.Env, reward: float, terminated: bool,
                info: Mapping[str, Any]) -> tuple[bool, float | None]:
        return success_of(info, self.spec), float(info.get("score", 0.0))

    def published(self, info: Mapping[str, Any]) -> bool | None:
        return bool(info.get("published_success", False))

    def valid_actions(self, env: gym.Env, info: Mapping[str, Any]) -> list[str] | None:
        return list(cast("ScienceWorldEnv", env).valid_actions())

    def oracle_plan(self, env: gym.Env, info: Mapping[str, Any]) -> list[str]:
        return list(cast("ScienceWorldEnv", env).gold_path())

    def data_checksums(self, eval_set: EvalSet) -> dict[str, str]:
        from derl_bench.data.download import sha256_file
        from derl_bench.data.root import dataset_dir

        name = f"{eval_set.level}_idx.json"
        return {f"scienceworld/{name}": sha256_file(dataset_dir("scienceworld") / name)}


__all__ = ["SAMPLE_SEED", "SCIENCEWORLD_SAMPLE", "ScienceWorldAdapter"]
