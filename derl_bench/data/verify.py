"""Check a downloaded dataset split by split: counts and checksums. With GSM8K in the data
root::

    from derl_bench.data.sources import dataset
    results = verify_dataset(dataset("gsm8k"))
    [(r.name, r.count, r.ok) for r in results]   # [('train', 7473, True), ('test', 1319, True)]
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from derl_bench.data.root import data_root
from derl_bench.data.sources import Check, Dataset

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


def run_check(name: str, check: Check, root: Path) -> CheckResult:
    """Count and checksum one split; ``problem`` says what is wrong, if anything."""
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
    if not problem and check.sha256 and digest != check.sha256:
        problem = f"sha256 {digest}, expected {check.sha256}"
    return CheckResult(name, check.name, check.path, count, check.count, digest, check.sha256,
                       problem)


def verify_dataset(
    spec: Dataset, root: Path | None = None, kinds: Iterable[str] | None = None
) -> list[CheckResult]:
    """Run every check of ``spec`` (optionally only those of the given kinds)."""
    root = Path(root) if root is not None else data_root()
    wanted = set(kinds) if kinds is not None else None
    results = [
        run_check(spec.name, c, root) for c in spec.checks if wanted is None or c.kind in wanted
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
