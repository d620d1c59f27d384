"""A toy multi-turn env of a family defined outside the package: walk a number line to a goal.

Each item is a goal ``goal:<n>``; the walker starts at 0 and answers ``up`` or ``down``. It
follows the conventions the generic evaluation adapter reads: ``problems`` with a
``problem_id``, ``reset(options={"index": i})``, and the classmethods ``item_ids`` and
``eval_sets`` that :mod:`derl_bench.envs.items` asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from derl_bench.envs.spaces import text_space

SPLITS = {"train": (1, 2, 3, 1), "eval": (1, 2, 1)}


@dataclass(frozen=True)
class Goal:
    problem_id: str
    target: int


class CountingEnv(gym.Env[str, str]):
    def __init__(self, split: str = "train", render_mode: str | None = None) -> None:
        if split not in SPLITS:
            raise ValueError(f"no split {split!r}")
        self.split = split
        self.problems = tuple(Goal(f"goal:{n}#{i}", n) for i, n in enumerate(SPLITS[split]))
        self.observation_space = text_space(200)
        self.action_space = text_space(200)
        self.position = 0
        self.goal = self.problems[0]

    @classmethod
    def item_ids(cls, split: str = "train", **_: Any) -> list[str]:
        return [g.problem_id for g in cls(split).problems]

    @classmethod
    def eval_sets(cls, **_: Any) -> dict[str, dict[str, Any]]:
        return {"L0": {"split": "eval"}}

    def _info(self) -> dict[str, Any]:
        return {"task": f"walk to {self.goal.target}", "admissible_commands": ["up", "down"],
                "won": self.position == self.goal.target, "walkthrough": ["up"] * self.goal.target}

    def _text(self) -> str:
        return f"You stand at {self.position}."

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = (options or {}).get("index")
        if index is None:
            index = int(self.np_random.integers(len(self.problems)))
        self.goal, self.position = self.problems[index], 0
        return self._text(), self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.position += {"up": 1, "down": -1}.get(action.strip(), 0)
        won = self.position == self.goal.target
        return self._text(), float(won), won, False, self._info()
