"""A real uvicorn server on 127.0.0.1 (an OS-chosen port) in a thread of the test process, so
a test can look at what the server holds (open envs, library copies, JVMs) while OpenEnv's own
client plays it."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """Run ``app``; yields its base URL (``http://127.0.0.1:PORT``)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error",
                                           ws_ping_interval=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)


def wait_until(check: Any, timeout: float = 30.0) -> bool:
    """Poll ``check()`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def java_children(pid: int | None = None) -> list[int]:
    """Live java processes whose parent is ``pid`` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm", encoding="ascii") as fh:
                name = fh.read().strip()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and name == "java":
            found.append(int(entry))
    return found
