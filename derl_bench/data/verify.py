"""Check a downloaded dataset split by split: counts and checksums. With GSM8K in the data
root::

    from derl_bench.data.sources import dataset
    results = verify_dataset(dataset("gsm8k"))
    [(r.name, r.count, r.ok) for r in results]   # [('train', 7473, True), ('test', 1319, True)]

The commands that read data (``train``, ``evaluate``) compare what they read with the same
checksums first (:func:`check_data`), so a file changed since its download is refused, named,
instead of being trained or scored on::

    check_data(["gsm8k/test.jsonl"])   # DataChecksumError naming the file, if it changed
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from derl_bench.data.read import DataFileError, dataset_of, repair_hint
from derl_bench.data.root import data_root
from derl_bench.data.sources import Check, Dataset, datasets

_CHUNK = 1 << 20


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one :class:`~derl_bench.data.sources.Check`."""

    dataset: str
    name: str
    path: str
    count: int
    expected_count: int
    sha256: str
    expected_sha256: str
    problem: str = ""
    damaged: tuple[str, ...] = ()
    """The files that differ or are missing, where the dataset can name them."""

    @property
    def ok(self) -> bool:
        return not self.problem

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "ok": self.ok}


def sha256_file(path: Path) -> str:
    """The sha256 hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_checksum(folder: Path, files: list[Path]) -> str:
    """sha256 over ``"<path relative to folder>\\t<sha256>\\n"`` for ``files`` in sorted path
    order."""
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(folder).as_posix()):
        digest.update(f"{path.relative_to(folder).as_posix()}\t{sha256_file(path)}\n".encode())
    return digest.hexdigest()


def _json_items(path: Path) -> int:
    """Items of the JSON list in ``path``; -1 when it is not one (the count check then fails)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return -1
    return len(value) if isinstance(value, list) else -1


SHOWN = 5
"""Damaged files a message names before it says how many more there are."""


def name_files(files: list[Path]) -> str:
    """``files`` for a message: the first :data:`SHOWN`, then how many more."""
    shown = ", ".join(str(f) for f in files[:SHOWN])
    return shown + (f" and {len(files) - SHOWN} more" if len(files) > SHOWN else "")


def run_check(name: str, check: Check, root: Path,
              damaged: Callable[[Path, str], list[Path]] | None = None) -> CheckResult:
    """Count and checksum one split; ``problem`` says what is wrong, if anything. ``damaged``
    (the dataset's :attr:`~derl_bench.data.sources.Dataset.damaged`) names the files of a
    split whose checksum differs."""
    path = root / check.path
    count, digest, problem = 0, "", ""
    if check.kind in ("jsonl", "json"):
        if path.is_file():
            if check.kind == "jsonl":
                with open(path, "rb") as fh:
                    count = sum(1 for line in fh if line.strip())
            else:
                count = _json_items(path)
            digest = sha256_file(path)
        else:
            problem = f"missing file {path}"
    elif check.kind in ("tree", "glob"):
        if path.is_dir():
            pattern = check.pattern or "**/*"
            files = [p for p in path.glob(pattern) if p.is_file()]
            count = len(files)
            digest = tree_checksum(path, files)
        else:
            problem = f"missing folder {path}"
    else:
        problem = f"unknown check kind {check.kind!r}"
    if not problem and count != check.count:
        problem = f"{count} items, expected {check.count}"
    bad: list[Path] = []
    if not problem and check.sha256 and digest != check.sha256:
        what = "tree checksum" if check.kind in ("tree", "glob") else "sha256"
        problem = f"{what} {digest}, expected {check.sha256}"
        bad = damaged(root, check.path) if damaged is not None else []
        if bad:
            problem += f"; {len(bad)} of {count} files differ from the release: {name_files(bad)}"
    return CheckResult(name, check.name, check.path, count, check.count, digest, check.sha256,
                       problem, tuple(str(p) for p in bad))


def verify_dataset(
    spec: Dataset, root: Path | None = None, kinds: Iterable[str] | None = None
) -> list[CheckResult]:
    """Run every check of ``spec`` (optionally only those of the given kinds)."""
    root = Path(root) if root is not None else data_root()
    wanted = set(kinds) if kinds is not None else None
    results = [
        run_check(spec.name, c, root, spec.damaged) for c in spec.checks
        if wanted is None or c.kind in wanted
    ]
    for source in spec.sources:
        if source.kind == "file" and source.sha256:
            path = root / source.path
            digest = sha256_file(path) if path.is_file() else ""
            covered = any(c.path == source.path for c in spec.checks)
            if covered or (wanted is not None and "file" not in wanted):
                continue
            problem = "" if digest in source.sha256 else (
                f"missing file {path}" if not digest else f"sha256 {digest} not in {source.sha256}"
            )
            results.append(CheckResult(spec.name, Path(source.path).name, source.path,
                                       int(bool(digest)), 1, digest, source.sha256[0], problem))
    return results


class DataChecksumError(DataFileError):
    """A data file (or folder) a command reads is not the one the data catalogue lists."""


@dataclass(frozen=True)
class Expected:
    """What the data catalogue knows of one path of the data root: the sha256 values accepted
    for it, and for a folder the files its tree checksum covers (``pattern``)."""

    sha256: frozenset[str]
    pattern: str = ""
    tree: bool = False
    dataset: str = ""
    selection: bool = False
    """A checksum over a selection of a folder's files (a card's ``data_checksums``, such as an
    eval set's games), keyed ``<folder>:<selection>``: compared only when the caller computed
    it, as ``evaluate`` does for the record it writes."""


def catalogue() -> dict[str, Expected]:
    """Path in the data root -> its accepted checksums, for every path the catalogue
    (:func:`~derl_bench.data.sources.datasets`) gives a checksum: files and archives (sha256
    of the bytes) and folders (tree checksum), and the selections of files the cards'
    ``data_checksums`` give a tree checksum (an eval set's games). Data checks and the
    leaderboard's validator both read it."""
    from derl_bench.family import family_specs

    known: dict[str, Expected] = {}
    for spec in datasets().values():
        for source in spec.sources:
            # An archive is removed once extracted, so only a record names it; a tree source's
            # checksum is its check's.
            if source.kind != "tree" and source.sha256:
                known[source.path] = Expected(frozenset(source.sha256), dataset=spec.name)
        for check in spec.checks:
            if not check.sha256:
                continue
            tree = check.kind in ("tree", "glob")
            old = known.get(check.path, Expected(frozenset(), check.pattern, tree))
            known[check.path] = Expected(old.sha256 | {check.sha256}, check.pattern, tree,
                                         spec.name)
    for family in family_specs().values():
        for key, digest in family.data_checksums.items():
            old = known.get(str(key), Expected(frozenset(), tree=True,
                                               dataset=str(key).split("/")[0], selection=True))
            known[str(key)] = Expected(old.sha256 | {str(digest)}, old.pattern, old.tree,
                                       old.dataset, old.selection)
    return known


def _walk(folder: Path) -> list[Path]:
    # os.scandir rather than Path.glob("**/*"): the same files (hidden ones included) at a
    # fraction of the cost, which matters on MATH's 7,500-file train tree. A linked folder is
    # not entered, so a link loop cannot recurse forever.
    files: list[Path] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                files.extend(_walk(Path(entry.path)))
            elif entry.is_file():
                files.append(Path(entry.path))
    return files


def _files(path: Path, expected: Expected) -> list[Path]:
    """The files under ``path`` that its checksum covers (just ``path`` for a file)."""
    if not expected.tree:
        return [path]
    if expected.pattern:
        return [p for p in path.glob(expected.pattern) if p.is_file()]
    return _walk(path)


def _signature(files: list[Path]) -> tuple:
    """What changes whenever the bytes of ``files`` may have: sizes, modification times and
    inodes (a copy or a rename over a file changes the inode even when it keeps the time)."""
    return tuple((str(p), (s := p.stat()).st_size, s.st_mtime_ns, s.st_ino) for p in files)


# path -> (signature, digest) of what this process last hashed: a command checks before it
# writes anything and again where training starts, and reward discovery starts many inner runs
# on the same files; one hash per process is enough while nothing on disk changes.
_MATCHED: dict[str, tuple[tuple, str]] = {}


def check_data(paths: Iterable[str] | Mapping[str, str], root: Path | str | None = None) -> None:
    """Refuse data that is not the catalogue's: compare each of ``paths`` (relative to the data
    root, as the catalogue and a record's ``data_checksums`` name them) that the catalogue gives
    a checksum for with that checksum, and raise :class:`DataChecksumError` naming the first
    that differs. Paths the catalogue has no checksum for (generated splits, selections of
    files) are skipped, and so are missing ones (whatever reads them says how to download).

    A mapping gives each path's digest already computed (a record's ``data_checksums``), which
    is not computed again. Otherwise a path that matched once in this process is hashed again
    only when its size, modification time or inode changed.
    """
    base = Path(root).expanduser().resolve() if root is not None else data_root()
    known = catalogue()
    given = paths if isinstance(paths, Mapping) else dict.fromkeys(paths, "")
    for rel, digest in given.items():
        expected = known.get(rel)
        path = base / rel
        if expected is None or (expected.selection and not digest) or (
                not expected.selection and not path.exists()):
            continue
        if not digest:
            files = _files(path, expected)
            signature = _signature(files)
            cached = _MATCHED.get(str(path))
            if cached and cached[0] == signature:
                digest = cached[1]
            else:
                digest = tree_checksum(path, files) if expected.tree else sha256_file(path)
            _MATCHED[str(path)] = (signature, digest)
        if digest not in expected.sha256:
            what = "tree checksum" if expected.tree else "sha256"
            spec = datasets().get(expected.dataset)
            bad = spec.damaged(base, rel) if spec is not None and spec.damaged else []
            which = f"; the files that differ: {name_files(bad)}" if bad else ""
            name = f"the files of {rel} in {base}" if expected.selection else str(path)
            raise DataChecksumError(
                f"{name} differ{'' if expected.selection else 's'} from the data catalogue "
                f"({what} {digest}, expected {' or '.join(sorted(expected.sha256))}): changed "
                f"or damaged after the download, so not used{which}; "
                f"{repair_hint(expected.dataset or dataset_of(path) or rel.split('/')[0])}")
