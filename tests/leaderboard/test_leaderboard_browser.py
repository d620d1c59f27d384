"""The leaderboard page in a real browser: headless Chromium, driven over the DevTools protocol.

Chromium is started with ``--remote-debugging-pipe`` (commands on fd 3, replies on fd 4, each
message a JSON object ending in a NUL byte), so the test needs nothing beyond the standard
library and Debian's ``chromium`` package. It loads the rendered ``index.html`` from disk,
takes screenshots, reads the tables' rows from the DOM, switches views, clicks headers and
filters, and checks what is shown.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from derl_bench.evaluation.record import read_run_here
from derl_bench.leaderboard import submission_files, validate_file
from derl_bench.leaderboard.board import build_boards
from derl_bench.leaderboard.page import METRIC_NAMES, render_html, view_id

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-pipe", "--window-size=1280,900")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(apt-get install -y chromium)")


class DevTools:
    """A minimal DevTools-protocol client over Chromium's debugging pipe."""

    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        self.timeout = timeout
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds() -> None:  # the browser reads fd 3 and writes fd 4
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        assert CHROMIUM is not None
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire_fds, pass_fds=(3, 4), env={
                **os.environ, "HOME": str(profile)})
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.session = ""

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: bool = True) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError("no reply from chromium")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the debugging pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def attach_to_page(self) -> None:
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


ROWS_JS = """Array.from(document.querySelectorAll('#results tbody tr')).map(
  tr => Array.from(tr.cells).map(td => td.textContent))"""
HEADERS_JS = "Array.from(document.querySelectorAll('#results th')).map(th => th.textContent)"


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def browser(tmp_path):
    tools = DevTools(tmp_path / "profile")
    try:
        tools.attach_to_page()
        yield tools
    finally:
        tools.close()


def _boards() -> list:
    records = []
    for path in submission_files(REPO / "leaderboards"):
        report = validate_file(path)
        assert report.ok, report.problems
        records.append((path.relative_to(REPO / "leaderboards"), report.record))
    return build_boards(records, read_run_here(REPO / "leaderboards"))


def _open(browser: DevTools, url: str) -> None:
    browser.send("Page.navigate", {"url": url})
    deadline = time.monotonic() + 30
    while browser.evaluate("document.readyState") != "complete":
        assert time.monotonic() < deadline, "the page did not finish loading"
        time.sleep(0.1)


def _screenshot(browser: DevTools, path: Path) -> bytes:
    shot = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"})["data"])
    assert _png_size(shot) == (1280, 900)
    path.write_bytes(shot)
    assert len(shot) > 10_000  # a blank page compresses to a few hundred bytes
    return shot


def test_leaderboard_page_in_headless_chromium(browser, tmp_path):
    boards = _boards()
    page = tmp_path / "index.html"
    page.write_text(render_html(boards), encoding="utf-8")
    expected = [(b.title, level, r.method, r.model, f"{100 * c.mean:.1f}", metric)
                for b in boards for r in b.rows for metric in b.metrics
                for level, c in r.metric_cells(metric).items()]

    browser.send("Page.enable")
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    _open(browser, page.as_uri())
    _screenshot(browser, tmp_path / "leaderboard.png")

    headers = browser.evaluate(HEADERS_JS)
    assert headers[:6] == ["benchmark", "level", "method", "model", "provenance", "success %"]
    rows = browser.evaluate(ROWS_JS)
    metric_col = headers.index("metric")
    # a board with rows of another policy interface adds a column naming it
    assert headers[metric_col + 1:] == (["policy interface"] if any(
        len(b.interfaces()) > 1 for b in boards) else [])
    assert sorted((r[0], r[1], r[2], r[3], r[5], r[metric_col]) for r in rows) == sorted(expected)
    assert any(r[0] == "ScienceWorld" and r[metric_col] == "published" for r in rows)

    success = headers.index("success %")
    browser.evaluate(f"document.querySelectorAll('#results th')[{success}].click()")
    ascending = [float(r[success]) for r in browser.evaluate(ROWS_JS)]
    assert ascending == sorted(ascending) and ascending[0] < ascending[-1]
    browser.evaluate(f"document.querySelectorAll('#results th')[{success}].click()")
    descending = [float(r[success]) for r in browser.evaluate(ROWS_JS)]
    assert descending == sorted(ascending, reverse=True)
    assert browser.evaluate(
        f"document.querySelectorAll('#results th')[{success}].getAttribute('aria-sort')"
    ) == "descending"

    bench = headers.index("benchmark")
    browser.evaluate(f"document.querySelectorAll('#results th')[{bench}].click()")
    names = [r[bench] for r in browser.evaluate(ROWS_JS)]
    assert names == sorted(names, key=str.casefold)
    assert len(set(names)) == len(boards)


VISIBLE_JS = """Array.from(document.querySelectorAll('section.view')).filter(
  s => !s.hidden).map(s => s.id)"""
VIEW_ROWS_JS = """Array.from(document.querySelectorAll('section.view:not([hidden]) tbody tr'))
  .filter(
  tr => !tr.hidden).map(tr => ({size: tr.dataset.size, group: tr.dataset.group,
  provenance: tr.dataset.provenance, cells: Array.from(tr.cells).map(td => td.textContent)}))"""
VIEW_HEAD_JS = """({title: document.querySelector('section.view:not([hidden]) h2').textContent,
  headers: Array.from(document.querySelectorAll('section.view:not([hidden]) table')[0]
  .querySelectorAll('th')).map(th => th.textContent), shown: document.querySelector(
  'section.view:not([hidden]) p.shown').textContent})"""
# each table of the visible view (the papers' interface, then any other) as its shown rows' cells
VIEW_TABLES_JS = """Array.from(document.querySelectorAll('section.view:not([hidden]) table')).map(
  t => Array.from(t.querySelectorAll('tbody tr')).filter(tr => !tr.hidden).map(
  tr => Array.from(tr.cells).map(td => td.textContent)))"""


def _click(browser: DevTools, selector: str) -> None:
    assert browser.evaluate(f"(function () {{ var e = document.querySelector({selector!r}); "
                            "if (!e) return false; e.click(); return true; })()")


def test_one_view_per_benchmark_level_and_metric_with_filters(browser, tmp_path):
    boards = _boards()
    page = tmp_path / "index.html"
    page.write_text(render_html(boards), encoding="utf-8")
    browser.send("Page.enable")
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    _open(browser, page.as_uri())
    first = boards[0]
    assert browser.evaluate(VISIBLE_JS) == [f"view-{view_id(first, first.levels[0], 'strict')}"]

    # every view: its button shows it alone, its header names the metric, its rows are the
    # rows with a number for that level and metric, best first, each with its provenance
    for board in boards:
        for _, level, metric in board.columns():
            name = view_id(board, level, metric)
            _click(browser, f'nav#views button[data-view="{name}"]')
            assert browser.evaluate(VISIBLE_JS) == [f"view-{name}"]
            head = browser.evaluate(VIEW_HEAD_JS)
            assert head["title"] == f"{board.title} {level} — {METRIC_NAMES[metric]}"
            assert f"{METRIC_NAMES[metric]} %" in head["headers"]
            rows = browser.evaluate(VIEW_ROWS_JS)
            want = sorted((r.method, r.model) for r in board.rows
                          if level in r.metric_cells(metric))
            assert sorted((r["cells"][1], r["cells"][2]) for r in rows) == want
            assert head["shown"] == f"{len(want)} of {len(want)} rows shown"
            # each interface's table is ranked on its own, best first
            column = head["headers"].index(f"{METRIC_NAMES[metric]} %")
            tables = browser.evaluate(VIEW_TABLES_JS)
            assert sum(len(t) for t in tables) == len(rows)
            for table, interface in zip(tables, [i for i in board.interfaces() if any(
                    level in r.metric_cells(metric) for r in board.rows_of(i))], strict=True):
                assert sorted((r[1], r[2]) for r in table) == sorted(
                    (r.method, r.model) for r in board.rows_of(interface)
                    if level in r.metric_cells(metric))
                rates = [float(r[column]) for r in table]
                assert rates == sorted(rates, reverse=True)
            provenance = head["headers"].index("provenance")
            assert {r["cells"][provenance] for r in rows} <= {"run here", "submitted",
                                                              "reported"}
            assert all(r["cells"][provenance] == r["provenance"] for r in rows)

    # ALFWorld L2: the paper rows are reported, the scripted baselines run here, and the
    # setup columns say what each number rests on
    _click(browser, 'nav#views button[data-view="alfworld-L2-strict"]')
    rows = browser.evaluate(VIEW_ROWS_JS)
    headers = browser.evaluate(VIEW_HEAD_JS)["headers"]
    by_name = {(r["cells"][1], r["cells"][2]): r for r in rows}
    oracle, rlvmr = by_name[("oracle", "none")], by_name[("RLVMR", "Qwen2.5-7B-Instruct")]
    assert oracle["provenance"] == "run here" and rlvmr["provenance"] == "reported"
    assert rlvmr["cells"][headers.index("strict success %")] == "83.6"
    assert rlvmr["cells"][headers.index("step cap")] == "30"
    assert rlvmr["cells"][headers.index("episodes")] == "not stated"
    assert oracle["cells"][headers.index("episodes")] == "38"
    reason = browser.evaluate(
        "document.querySelector('section.view:not([hidden]) td.unknown').title")
    assert "does not" in reason
    _screenshot(browser, tmp_path / "alfworld-L2.png")

    # filters: hide the 7B models and the prompting group, then bring them back
    _click(browser, '#filters input[name="size"][value="7B"]')
    _click(browser, '#filters input[name="group"][value="prompting"]')
    filtered = browser.evaluate(VIEW_ROWS_JS)
    assert filtered and all(r["size"] != "7B" and r["group"] != "prompting" for r in filtered)
    hidden = sum(r["size"] == "7B" or r["group"] == "prompting" for r in rows)
    assert hidden > 0 and len(filtered) == len(rows) - hidden
    assert browser.evaluate(VIEW_HEAD_JS)["shown"].startswith(f"{len(filtered)} of {len(rows)}")
    _screenshot(browser, tmp_path / "alfworld-L2-filtered.png")
    _click(browser, '#filters input[name="size"][value="7B"]')
    _click(browser, '#filters input[name="group"][value="prompting"]')
    assert len(browser.evaluate(VIEW_ROWS_JS)) == len(rows)
    _click(browser, '#filters input[name="provenance"][value="reported"]')
    assert {r["provenance"] for r in browser.evaluate(VIEW_ROWS_JS)} == {"run here"}

    # an address names a view: ScienceWorld's published metric opens on its own
    _open(browser, page.as_uri() + "#scienceworld-L2-published")
    assert browser.evaluate(VISIBLE_JS) == ["view-scienceworld-L2-published"]
    assert browser.evaluate("window.scrollY") == 0
    assert "published metric %" in browser.evaluate(VIEW_HEAD_JS)["headers"]
