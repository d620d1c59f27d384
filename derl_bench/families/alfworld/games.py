"""Which ALFWorld games exist, and which belong to each level and split.

A game id names a game by its place in the release: ``<split>/<task folder>/<trial>``, e.g.
``valid_seen/pick_two_obj_and_place-Newspaper-None-Drawer-224/trial_T20190911_101248_326533``.
The task type is the folder name's first part. The manifests listed in ``envs/alfworld.md`` are
the source of truth for the RLVMR/DERL levels:

========  ==================================  ============================  =======================
level     train                               validation                    eval
========  ==================================  ============================  =======================
L0        ``train``, all 6 task types (3553)  ``valid_train``, all 6 (200)  ``valid_seen``, all 6
                                                                            types (140)
L1        ``train``, all 6 task types (3553)  ``valid_train``, all 6 (200)  ``valid_unseen``, all 6
                                                                            types (134)
L2        ``train``, types 1-4 (2207)         ``valid_train``, types 1-4    ``valid_unseen``, types
                                                                            5-6 (38)
========  ==================================  ============================  =======================

``validation`` is for model selection during training (the meta loop scores its inner policies
on it): games of the training task types that training never plays, and no eval game.

    >>> task_type("train/pick_cool_then_place_in_recep-Mug-None-Cabinet-5/trial_T2019")
    'pick_cool_then_place_in_recep'
    >>> task_type_index("valid_unseen/pick_two_obj_and_place-Pen-None-Drawer-1/trial_x")
    6
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from derl_bench.cards import read_manifest
from derl_bench.data.root import dataset_dir

FAMILY = "alfworld"
GAMES_DIR = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
LEVELS = ("L0", "L1", "L2")
SPLITS = ("train", "validation", "eval")
RELEASE_SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")

TASK_TYPES: dict[int, str] = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}
_TYPE_INDEX = {name: index for index, name in TASK_TYPES.items()}

# How each level's manifests are built from the release (see the card and the protocol).
LEVEL_SOURCES: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {
    "L0": {"train": ("train", (1, 2, 3, 4, 5, 6)),
           "validation": ("valid_train", (1, 2, 3, 4, 5, 6)),
           "eval": ("valid_seen", (1, 2, 3, 4, 5, 6))},
    "L1": {"train": ("train", (1, 2, 3, 4, 5, 6)),
           "validation": ("valid_train", (1, 2, 3, 4, 5, 6)),
           "eval": ("valid_unseen", (1, 2, 3, 4, 5, 6))},
    "L2": {"train": ("train", (1, 2, 3, 4)), "validation": ("valid_train", (1, 2, 3, 4)),
           "eval": ("valid_unseen", (5, 6))},
}


class UnknownGameError(KeyError):
    """A game id that is malformed or not in the data root."""


def task_type(game_id: str) -> str:
    """The task type of a game: its folder name up to the first ``-``."""
    parts = game_id.split("/")
    if len(parts) != 3:
        raise UnknownGameError(
            f"not an ALFWorld game id (<split>/<task folder>/<trial>): {game_id!r}")
    return parts[1].split("-", 1)[0]


def task_type_index(game_id: str) -> int:
    """The protocol's task type number (1-6) of a game."""
    name = task_type(game_id)
    if name not in _TYPE_INDEX:
        raise UnknownGameError(f"unknown ALFWorld task type {name!r} in {game_id!r}")
    return _TYPE_INDEX[name]


def games_root(root: Path | None = None) -> Path:
    """The folder holding the release splits: ``<data root>/alfworld/json_2.1.1``."""
    return dataset_dir(FAMILY, root) / GAMES_DIR


def game_path(game_id: str, root: Path | None = None) -> Path:
    """The ``game.tw-pddl`` file of ``game_id``; raises :class:`UnknownGameError` if absent."""
    task_type(game_id)  # validates the shape
    if ".." in game_id.split("/") or game_id.startswith("/"):
        raise UnknownGameError(f"not an ALFWorld game id: {game_id!r}")
    path = games_root(root) / game_id / GAME_FILE
    if not path.is_file():
        raise UnknownGameError(f"game {game_id!r} is not in the data root ({path} missing)")
    return path


def discover_games(release_split: str, root: Path | None = None) -> list[str]:
    """All game ids of a release split in the data root, sorted."""
    if release_split not in RELEASE_SPLITS:
        raise ValueError(f"release split must be one of {RELEASE_SPLITS}, got {release_split!r}")
    base = games_root(root) / release_split
    return sorted(
        f"{release_split}/{p.parent.parent.name}/{p.parent.name}"
        for p in base.glob(f"*/*/{GAME_FILE}")
    )


def level_games_from_release(level: str, split: str, root: Path | None = None) -> list[str]:
    """Build a level's game list from the data root (how the manifests were made)."""
    release_split, types = LEVEL_SOURCES[_check_level(level)][_check_split(split)]
    return [g for g in discover_games(release_split, root) if task_type_index(g) in types]


def manifest_name(level: str, split: str) -> str:
    """The card's manifest name for a level and split, e.g. ``L2-eval``."""
    return f"{_check_level(level)}-{_check_split(split)}"


def level_games(level: str, split: str) -> list[str]:
    """The checksum-verified game ids of a level's split, in manifest order."""
    return read_manifest(FAMILY, manifest_name(level, split))


def iter_games(level: str, split: str) -> Iterator[str]:
    """Iterate over a split's games in manifest order (for exhaustive evaluation)."""
    yield from level_games(level, split)


def _check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    return level


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split
