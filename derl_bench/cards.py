"""Env cards: the one source of truth for env ids, splits and manifests.

Each env family has a card, ``envs/<family>.md`` at the top of the repository: a YAML front
matter block that code reads, then prose that people read. Registration, split selection and
manifest checks all read the front matter, so the documentation cannot drift from the code.
Wheels carry the same files as ``derl_bench/_cards``.

    >>> card = load_card("math")
    >>> "derl/GSM8K-v0" in card["ids"]
    True
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import yaml

_PACKAGE_DIR = Path(__file__).resolve().parent


class CardError(ValueError):
    """An env card or manifest is missing or does not match its recorded checksum."""


def cards_dir() -> Path:
    """Return the folder holding the env cards: in the wheel, else the source tree's ``envs/``."""
    for candidate in (_PACKAGE_DIR / "_cards", _PACKAGE_DIR.parent / "envs"):
        if candidate.is_dir() and any(candidate.glob("*.md")):
            return candidate
    raise CardError("env cards not found: neither derl_bench/_cards nor the repository's envs/")


def card_families() -> list[str]:
    """Names of all env families that have a card."""
    return sorted(p.stem for p in cards_dir().glob("*.md") if p.stem.lower() != "readme")


@functools.cache
def load_card(family: str) -> dict[str, Any]:
    """Parse the YAML front matter of ``envs/<family>.md``."""
    path = cards_dir() / f"{family}.md"
    if not path.is_file():
        raise CardError(f"no env card for family {family!r} at {path}")
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
    path = cards_dir() / spec["file"]
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
