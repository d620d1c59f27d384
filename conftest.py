"""Shared fixtures.

``data_root``: a complete data root, built or checked by the real download command
(``derl-bench data download all``). The first of these that exists is used:

1. the upstream data of the workspace (``DERL_BENCH_SHARED_DATA``, default ``../shared/data``):
   a local HTTP server on 127.0.0.1 serves it as a mirror, and the command builds
   ``.cache/test-data`` from it (so the download path itself is under test);
2. otherwise the data root that the README's setup (``make data`` or ``make demo``) built:
   ``DERL_BENCH_DATA``, default ``.cache/data``; the command only re-verifies it;
3. otherwise the command downloads into that root from ``DATA_MIRROR`` when set, else from the
   official release URLs.

``upstream_data`` is a folder in the upstream layout for tests of the download code: the
workspace's, or else a copy of the data root's plain-file sources (byte for byte what upstream
publishes).

Tests marked ``numerics`` compare float32 results whose sums run in different orders (see
``tests/numerics.py``). ``DERL_BENCH_TEST_THREADS=N`` runs each of them on N torch threads and
``DERL_BENCH_TEST_DETERMINISTIC=1`` with ``torch.use_deterministic_algorithms(True)``; unset,
they run with the machine's defaults. ``make test-numerics`` runs them both ways.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent
SHARED_DATA = Path(os.environ.get("DERL_BENCH_SHARED_DATA", REPO.parent / "shared" / "data"))
TEST_DATA_ROOT = REPO / ".cache" / "test-data"
# Read before any test changes DERL_BENCH_DATA: the root a contributor's setup built.
SETUP_DATA_ROOT = Path(os.environ.get("DERL_BENCH_DATA") or REPO / ".cache" / "data").resolve()

# Tests never write caches to $HOME or reach for a model hub: every model they load is local.
os.environ.setdefault("MPLCONFIGDIR", str(REPO / ".cache" / "matplotlib"))
os.environ.setdefault("HF_HOME", str(REPO / ".cache" / "huggingface"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class MirrorHandler(http.server.SimpleHTTPRequestHandler):
    """A static file server that, like real release hosts, honours ``Range: bytes=N-``."""

    requests_seen: list[tuple[str, str]] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def send_head(self) -> Any:
        self.requests_seen.append((self.path, self.headers.get("Range", "")))
        spec = self.headers.get("Range", "")
        path = Path(self.translate_path(self.path))
        if not spec.startswith("bytes=") or not path.is_file():
            return super().send_head()
        start = int(spec[len("bytes="):].split("-", 1)[0] or 0)
        size = path.stat().st_size
        if start >= size:
            self.send_error(416, "Requested Range Not Satisfiable")
            return None
        fh = open(path, "rb")  # noqa: SIM115 - closed by the base class after copyfile
        fh.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        return fh


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (an OS-chosen port); yields the base URL."""
    with serve_http(functools.partial(MirrorHandler, directory=str(directory))) as url:
        yield url


@contextlib.contextmanager
def serve_http(handler: Any) -> Iterator[str]:
    """Serve ``handler`` (a request handler class) on 127.0.0.1, an OS-chosen port, from a
    daemon thread; yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _has_shared_data() -> bool:
    return (SHARED_DATA / "README.md").is_file()


def _download_all(root: Path, mirror: str | None) -> None:
    from derl_bench.cli import main

    status = main(["data", "download", "all", "--root", str(root), "--quiet",
                   *(["--mirror", mirror] if mirror else [])])
    if status != 0:
        raise RuntimeError(f"building the test data root {root} failed (exit status {status}); "
                           "set DERL_BENCH_DATA to a built data root, or DATA_MIRROR to a mirror")


@pytest.fixture(scope="session")
def data_root() -> Iterator[Path]:
    """A complete data root (see the module docstring for where it comes from)."""
    if _has_shared_data():
        with serve_directory(SHARED_DATA) as url:
            _download_all(TEST_DATA_ROOT, url)
        root = TEST_DATA_ROOT
    else:
        root = SETUP_DATA_ROOT
        _download_all(root, os.environ.get("DATA_MIRROR") or None)
    os.environ["DERL_BENCH_DATA"] = str(root)
    yield root


@pytest.fixture(scope="session")
def upstream_data(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A folder in the upstream layout that :func:`mirror_url` serves."""
    if _has_shared_data():
        return SHARED_DATA
    from derl_bench.data.sources import datasets

    root = request.getfixturevalue("data_root")
    mirror = tmp_path_factory.mktemp("upstream")
    for spec in datasets().values():
        for source in spec.sources:
            if source.kind == "file" and (root / spec.name / ".complete").is_file():
                (mirror / source.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / source.path, mirror / source.path)
    if not (mirror / "gsm8k" / "test.jsonl").is_file():
        raise RuntimeError(f"the data root {root} holds no gsm8k/test.jsonl to serve")
    return mirror


@pytest.fixture(scope="session")
def mirror_url(upstream_data: Path) -> Iterator[str]:
    """Base URL of a local HTTP mirror of the upstream data."""
    with serve_directory(upstream_data) as url:
        yield url


@pytest.fixture(autouse=True)
def numerics_settings(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``numerics`` test under the thread count and determinism the environment asks for."""
    threads = os.environ.get("DERL_BENCH_TEST_THREADS", "")
    deterministic = os.environ.get("DERL_BENCH_TEST_DETERMINISTIC", "") not in ("", "0")
    if request.node.get_closest_marker("numerics") is None or not (threads or deterministic):
        yield
        return
    import torch  # here, not at the top: most test sessions never need it

    saved = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    if threads:
        torch.set_num_threads(int(threads))
    torch.use_deterministic_algorithms(deterministic or saved[1])
    try:
        yield
    finally:
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])
