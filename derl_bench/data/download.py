"""Download datasets into the data root: atomic, checksummed, resumable.

    derl-bench data download gsm8k                       # from the official releases
    derl-bench data download all --mirror http://host/   # from a mirror of the same layout

A dataset is assembled in a staging folder beside it (``<root>/.<name>.download``): every file
is fetched to ``<dest>.part`` (continued with an HTTP Range request when a previous attempt left
one), archives and trees are unpacked there, and every checksum is checked there. Only a staged
tree that passes every check replaces the installed one, and its ``.complete`` marker is written
last, so a wrong mirror, a cut connection or a kill never damages data that was good, and an
interrupted download never looks finished. A second download of a dataset waits for the first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from derl_bench.data.root import COMPLETE_MARKER, data_root, is_complete
from derl_bench.data.sources import Dataset, Source, dataset, tree_files
from derl_bench.data.verify import CheckResult, sha256_file, tree_checksum, verify_dataset
from derl_bench.files import write_json_atomic

_CHUNK = 1 << 20
_USER_AGENT = "derl-bench-data/1"


class DownloadError(RuntimeError):
    """A download failed: unreachable URL, HTTP error, checksum mismatch or unsafe archive."""


def tree_sha256(folder: Path, files: Iterable[Path] | None = None) -> str:
    """Tree checksum of ``folder``: see :func:`derl_bench.data.verify.tree_checksum`."""
    paths = list(files) if files is not None else [p for p in folder.rglob("*") if p.is_file()]
    return tree_checksum(folder, paths)


def source_url(source: Source, mirror: str | None) -> str:
    """The URL to fetch ``source`` from: the official one, or the same path on a mirror."""
    if mirror:
        return f"{mirror.rstrip('/')}/{source.path}"
    return source.url


def fetch(url: str, dest: Path, *, retries: int = 3, timeout: float = 60.0) -> Path:
    """Fetch ``url`` to ``dest`` through ``dest.part``, resuming a partial file if present."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    for attempt in range(1, retries + 1):
        have = part.stat().st_size if part.exists() else 0
        request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
        if have:
            request.add_header("Range", f"bytes={have}-")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                # A server that ignores Range answers 200 with the whole body: start over.
                mode = "ab" if have and response.status == 206 else "wb"
                with open(part, mode) as fh:
                    shutil.copyfileobj(response, fh, _CHUNK)
            os.replace(part, dest)
            return dest
        except urllib.error.HTTPError as err:
            if err.code == 416 and have:  # the partial file is already complete
                os.replace(part, dest)
                return dest
            if err.code < 500 or attempt == retries:
                raise DownloadError(f"GET {url} failed: HTTP {err.code} {err.reason}") from err
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
            if attempt == retries:
                raise DownloadError(f"GET {url} failed: {err}") from err
        time.sleep(0.5 * attempt)
    raise DownloadError(f"GET {url} failed")  # pragma: no cover - loop always returns or raises


def _check_sha(path: Path, source: Source) -> None:
    if not source.sha256:
        return
    got = sha256_file(path)
    if got not in source.sha256:
        path.unlink(missing_ok=True)
        raise DownloadError(
            f"checksum mismatch for {source.path}: got sha256 {got}, expected "
            f"{' or '.join(source.sha256)}; the file was removed, run the download again"
        )


def _safe_members(names: Iterable[str], where: str) -> None:
    for name in names:
        parts = Path(name).parts
        if name.startswith(("/", "\\")) or ".." in parts:
            raise DownloadError(f"refusing unsafe path {name!r} in {where}")


def _fetch_file(source: Source, root: Path, mirror: str | None, force: bool) -> None:
    dest = root / source.path
    if dest.exists() and not force and (not source.sha256 or sha256_file(dest) in source.sha256):
        return
    fetch(source_url(source, mirror), dest)
    _check_sha(dest, source)


def _fetch_zip(source: Source, root: Path, mirror: str | None) -> None:
    archive = root / source.path
    if not archive.exists() or (source.sha256 and sha256_file(archive) not in source.sha256):
        fetch(source_url(source, mirror), archive)
    _check_sha(archive, source)
    target = root / source.extract_to
    staging = target / ".extracting"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with zipfile.ZipFile(archive) as zf:
        _safe_members(zf.namelist(), source.path)
        zf.extractall(staging)
    for entry in staging.iterdir():
        final = target / entry.name
        if final.exists():
            shutil.rmtree(final) if final.is_dir() else final.unlink()
        os.replace(entry, final)
    staging.rmdir()
    archive.unlink()


def _fetch_tree(
    source: Source, root: Path, mirror: str | None, progress: Callable[[int], None]
) -> None:
    target = root / source.path
    staging = target.with_name(target.name + ".staging")
    if mirror:
        files = tree_files(source)
        todo = [rel for rel in files if not (staging / rel).exists()]
        progress(len(files) - len(todo))

        def one(rel: str) -> None:
            fetch(f"{mirror.rstrip('/')}/{source.path}/{rel}", staging / rel)
            progress(1)

        with ThreadPoolExecutor(max_workers=16) as pool:
            for _ in pool.map(one, todo):
                pass
    else:
        tarball = target.with_name(target.name + ".tar")
        fetch(source.url, tarball)
        unpack = target.with_name(target.name + ".unpacking")
        shutil.rmtree(unpack, ignore_errors=True)
        with tarfile.open(tarball) as tf:
            _safe_members(tf.getnames(), source.url)
            tf.extractall(unpack, filter="data")
        inner = unpack / target.name
        shutil.rmtree(staging, ignore_errors=True)
        os.replace(inner if inner.is_dir() else unpack, staging)
        shutil.rmtree(unpack, ignore_errors=True)
        tarball.unlink()
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)


def _report_wait(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def dataset_lock(
    name: str, root: Path, on_wait: Callable[[str], None] = _report_wait
) -> Iterator[None]:
    """Hold the download lock of dataset ``name`` in ``root`` (``<root>/.<name>.lock``).

    A second holder, in this process or another, calls ``on_wait`` with a message and then
    waits: two downloads into one staging folder would corrupt each other, and the one that
    waits usually finds the dataset complete once it gets the lock.
    """
    root.mkdir(parents=True, exist_ok=True)
    path = root / f".{name}.lock"
    with open(path, "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait(f"another download of {name!r} into {root} is in progress (lock {path}); "
                    "waiting for it to finish")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _seed_staging(live: Path, staged: Path) -> None:
    """Start the staging tree from what the live tree already holds, without touching it.

    Finished files are hard-linked (copied where links are not possible), so a good file is
    not fetched again; every write to the staging tree goes through a new file and a rename,
    so a link never carries a change back. Partial ``.part`` files move over to be resumed.
    """
    for path in sorted(live.rglob("*")):
        rel = path.relative_to(live)
        target = staged / rel
        if path.is_symlink() or not path.is_file() or rel.as_posix() == COMPLETE_MARKER:
            continue
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.name.endswith(".part"):
            os.replace(path, target)
            continue
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def _swap_in(staged: Path, live: Path) -> None:
    """Replace ``live`` with the verified ``staged`` tree; the old tree goes only after."""
    old = live.with_name(f".{live.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        os.replace(live, old)
    os.replace(staged, live)
    shutil.rmtree(old, ignore_errors=True)


def download(
    name: str,
    root: Path | None = None,
    *,
    mirror: str | None = None,
    force: bool = False,
    show_progress: bool = True,
    on_wait: Callable[[str], None] = _report_wait,
) -> list[CheckResult]:
    """Download dataset ``name`` into the data root and verify it.

    Everything is fetched into a staging folder beside the dataset, ``.<name>.download``, and
    verified there; only a tree whose every check passes replaces the installed one, and its
    ``.complete`` marker is the last file written. Any failure leaves the installed dataset as
    it was. While another download of the same dataset runs, this one reports it through
    ``on_wait`` and waits for it. Returns the verification results; raises
    :class:`DownloadError` on any failure.
    """
    spec: Dataset = dataset(name)
    root = Path(root) if root is not None else data_root()
    if root.exists() and not root.is_dir():
        raise DownloadError(f"data root {root} is a file, not a folder")
    live = root / name
    if is_complete(name, root) and not force:
        results = verify_dataset(spec, root)
        if all(r.ok for r in results):
            return results
    with dataset_lock(name, root, on_wait):
        # A download that held the lock may have just installed the dataset.
        if is_complete(name, root) and not force:
            results = verify_dataset(spec, root)
            if all(r.ok for r in results):
                return results
        staging_root = root / f".{name}.download"
        staged = staging_root / name
        staged.mkdir(parents=True, exist_ok=True)
        if live.is_dir() and not force:
            _seed_staging(live, staged)
        _fetch_sources(spec, staging_root, mirror, force, show_progress)
        results = verify_dataset(spec, staging_root)
        bad = [r for r in results if not r.ok]
        if bad:
            # What was fetched is wrong (not merely unfinished): keeping it would make the next
            # attempt resume from it.
            shutil.rmtree(staging_root, ignore_errors=True)
            raise DownloadError(
                f"{name}: verification failed after download, the installed data was left "
                "as it was: " + "; ".join(f"{r.name}: {r.problem}" for r in bad)
            )
        record = {
            "dataset": name,
            "mirror": mirror,
            "sources": [{"path": s.path, "url": source_url(s, mirror)} for s in spec.sources],
            "checks": [r.as_dict() for r in results],
            "completed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_json_atomic(staged / COMPLETE_MARKER, record)
        _swap_in(staged, live)
        shutil.rmtree(staging_root, ignore_errors=True)
    return results


def _fetch_sources(
    spec: Dataset, root: Path, mirror: str | None, force: bool, show_progress: bool
) -> None:
    """Fetch every source of ``spec`` into ``root`` (the staging root)."""
    from derl_bench.progress import progress_bar

    for source in spec.sources:
        total = len(tree_files(source)) if source.kind == "tree" and mirror else None
        with progress_bar(total=total, desc=f"{spec.name}: {source.path}", unit="file",
                          disable=not show_progress, leave=False) as bar:
            if source.kind == "file":
                _fetch_file(source, root, mirror, force)
            elif source.kind == "zip":
                if force or not _zip_already_extracted(spec, root):
                    _fetch_zip(source, root, mirror)
            elif source.kind == "tree":
                if force or not (root / source.path).is_dir():
                    _fetch_tree(source, root, mirror, bar.update)
            else:
                raise DownloadError(f"unknown source kind {source.kind!r}")
            bar.update(0)


def _zip_already_extracted(spec: Dataset, root: Path) -> bool:
    return all(r.ok for r in verify_dataset(spec, root, kinds=("glob",))) and any(
        c.kind == "glob" for c in spec.checks
    )
