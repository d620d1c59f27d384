"""Env cards: the one source of truth for env ids, splits, manifests and a family's parts.

Each env family has a card, ``<family>.md``: a YAML front matter block that code reads, then
prose that people read. Registration, split selection, manifest checks and the parts a family
plugs into later stages (its ``hooks:``) all read the front matter, so the documentation cannot
drift from the code.

Cards are found, in this order, in the built-in folder (the repository's ``envs/``, which wheels
carry as ``derl_bench/_cards``), in each folder that the ``DERL_BENCH_CARD_PATH`` setting names
(separated by :data:`os.pathsep`), and in the folders that packages declare under the entry-point
group ``derl_bench.cards`` (an entry point names a folder, a module whose folder holds the cards,
or a callable returning a folder). A family lives outside this package by putting its card in
one of those folders; a manifest a card lists is read relative to the card's own folder. A
family defined by two cards is an error. The search runs once; :func:`derl_bench.family.reload`
runs it again.

    >>> card = load_card("math")
    >>> "derl/GSM8K-v0" in card["ids"]
    True
"""

from __future__ import annotations

import functools
import hashlib
import os
import types
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml

_PACKAGE_DIR = Path(__file__).resolve().parent

CARD_PATH_SETTING = "DERL_BENCH_CARD_PATH"
"""The environment variable naming extra card folders, separated by :data:`os.pathsep`."""
ENTRY_POINT_GROUP = "derl_bench.cards"
"""The entry-point group through which an installed package adds card folders."""


class CardError(ValueError):
    """An env card or manifest is missing or does not match its recorded checksum."""


def cards_dir() -> Path:
    """Return the built-in card folder: in the wheel, else the source tree's ``envs/``."""
    for candidate in (_PACKAGE_DIR / "_cards", _PACKAGE_DIR.parent / "envs"):
        if candidate.is_dir() and any(candidate.glob("*.md")):
            return candidate
    raise CardError("env cards not found: neither derl_bench/_cards nor the repository's envs/")


def _entry_point_dirs() -> list[Path]:
    found = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        target = point.load()
        if isinstance(target, types.ModuleType):
            if target.__file__ is None:
                raise CardError(f"entry point {point.name!r} names a module without a folder")
            target = Path(target.__file__).parent
        elif callable(target):
            target = target()
        found.append(Path(target))
    return found


def card_dirs() -> list[Path]:
    """The folders searched for cards, in search order (see the module docstring)."""
    setting = os.environ.get(CARD_PATH_SETTING, "")
    extra = [Path(p) for p in setting.split(os.pathsep) if p]
    for folder in extra:
        if not folder.is_dir():
            raise CardError(f"{CARD_PATH_SETTING} names {str(folder)!r}, which is not a folder")
    dirs: list[Path] = []
    for folder in [cards_dir(), *extra, *_entry_point_dirs()]:
        if folder.resolve() not in {d.resolve() for d in dirs}:
            dirs.append(folder)
    return dirs


@functools.cache
def card_paths() -> dict[str, Path]:
    """Each family's card file, by family name (a card's file is named after its family)."""
    paths: dict[str, Path] = {}
    for folder in card_dirs():
        for path in sorted(folder.glob("*.md")):
            if path.stem.lower() == "readme":
                continue
            if path.stem in paths:
                raise CardError(f"family {path.stem!r} has two cards: {paths[path.stem]} "
                                f"and {path}")
            paths[path.stem] = path
    return paths


def card_families() -> list[str]:
    """Names of all env families that have a card."""
    return sorted(card_paths())


@functools.cache
def load_card(family: str) -> dict[str, Any]:
    """Parse the YAML front matter of ``<family>.md``."""
    path = card_paths().get(family)
    if path is None or not path.is_file():
        raise CardError(f"no env card for family {family!r} in "
                        f"{', '.join(str(d) for d in card_dirs())}")
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise CardError(f"{path} does not start with a YAML front matter block")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise CardError(f"{path}: front matter block is not closed by '---'")
    meta = yaml.safe_load(text[4:end]) or {}
    if meta.get("family") != family:
        raise CardError(f"{path}: front matter says family {meta.get('family')!r}")
    return meta


def sha256_lines(lines: list[str]) -> str:
    """The checksum of a manifest: sha256 over its entries joined by newlines."""
    return hashlib.sha256(("\n".join(lines) + "\n").encode("utf-8")).hexdigest()


def read_manifest(family: str, name: str, *, verify: bool = True) -> list[str]:
    """Return the entries of manifest ``name`` of ``family`` (one per line), checksum-verified.

    The card lists each manifest under ``manifests:`` with ``file``, ``count`` and ``sha256``.
    """
    card = load_card(family)
    spec = (card.get("manifests") or {}).get(name)
    if spec is None:
        raise CardError(f"card {family!r} has no manifest {name!r}")
    path = card_paths()[family].parent / spec["file"]
    if not path.is_file():
        raise CardError(f"manifest {name!r} of {family!r} missing at {path}")
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln]
    if verify:
        if len(lines) != int(spec["count"]):
            raise CardError(f"manifest {family}/{name}: {len(lines)} entries, "
                            f"card says {spec['count']}")
        digest = sha256_lines(lines)
        if digest != spec["sha256"]:
            raise CardError(f"manifest {family}/{name}: sha256 {digest} != card's {spec['sha256']}")
    return lines
