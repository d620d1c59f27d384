"""ALFWorld's evaluation rules (the card's ``evaluation`` hook): the RLVMR/DERL levels, every
eval game once in manifest order, success when the game is won within the step cap."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from derl_bench.envs.items import eval_splits
from derl_bench.evaluation.families import FamilyAdapter
from derl_bench.evaluation.protocol import EvalSet, LevelSpec, card_manifest
from derl_bench.evaluation.schema import PROMPT_FREE_TEXT
from derl_bench.families.alfworld.commands import COMMANDS


class ALFWorldAdapter(FamilyAdapter):
    """ALFWorld: the RLVMR/DERL levels, every eval game in manifest order."""

    # the command policies read a compact state (derl_bench.families.alfworld.compact_state),
    # or one of the other views the commands hook offers
    policy_interfaces = (PROMPT_FREE_TEXT,
                         *(parts.interface for parts in (COMMANDS, *COMMANDS.views)))

    def rlvmr_eval_set(self, level: str, seed: int) -> EvalSet:
        # RLVMR's ALFWorld workers draw games inside alfworld's batch env; this protocol
        # keeps the full pass over the eval games and applies RLVMR's prompt and sampling
        return self.eval_set(level)

    def levels(self) -> dict[str, LevelSpec]:
        return {level: LevelSpec(card_manifest(self.resolved, f"{level}-{kwargs['split']}"),
                                 kwargs)
                for level, kwargs in eval_splits(self.resolved, self.env_id).items()}

    def reset_options(self, env: gym.Env, entry: str) -> dict[str, Any]:
        return {"game": entry}

    def task_type(self, entry: str, info: Mapping[str, Any]) -> str:
        from derl_bench.families.alfworld.games import task_type

        return task_type(entry)

    def valid_actions(self, env: gym.Env, info: Mapping[str, Any]) -> list[str] | None:
        return list(info.get("admissible_commands") or [])

    def oracle_plan(self, env: gym.Env, info: Mapping[str, Any]) -> list[str]:
        return list(info["walkthrough"])

    def data_checksums(self, eval_set: EvalSet) -> dict[str, str]:
        from derl_bench.data.download import tree_sha256
        from derl_bench.families.alfworld.games import game_path, games_root

        root = games_root()
        files = [game_path(entry) for entry in eval_set.entries]
        return {f"alfworld/json_2.1.1:{eval_set.spec.manifest.name}": tree_sha256(root, files)}
