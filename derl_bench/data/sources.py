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


_GSM8K_BASE = "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data"
_DERL_RAW = (
    # Pinned to a commit: the file is the paper's data, and a moving branch could change it.
    "https://raw.githubusercontent.com/sitaocheng/DERL/e9f0ff990841cb861457d9e607130c091864ccc5"
)
_RLVMR_RAW = (
    "https://raw.githubusercontent.com/Tencent/DigitalHuman/main/RLVMR/"
    "agent_system/environments/env_package/sciworld/variations_idx"
)

BUILTIN: dict[str, Dataset] = {
    "gsm8k": Dataset(
        name="gsm8k",
        description="GSM8K grade-school math word problems (openai/grade-school-math)",
        licence="MIT",
        sources=(
            Source(
                "gsm8k/train.jsonl",
                f"{_GSM8K_BASE}/train.jsonl",
                sha256=("17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",),
            ),
            Source(
                "gsm8k/test.jsonl",
                f"{_GSM8K_BASE}/test.jsonl",
                sha256=("3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",),
            ),
        ),
        checks=(
            Check("train", "jsonl", "gsm8k/train.jsonl", 7473,
                  "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
            Check("test", "jsonl", "gsm8k/test.jsonl", 1319,
                  "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
        ),
    ),
    "math": Dataset(
        name="math",
        description="MATH (Hendrycks et al. 2021) and its MATH500 test subset (PRM800K split)",
        licence="MIT",
        sources=(
            Source(
                "math/MATH",
                "https://people.eecs.berkeley.edu/~hendrycks/MATH.tar",
                kind="tree",
                file_list="MATH_files.txt",
                size_hint="12,500 files",
            ),
            Source(
                "math/math500_test.jsonl",
                "https://raw.githubusercontent.com/openai/prm800k/main/prm800k/math_splits/test.jsonl",
                sha256=("35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",),
            ),
        ),
        checks=(
            Check("train", "tree", "math/MATH/train", 7500,
                  "c3a1fc2ec654590d6db4d3729b3c9f69e0612a471b78ece3bbf18db87120d54f"),
            Check("test", "tree", "math/MATH/test", 5000,
                  "17be1c2d95867717f420a8755c59a0c5b163c33e329eb7e57f24c92903b65ed6"),
            Check("math500", "jsonl", "math/math500_test.jsonl", 500,
                  "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"),
        ),
    ),
    "scienceworld": Dataset(
        name="scienceworld",
        description=(
            "The RLVMR/DERL L0/L1/L2 split index of ScienceWorld; the simulator itself ships "
            "in the scienceworld wheel and needs no download"
        ),
        licence="MIT",
        sources=tuple(
            Source(f"scienceworld/L{n}_idx.json", f"{_RLVMR_RAW}/L{n}_idx.json", sha256=(digest,))
            for n, digest in enumerate(
                (
                    "151b8942dd58cba74d78115ea7a1cd5eb998cf9c112e51232cb1ef1c87630316",
                    "93b80b653eb67b0802f18c5edfcf11ada2e689eacf886051ad79f382c59b4b3e",
                    "6f96dd084dbc6d0de079d553d27473265e3f6851f279f91f64a5f23c1b277124",
                )
            )
        ),
    ),
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
