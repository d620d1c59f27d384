"""``derl/ALFWorld-v0``: the real ALFWorld text games behind the Gymnasium API.

The env plays ALFWorld's ``game.tw-pddl`` files with TextWorld's PDDL engine (fast-downward
plus TextWorld's text grammar, see :mod:`derl_bench.families.alfworld.engine`); observations and
admissible commands are the same text alfworld's ``AlfredTWEnv`` produces.

- observation: text; on reset the room description and the goal line (``Your task is to: ...``);
- action: a text command, e.g. ``"go to countertop 1"`` (surrounding whitespace is ignored);
- reward: 1.0 on the winning step, else 0.0 (shaping belongs to Meta-Rewards);
- ``terminated``: the game is won. The bare env never truncates: the step cap is the
  ``TimeLimit`` that ``gymnasium.make`` puts around it (``max_episode_steps``, 30 by default,
  from the card's ``max_steps``).

``info`` carries ``admissible_commands``, ``won``, ``task_type``, ``game_id``, ``level``,
``split``, ``walkthrough`` (reset only), with ``expert=True`` ``expert_plan`` (commands
that win from the current state) and with ``teacher=True`` ``teacher_action`` (the searching
teacher's next command, see :mod:`derl_bench.families.alfworld.teacher`). The env emits no
primitives itself: the observers in :mod:`derl_bench.families.alfworld.observers` read
:meth:`ALFWorldEnv.goal_progress`, :attr:`ALFWorldEnv.last_action_admissible` and
:attr:`ALFWorldEnv.agent_location`.

With ALFWorld in the data root (``derl-bench data download alfworld``)::

    import gymnasium as gym
    import derl_bench  # noqa: F401
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(info["walkthrough"][0])

Games: ``reset(seed=s)`` draws the same game of the split for the same ``s``;
``reset(options={"game": game_id})`` plays one game, ``reset(options={"index": i})`` the
split's game ``i`` in manifest order; :meth:`ALFWorldEnv.games` iterates over a
split's games in manifest order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from derl_bench.data.root import dataset_dir
from derl_bench.envs.options import reset_options
from derl_bench.envs.spaces import as_text, text_space
from derl_bench.families.alfworld import games as games_mod
from derl_bench.families.alfworld.engine import Engine
from derl_bench.families.alfworld.game import load_game
from derl_bench.families.alfworld.teacher import SearchTeacher, TaskParams, engine_view
from derl_bench.families.alfworld.upstream import EngineError, ensure_alfworld_data

MAX_OBSERVATION_CHARS = 100_000
MAX_ACTION_CHARS = 1_000


class ALFWorldEnv(gym.Env[str, str]):
    """One ALFWorld game at a time, chosen from a level's train, validation or eval split.

    Args:
        level: ``"L0"``, ``"L1"`` or ``"L2"`` (see :mod:`derl_bench.families.alfworld.games`).
        split: ``"train"``, ``"validation"`` (held-out games of the training task types) or
            ``"eval"``.
        expert: also report an expert plan from the current state in ``info["expert_plan"]``:
            the walkthrough's rest while the agent follows it, else fast-downward's plan (a
            planner search whenever the agent leaves the plan).
        teacher: also report the searching teacher's next command in
            ``info["teacher_action"]`` (``""`` once won): a label that follows only what the
            agent has seen, kept up to date with every executed command, whoever chose it.
        games: play only these game ids (default: the split's manifest).
        data_root: the data root (default: ``DERL_BENCH_DATA``).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    @classmethod
    def data_files(cls, level: str = "L0", split: str = "train", **_: Any) -> list[str]:
        """The release split a level's split reads, as the data catalogue names it
        (:mod:`derl_bench.envs.items`), so a command checks its games' tree checksum before it
        plays one; nothing for a level or split the env refuses anyway."""
        release = games_mod.LEVEL_SOURCES.get(level, {}).get(split)
        return [] if release is None else [
            f"{games_mod.FAMILY}/{games_mod.GAMES_DIR}/{release[0]}"]

    def __init__(
        self,
        level: str = "L0",
        split: str = "train",
        expert: bool = False,
        teacher: bool = False,
        games: Sequence[str] | None = None,
        data_root: str | Path | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.level = level
        self.split = split
        self.expert = bool(expert)
        self.teacher = bool(teacher)
        self._teacher: SearchTeacher | None = None
        self.render_mode = render_mode
        self._root = Path(data_root).expanduser().resolve() if data_root is not None else None
        self._alfworld_dir = dataset_dir(games_mod.FAMILY, self._root)
        ensure_alfworld_data(self._alfworld_dir)
        self.game_ids: list[str] = (
            list(games) if games is not None else games_mod.level_games(level, split)
        )
        if not self.game_ids:
            raise ValueError("no games to play")
        self.observation_space = text_space(MAX_OBSERVATION_CHARS)
        self.action_space = text_space(MAX_ACTION_CHARS)
        self._engine: Engine | None = None
        self._broken: str | None = None
        self.game_id: str | None = None
        self.steps = 0
        self.done = True
        self.last_observation = ""
        self.last_action_admissible = False
        self.agent_location = ""

    # ------------------------------------------------------------------ games
    @staticmethod
    def games(level: str, split: str) -> Iterator[str]:
        """Iterate over the game ids of a level's split in manifest order."""
        return games_mod.iter_games(level, split)

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = reset_options(options, ("game", "index"))
        game_id = options.get("game")
        index = options.get("index")
        if index is not None:
            if not 0 <= int(index) < len(self.game_ids):
                raise ValueError(f"index {index} is outside the split's {len(self.game_ids)} games")
            game_id = self.game_ids[int(index)]
        if game_id is None:
            game_id = self.game_ids[int(self.np_random.integers(len(self.game_ids)))]
        path = games_mod.game_path(str(game_id), self._root)
        # A damaged game file is an error in the data, named, not an engine failure: it is
        # read before the engine is touched, and the engine stays usable for other games.
        game = load_game(str(path))
        if self._engine is None or self._broken is not None:
            self._restart_engine()
        assert self._engine is not None
        try:
            observation = self._engine.start(game)
        except Exception as exc:  # the engine is in an unknown state: rebuild it next time
            self._broken = f"{type(exc).__name__}: {exc}"
            raise EngineError(f"ALFWorld engine failed to start {game_id}: {self._broken}") from exc
        self.game_id = str(game_id)
        self.steps = 0
        self.done = False
        self.last_observation = observation
        self.last_action_admissible = False
        self.agent_location = self._engine.agent_location()
        if self.teacher:
            self._teacher = SearchTeacher(TaskParams.from_game_id(self.game_id),
                                          engine_view(self._engine))
            self._teacher.reset(observation)
        info = self._info(won=False)
        info["walkthrough"] = list(game.walkthrough)
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._engine is None or self.game_id is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._broken is not None:
            raise EngineError(f"the ALFWorld engine crashed ({self._broken}); call reset()")
        if self.done:
            raise gym.error.ResetNeeded("the episode is over; call reset()")
        command = as_text(action)
        try:
            observation, admissible = self._engine.step(command)
            won = self._engine.won
            if self._teacher is not None:
                self._teacher.observe(command, observation)
            info = self._info(won=won)
        except Exception as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            self.done = True
            raise EngineError(
                f"ALFWorld engine crashed on {command[:80]!r} in {self.game_id}: {self._broken}; "
                "call reset() to start a fresh engine"
            ) from exc
        self.steps += 1
        self.last_observation = observation
        self.last_action_admissible = admissible
        self.agent_location = self._engine.agent_location()
        self.done = won
        return observation, float(won), won, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.last_observation
        return None

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self.done = True

    def __del__(self) -> None:
        # An env dropped without close() still returns its engine library to the pool.
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ observer hooks
    def goal_progress(self) -> float:
        """Best fraction of the goal's fluent conjuncts holding now (1.0 exactly when won)."""
        if self._engine is None or self._engine.game is None:
            return 0.0
        return self._engine.goal_progress()

    @property
    def admissible_commands(self) -> list[str]:
        return list(self._engine.admissible_commands) if self._engine is not None else []

    @property
    def task_type(self) -> str:
        return games_mod.task_type(self.game_id) if self.game_id else ""

    # ------------------------------------------------------------------ internals
    def _restart_engine(self) -> None:
        if self._engine is not None:
            try:
                self._engine.close()
            except Exception:  # a crashed engine may fail to close; it is dropped either way
                pass
        self._engine = Engine()
        self._broken = None

    def _info(self, won: bool) -> dict[str, Any]:
        assert self._engine is not None
        info: dict[str, Any] = {
            "admissible_commands": list(self._engine.admissible_commands),
            "won": bool(won),
            "task_type": games_mod.task_type(self.game_id or ""),
            "game_id": self.game_id,
            "level": self.level,
            "split": self.split,
        }
        if self.expert:
            info["expert_plan"] = [] if won else self._engine.expert_plan()
        if self._teacher is not None:
            info["teacher_action"] = "" if won else self._teacher.act(info["admissible_commands"])
        return info

