"""ALFWorld's dataset (the card's ``data`` hook): the TextWorld-PDDL games of alfworld's 0.4.2
release and the two logic files the engine reads, and what ``derl-bench data verify`` checks per
release split: the game count and the tree checksum of the games.

A tree checksum says a split changed, not which game; each game's own digest (the first 16 hex
digits of its file's sha256, in ``envs/manifests/alfworld/<split>.sha256``, a line per game of
the split's manifest) names the damaged ones, and :func:`game_digest_problem` lets the engine
refuse a damaged game wherever it is loaded::

    >>> game_digest_problem("valid_seen/no-such-game/trial", b"{}") is None  # not a release game
    True
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from derl_bench.data.sources import Check, Dataset, Source

DIGEST_CHARS = 16


@functools.cache
def release_manifests() -> dict[str, str]:
    """Release split -> the card manifest that lists all its games (its digests follow that
    manifest's order): the first level split built from the whole release split.

        >>> release_manifests()["valid_unseen"]
        'L1-eval'
    """
    from derl_bench.families.alfworld.games import LEVEL_SOURCES, TASK_TYPES, manifest_name

    found: dict[str, str] = {}
    for level, splits in LEVEL_SOURCES.items():
        for split, (release, types) in splits.items():
            if set(types) == set(TASK_TYPES):
                found.setdefault(release, manifest_name(level, split))
    return found


@functools.cache
def game_digests() -> dict[str, str]:
    """Game id -> the first 16 hex digits of its ``game.tw-pddl``'s sha256, for every game of
    the release (``envs/manifests/alfworld/<split>.sha256``, aligned with the manifests)."""
    from derl_bench.cards import CardError, card_paths, read_manifest
    from derl_bench.families.alfworld.games import FAMILY

    folder = card_paths()[FAMILY].parent / "manifests" / FAMILY
    digests: dict[str, str] = {}
    for split, manifest in release_manifests().items():
        games = read_manifest(FAMILY, manifest)
        path = folder / f"{split}.sha256"
        lines = path.read_text(encoding="utf-8").split() if path.is_file() else []
        if len(lines) != len(games):
            raise CardError(f"{path}: {len(lines)} game digests, but manifest {manifest} lists "
                            f"{len(games)} games")
        digests.update(zip(games, lines, strict=True))
    return digests


def game_digest_problem(game_id: str, raw: bytes) -> str | None:
    """Why the bytes ``raw`` read for ``game_id`` are not the release's game, else None (also
    for an id the release does not have: only release games have a digest to check)."""
    expected = game_digests().get(game_id)
    if expected is None:
        return None
    actual = hashlib.sha256(raw).hexdigest()[:DIGEST_CHARS]
    if actual == expected:
        return None
    return (f"its content differs from the release's game (sha256 {actual}..., expected "
            f"{expected}...): it was changed or damaged after it was downloaded")


def _key_games(key: str) -> list[str]:
    """The games a catalogue key covers: a release split's folder
    (``alfworld/json_2.1.1/train``) or an eval set (``alfworld/json_2.1.1:L0-eval``)."""
    from derl_bench.cards import read_manifest
    from derl_bench.families.alfworld.games import FAMILY

    if ":" in key:
        return read_manifest(FAMILY, key.rsplit(":", 1)[1])
    split = key.rstrip("/").rsplit("/", 1)[-1]
    manifests = release_manifests()
    return read_manifest(FAMILY, manifests[split]) if split in manifests else []


def damaged_games(root: Path, key: str) -> list[Path]:
    """The game files under the data root ``root`` that ``key`` covers (see
    :func:`_key_games`) and that are missing or differ from the release, in manifest order."""
    from derl_bench.families.alfworld.games import GAME_FILE, GAMES_DIR

    bad = []
    for game in _key_games(key):
        path = root / "alfworld" / GAMES_DIR / game / GAME_FILE
        if not path.is_file() or game_digest_problem(game, path.read_bytes()) is not None:
            bad.append(path)
    return bad


_ALFWORLD_RAW = "https://raw.githubusercontent.com/alfworld/alfworld/0.4.2/alfworld/data"

DATASETS = (
    Dataset(
        name="alfworld",
        description="ALFWorld TextWorld-PDDL games (release json_2.1.3_tw-pddl) and logic files",
        licence="MIT",
        sources=(
            Source(
                "alfworld/alfworld_tw-pddl.zip",
                "https://github.com/alfworld/alfworld/releases/download/0.4.2/json_2.1.3_tw-pddl.zip",
                kind="zip",
                extract_to="alfworld",
                sha256=(
                    # the official 0.4.2 release asset
                    "5df77ea759f2211a4106082839ddbbb790f1ba4e7d097ed732cf453f72aa36cf",
                    # the release-style zip of the same games that offline mirrors serve
                    "0088e73b12cd39ec9897ef01cb5590f1471b3137753388acf3e8b69b6b68ef96",
                ),
                size_hint="37 MB",
            ),
            Source(
                "alfworld/logic/alfred.pddl",
                f"{_ALFWORLD_RAW}/alfred.pddl",
                sha256=("f1473041ed01da514de1f87adfd7ef0804862361f83ccf63c75e43633b0eb280",),
            ),
            Source(
                "alfworld/logic/alfred.twl2",
                f"{_ALFWORLD_RAW}/alfred.twl2",
                sha256=("c5b22f0f73309a7fd7c8e5b71de42ad4803b60766ab4a51cc2feb34162be036b",),
            ),
        ),
        checks=(
            Check("train", "glob", "alfworld/json_2.1.1/train", 3553, pattern="*/*/game.tw-pddl",
                  sha256="24c073a01227f4201c14998a559897a0ba7cc296b7d7a8ebd9136d1c302a2c49"),
            Check("valid_seen", "glob", "alfworld/json_2.1.1/valid_seen", 140,
                  pattern="*/*/game.tw-pddl",
                  sha256="72a9913043fe1233800ab13a6413aa8d9cc4149088de9e9cfe25e93eabefbace"),
            Check("valid_unseen", "glob", "alfworld/json_2.1.1/valid_unseen", 134,
                  pattern="*/*/game.tw-pddl",
                  sha256="4b8f2b569f618b78bf698200b8a21a0f05e931a2a6d6a443c8eea50d0095bc6b"),
            Check("valid_train", "glob", "alfworld/json_2.1.1/valid_train", 200,
                  pattern="*/*/game.tw-pddl",
                  sha256="fc645378044ccd95f9054daafc02b89c823279494dfa5801caea65c3a5cd646b"),
        ),
        damaged=damaged_games,
    ),
)
