"""What each dataset is made of, where upstream publishes it, and how to check it.

A dataset is a list of :class:`Source` objects. Each source has one official URL and a path
relative to the data root; a mirror (``--mirror URL``) serves the same relative paths, so a
mirror of the upstream layout, as any static file server shows it, works unchanged.

Every source is checked by sha256. Archives accept the official release's checksum and the
release-style mirror's; trees (the MATH release, fetched as a tarball or, from a mirror, file by
file) are checked by a *tree checksum*: sha256 over ``"<relative path>\\t<sha256 of file>\\n"``
for every file, in sorted path order (see :func:`derl_bench.data.download.tree_sha256`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from derl_bench.family import family_specs, on_reload


@dataclass(frozen=True)
class Source:
    """One downloadable piece of a dataset.

    ``path`` is where it lives in the data root (and on a mirror). ``kind`` is ``"file"`` (kept
    as is), ``"zip"`` (extracted into ``extract_to``, then removed) or ``"tree"`` (a folder:
    the official URL is a tarball holding it; a mirror serves it file by file as listed in
    ``file_list``).
    """

    path: str
    url: str
    kind: str = "file"
    sha256: tuple[str, ...] = ()
    tree_sha256: str = ""
    extract_to: str = ""
    file_list: str = ""
    size_hint: str = ""


@dataclass(frozen=True)
class Check:
    """One line of ``derl-bench data verify``: a split, its expected count and checksum.

    ``kind`` is ``"jsonl"`` (count lines; checksum the file), ``"json"`` (count the items of
    a JSON list; checksum the file), ``"tree"`` (count files; tree
    checksum) or ``"glob"`` (count files matching ``pattern`` under ``path``; their tree
    checksum is printed, and enforced when ``sha256`` is given).
    """

    name: str
    kind: str
    path: str
    count: int
    sha256: str = ""
    pattern: str = ""


@dataclass(frozen=True)
class Dataset:
    """A named dataset: its sources and the per-split checks that prove it is intact."""

    name: str
    description: str
    licence: str
    sources: tuple[Source, ...]
    checks: tuple[Check, ...] = field(default=())
    damaged: Callable[[Path, str], list[Path]] | None = None
    """Given the data root and a checked path whose tree checksum differs (a check's path, or a
    selection key of the card's ``data_checksums``), the files in it that are missing or
    differ: a tree checksum says that something changed, this says what."""


_DERL_RAW = (
    # Pinned to a commit: the file is the paper's data, and a moving branch could change it.
    "https://raw.githubusercontent.com/sitaocheng/DERL/e9f0ff990841cb861457d9e607130c091864ccc5"
)

BUILTIN: dict[str, Dataset] = {
    "derl": Dataset(
        name="derl",
        description=(
            "The DERL paper's Meta-Optimizer cold-start corpus: 206 hand-written formulas over "
            "g1..g4 (sitaocheng/DERL, dataset/)"
        ),
        licence="Apache-2.0",
        sources=(
            Source(
                "derl/dataset/cold_start_training_data.json",
                f"{_DERL_RAW}/dataset/cold_start_training_data.json",
                sha256=("ad22bcdeef6048b98320756bc93c1ace5bcccd5f8ccc7657ed4134b1574925c9",),
            ),
        ),
        checks=(
            Check("cold_start", "json", "derl/dataset/cold_start_training_data.json", 206,
                  "ad22bcdeef6048b98320756bc93c1ace5bcccd5f8ccc7657ed4134b1574925c9"),
        ),
    ),
}


@functools.cache
def datasets() -> dict[str, Dataset]:
    """Every dataset by name: the ones no family owns (:data:`BUILTIN`, the DERL paper's
    cold-start formulas) and each family's, which its card names under ``hooks: data:`` (a
    dotted path to a sequence of :class:`Dataset`, kept in the family's package)."""
    found = dict(BUILTIN)
    for spec in family_specs().values():
        if not spec.has_part("data"):
            continue
        for entry in spec.part("data"):
            if entry.name in found:
                raise ValueError(f"card {spec.name!r} declares dataset {entry.name!r}, "
                                 "which another card or the built-in list declares already")
            found[entry.name] = entry
    return found


on_reload(datasets.cache_clear)


def dataset(name: str) -> Dataset:
    """Look a dataset up by name, with the known names in the error."""
    known = datasets()
    try:
        return known[name]
    except KeyError:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(sorted(known))}") from None


def tree_files(source: Source) -> list[str]:
    """Relative paths (``train/algebra/1.json``) of every file of a ``tree`` source.

    The list file holds one line per folder, ``<folder>: <n> <n> ...``, naming ``<n>.json``.
    """
    # relative to this module, or absolute (a family package names its own list file)
    text = (Path(__file__).parent / source.file_list).read_text(encoding="utf-8")
    paths: list[str] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        folder, _, numbers = line.partition(":")
        paths.extend(f"{folder.strip()}/{n}.json" for n in numbers.split())
    return paths
