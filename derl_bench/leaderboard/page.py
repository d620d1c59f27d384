"""The leaderboards as one static HTML page, ``leaderboards/index.html``: a view per benchmark,
level and metric, filters, and a view of every record. Its style and script are the package's
``page.css`` and ``page.js``, inlined so the page needs no other file."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from derl_bench.evaluation.schema import DEFAULT_POLICY_INTERFACE, POLICY_INTERFACES
from derl_bench.leaderboard.board import (
    OTHER_GROUP,
    PROVENANCES,
    SCRIPTED_GROUP,
    Board,
    Cell,
    Row,
    method_groups,
)

PAGE_TITLE = "derl-bench leaderboards"
"""The page's title, which also tells a rendered page from any other ``index.html``."""

METRIC_NAMES = {"strict": "strict success", "published": "published metric"}
PUBLISHED_RULE = ("RLVMR's rule: the episode ended, including by upstream's 100-tick limit, "
                  "with a score above 0. A policy that scores a few points and then waits "
                  "(stall) meets it without completing any task; compare methods on strict "
                  "success")


def _asset(name: str) -> str:
    """A file of this package (the page's ``page.css`` or ``page.js``)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


_ALL_COLUMNS = (("benchmark", "text"), ("level", "text"), ("method", "text"), ("model", "text"),
                ("provenance", "text"), ("success %", "num"), ("SE %", "num"), ("n", "num"),
                ("size", "text"), ("method group", "text"), ("step cap", "num"),
                ("checkpoint", "text"), ("date", "text"), ("metric", "text"))


def view_id(board: Board, level: str, metric: str) -> str:
    """The page's anchor for one view, e.g. ``scienceworld-L1-published``."""
    return f"{board.benchmark}-{level}-{metric}"


def _td(text: str, key: str, kind: str = "text", title: str | None = None,
        cls: str = "", inner: str | None = None) -> str:
    esc = html.escape
    classes = " ".join(c for c in ("num" if kind == "num" else "", cls) if c)
    attrs = f' class="{classes}"' if classes else ""
    if title:
        attrs += f' title="{esc(title)}"'
    return f'<td{attrs} data-sort="{esc(key)}">{inner if inner is not None else esc(text)}</td>'


def _setup_td(setup: Mapping[str, Any], name: str, kind: str = "text") -> str:
    value = setup.get(name)
    if value is None:
        reason = setup.get("unknown", {}).get(name, "not given")
        return _td("not stated", "", kind, title=reason, cls="unknown")
    text = str(value)
    return _td(text, text, kind, title=text if len(text) > 30 else None,
               cls="long" if kind == "text" else "")


def _rate_tds(cell: Cell) -> list[str]:
    """Success %, SE % and n."""
    return [_td(f"{100 * cell.mean:.1f}", repr(cell.mean), "num"),
            _td("–" if cell.se is None else f"{100 * cell.se:.1f}",
                "" if cell.se is None else repr(cell.se), "num"),
            _td("–" if cell.n is None else str(cell.n), "" if cell.n is None else str(cell.n),
                "num")]


def _tr(row: Row, tds: Sequence[str]) -> str:
    """A table row carrying what the filters select on."""
    esc = html.escape
    data = (f' data-size="{esc(row.size)}" data-group="{esc(row.group)}"'
            f' data-provenance="{esc(row.provenance)}"')
    cls = ' class="reported"' if row.kind != "run" else ""
    return f"<tr{cls}{data}>{''.join(tds)}</tr>"


def _badge(origin: str) -> str:
    return f'<span class="badge {origin.replace(" ", "-")}">{html.escape(origin)}</span>'


def _source_td(row: Row, cell: Cell) -> str:
    esc = html.escape
    record = f'<a href="{esc(cell.path)}">record</a>'
    if row.kind == "run":
        return _td("record", cell.path, inner=record)
    label = f"{row.table}" if row.table else "source"
    paper = f'<a href="{esc(row.url)}" title="{esc(row.citation)}">{esc(label)}</a>'
    return _td(row.citation, row.citation, inner=f"{paper} · {record}")


def _view(board: Board, level: str, metric: str) -> str:
    esc = html.escape
    name = METRIC_NAMES[metric]
    rule = PUBLISHED_RULE if metric == "published" else (
        f"success: {board.success_rule}")
    columns = (("#", "num"), ("method", "text"), ("model", "text"),
               ("method group", "text"), ("provenance", "text"), (f"{name} %", "num"),
               ("SE %", "num"), ("n", "num"), ("step cap", "num"), ("episodes", "text"),
               ("repeats", "num"), ("checkpoint", "text"), ("source", "text"))
    tables = []
    for interface in board.interfaces():
        body = _view_rows(board.rows_of(interface), level, metric)
        if interface == DEFAULT_POLICY_INTERFACE:
            tables.append(_table('class="sortable board"', columns, body))
        elif body:
            tables.append(_interface_heading(interface)
                          + _table('class="sortable board interface"', columns, body))
    return _section(
        f'id="view-{esc(view_id(board, level, metric))}" data-benchmark="{esc(board.benchmark)}" '
        f'data-level="{esc(level)}" data-metric="{esc(metric)}"',
        f"{board.title} {level} — {name}",
        f"<code>{esc(board.env_id)}</code>, level {esc(level)}. Metric: <b>{esc(name)}</b>; "
        f"{esc(rule)}. Hover over a cell that says <i>not stated</i> to read why; over an "
        "episode count to read how the episodes were drawn.",
        "\n".join(tables))


def _view_rows(rows: Sequence[Row], level: str, metric: str) -> list[str]:
    """The ranked rows of one view's table."""
    ranked = sorted(((row, row.metric_cells(metric)[level]) for row in rows
                     if level in row.metric_cells(metric)),
                    key=lambda rc: (-rc[1].mean, rc[0].method, rc[0].model))
    body = []
    for rank, (row, cell) in enumerate(ranked, 1):
        setup = cell.setup
        episodes = setup.get("episodes")
        drawn = setup.get("drawn")
        if episodes is None:
            episodes_td = _setup_td(setup, "episodes")
        else:
            episodes_td = _td(str(episodes), str(episodes), "text", title=drawn)
        tds = [
            _td(str(rank), str(rank), "num"),
            _td(row.method, row.method), _td(row.model, row.model),
            _td(row.group, row.group),
            _td(row.provenance, row.provenance, inner=_badge(row.provenance)),
            *_rate_tds(cell),
            _setup_td(setup, "step_cap", "num"), episodes_td,
            _setup_td(setup, "repeats", "num"), _setup_td(setup, "checkpoint"),
            _source_td(row, cell),
        ]
        body.append(_tr(row, tds))
    return body


def _interface_heading(interface: str) -> str:
    """Title and note of a table of rows of another policy interface than the papers'."""
    esc = html.escape
    what = POLICY_INTERFACES[interface]
    return (f"<h3>Policy interface <code>{esc(interface)}</code></h3>\n"
            f'<p class="metric">{esc(what[0].upper() + what[1:])}. Not ranked with the table '
            f"above (policy interface <code>{esc(DEFAULT_POLICY_INTERFACE)}</code>: "
            f"{esc(POLICY_INTERFACES[DEFAULT_POLICY_INTERFACE])}).</p>\n")


def _table(table_attrs: str, columns: Sequence[tuple[str, str]], body: Sequence[str]) -> str:
    """A sortable table."""
    esc = html.escape
    head = "".join(f'<th data-type="{kind}" scope="col">{esc(label)}</th>'
                   for label, kind in columns)
    return (f"<table {table_attrs}><thead><tr>{head}</tr></thead>\n<tbody>\n"
            + "\n".join(body) + "\n</tbody></table>")


def _section(attrs: str, title: str, note: str, tables: str) -> str:
    """One view: its title, what it shows, its tables and the filters' row count."""
    esc = html.escape
    return (f'<section class="view" {attrs}>\n<h2>{esc(title)}</h2>\n<p class="metric">{note}</p>\n'
            f'{tables}\n<p class="shown"></p>\n</section>')


def _all_records(boards: Sequence[Board]) -> str:
    interfaces = any(i != DEFAULT_POLICY_INTERFACE for b in boards for i in b.interfaces())
    body = []
    for board in boards:
        for row in board.rows:
            for _, level, metric in board.columns():
                cell = row.metric_cells(metric).get(level)
                if cell is None:
                    continue
                tds = [
                    _td(board.title, board.title), _td(level, level),
                    _td(row.method, row.method), _td(row.model, row.model),
                    _td(row.provenance, row.provenance), *_rate_tds(cell),
                    _td(row.size, row.size), _td(row.group, row.group),
                    _setup_td(cell.setup, "step_cap", "num"),
                    _setup_td(cell.setup, "checkpoint"),
                    _td(cell.date, cell.date), _td(metric, metric),
                ]
                if interfaces:
                    tds.append(_td(row.interface, row.interface))
                body.append(_tr(row, tds))
    columns = _ALL_COLUMNS + ((("policy interface", "text"),) if interfaces else ())
    note = ("Every level and metric in one table; the <i>metric</i> column says what each rate "
            "counts" + ("; the <i>policy interface</i> column what the policy read and how it "
                        "acted (compare rows of one interface only)." if interfaces else "."))
    return _section('id="view-all"', "All records", note,
                    _table('class="sortable" id="results"', columns, body))


def _filters(boards: Sequence[Board]) -> str:
    esc = html.escape
    rows = [row for board in boards for row in board.rows]
    sizes = sorted({r.size for r in rows}, key=_size_order)
    order = [g for g, _ in method_groups()] + [SCRIPTED_GROUP, OTHER_GROUP]
    method_groups_found = [g for g in order if any(r.group == g for r in rows)]
    groups = (("size", "model size", sizes), ("group", "method group", method_groups_found),
              ("provenance", "provenance", [p for p in PROVENANCES
                                            if any(r.provenance == p for r in rows)]))
    parts = []
    for name, legend, values in groups:
        boxes = "".join(f'<label><input type="checkbox" name="{name}" value="{esc(v)}" checked> '
                        f"{esc(v)}</label>" for v in values)
        parts.append(f"<fieldset><legend>{esc(legend)}</legend>{boxes}</fieldset>")
    return f'<div id="filters">{"".join(parts)}</div>'


def _size_order(size: str) -> tuple[int, float]:
    if size.endswith("B") and size[:-1].replace(".", "", 1).isdigit():
        return (1, float(size[:-1]))
    return ({"tiny": 0, "not stated": 2, "no model": 3}.get(size, 2), 0.0)


def render_html(boards: Sequence[Board]) -> str:
    """A self-contained page (no external scripts, styles or fonts): one view per benchmark,
    level and metric, each row's provenance, and filters by model size, method group and
    provenance; a last view lists every record."""
    esc = html.escape
    nav = []
    sections = []
    for board in boards:
        buttons = "".join(
            f'<button type="button" data-view="{esc(view_id(board, level, metric))}" '
            f'aria-pressed="false">{esc(label)}</button>'
            for label, level, metric in board.columns())
        nav.append(f'<span class="group"><b>{esc(board.title)}</b>{buttons}</span>')
        sections += [_view(board, level, metric) for _, level, metric in board.columns()]
    nav.append('<span class="group"><button type="button" data-view="all" '
               'aria-pressed="false">all records</button></span>')
    sections.append(_all_records(boards))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{PAGE_TITLE}</title>"
        f"<style>\n{_asset('page.css')}</style></head><body>\n"
        f"<h1>{PAGE_TITLE}</h1>\n"
        '<p class="lead">One table per benchmark, level and metric; pick one below. Cells give '
        "the success rate in %, its standard error and the number of episodes. "
        "<b>Provenance</b>: <i>run here</i>, evaluated by this project with "
        "<code>derl-bench evaluate</code>; <i>submitted</i>, a run record someone else "
        "contributed; <i>reported</i>, copied from a paper and not reproduced here (no "
        "standard error). Step cap, episodes, repeats and checkpoint say how each number was "
        "obtained. Click a column header to sort.</p>\n"
        f'<nav id="views">{"".join(nav)}</nav>\n{_filters(boards)}\n'
        + "\n".join(sections)
        + f"\n<script>\n{_asset('page.js')}</script>\n</body></html>\n"
    )
