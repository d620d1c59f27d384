"""The leaderboards' model: boards of rows (a method x model) with a cell per level and metric,
built from the validated records, and how a row is classified (method group, model size,
provenance).

One board per benchmark. When a row has several records for one level the newest wins (then the
larger n). Boards of envs with a published metric next to the strict one (ScienceWorld) keep a
cell per level and metric; a reported row fills the cells of the metric its source used. A row
is also one policy interface (a record's ``policy_interface``): rows of another interface than
the papers' are not ranked with those, and the boards show them apart.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from derl_bench.evaluation.families import FamilyAdapter, resolve_adapter
from derl_bench.evaluation.policies import SCRIPTED
from derl_bench.evaluation.record import record_digest
from derl_bench.evaluation.schema import DEFAULT_POLICY_INTERFACE, policy_interface
from derl_bench.family import DEFAULT_SUCCESS_RULE, family_specs, resolve_family
from derl_bench.meta.methods import HAND_MADE_GROUP, SEARCHED_GROUP, method_head, methods

PROVENANCES = ("run here", "submitted", "reported")
"""A ``run`` record the project made itself (listed in ``run-here.txt``), any other ``run``
record, and a number copied from a publication."""

METHOD_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("prompting", ("react",)),
    ("supervised fine-tuning", ("sft", "teacher", "dagger")),
    (SEARCHED_GROUP, ()),
    (HAND_MADE_GROUP, ("grpo", "gigpo", "eto", "rlvmr", "outcome", "average")),
)
"""Method groups, in board order, by the method name's first word (lower case, up to a space,
hyphen, comma, semicolon or parenthesis: :func:`~derl_bench.meta.methods.base.method_head`),
for the methods that are not reward-discovery methods; those add themselves from the registry
(:func:`method_groups`). A scripted policy is a ``scripted baseline`` whatever its name."""
SCRIPTED_GROUP = "scripted baseline"
OTHER_GROUP = "other"


def method_groups() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every method group and the first words filed under it: :data:`METHOD_GROUPS` with each
    reward-discovery method of the registry (:mod:`derl_bench.meta.methods`) added to its
    group (a group of its own comes after those, in registry order).

    >>> dict(method_groups())["RL, searched reward"]
    ('derl', 'random', 'revolve')
    """
    heads = {group: list(names) for group, names in METHOD_GROUPS}
    for method in methods():
        names = heads.setdefault(method.group, [])
        if method.head not in names:
            names.append(method.head)
    return tuple((group, tuple(names)) for group, names in heads.items())


def method_group(method: str, checkpoint: str | None,
                 groups: Sequence[tuple[str, Sequence[str]]] | None = None) -> str:
    """The method group a board files a row under (``groups``: :func:`method_groups`).

    >>> method_group("GRPO, outcome reward", None), method_group("derl-pop (seed 1)", "x")
    ('RL, hand-made reward', 'RL, searched reward')
    >>> method_group("random", "none: a scripted policy, nothing trained")
    'scripted baseline'
    """
    if checkpoint == SCRIPTED:
        return SCRIPTED_GROUP
    head = method_head(method)
    for group, names in method_groups() if groups is None else groups:
        if head in names:
            return group
    return OTHER_GROUP


def model_size(model: str) -> str:
    """The parameter count a model's name states (``1.5B``), ``tiny`` for the in-code model,
    ``no model`` for scripted policies, else ``not stated``.

    >>> model_size("Qwen2.5-1.5B-Instruct"), model_size("tiny-sft"), model_size("GPT-4o")
    ('1.5B', 'tiny', 'not stated')
    """
    found = re.search(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)B(?![A-Za-z])", model)
    if found:
        return f"{found.group(1)}B"
    if model.startswith("tiny"):
        return "tiny"
    return "no model" if model == "none" else "not stated"


@dataclass
class Cell:
    """One level of one row."""

    mean: float
    se: float | None
    n: int | None
    date: str
    path: str
    setup: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    method: str
    model: str
    kind: str
    provenance: str = "run here"
    group: str = OTHER_GROUP
    """The method group (:func:`method_group`)."""
    citation: str = ""
    url: str = ""
    table: str = ""
    cells: dict[str, Cell] = field(default_factory=dict)
    published: dict[str, Cell] = field(default_factory=dict)
    """Cells of the published metric, by level (boards with ``published_metric``)."""
    interface: str = DEFAULT_POLICY_INTERFACE
    """What the policy read and how it acted (:data:`~derl_bench.evaluation.schema.
    POLICY_INTERFACES`)."""

    def metric_cells(self, metric: str) -> dict[str, Cell]:
        return self.published if metric == "published" else self.cells

    @property
    def size(self) -> str:
        return model_size(self.model)

    @property
    def source(self) -> str:
        return "reported, not reproduced here" if self.kind != "run" else self.provenance


@dataclass
class Board:
    benchmark: str
    env_id: str
    levels: list[str]
    rows: list[Row]
    published_metric: bool = False
    heading: str = ""
    """The board's title from its card (``hooks: board: title``); the benchmark name if empty."""
    success_rule: str = DEFAULT_SUCCESS_RULE
    """What a success is, as the card states it (``hooks: board: success_rule``)."""

    @property
    def title(self) -> str:
        return self.heading or self.benchmark

    @property
    def metrics(self) -> tuple[str, ...]:
        return ("strict", "published") if self.published_metric else ("strict",)

    def interfaces(self) -> list[str]:
        """The policy interfaces of the board's rows: the default first, then the others in
        row order (each is shown apart)."""
        found = dict.fromkeys([DEFAULT_POLICY_INTERFACE, *(r.interface for r in self.rows)])
        return [i for i in found if any(r.interface == i for r in self.rows)]

    def rows_of(self, interface: str) -> list[Row]:
        return [r for r in self.rows if r.interface == interface]

    def columns(self) -> list[tuple[str, str, str]]:
        """``(label, level, metric)`` per column, strict levels first."""
        if not self.published_metric:
            return [(level, level, "strict") for level in self.levels]
        return [(f"{level} {metric}", level, metric)
                for metric in self.metrics for level in self.levels]


def provenance(record: Mapping[str, Any], run_here: Collection[str]) -> str:
    """``run here``, ``submitted`` or ``reported`` (see :data:`PROVENANCES`)."""
    if record["kind"] != "run":
        return "reported"
    return "run here" if record_digest(record) in run_here else "submitted"


def evaluated_adapters() -> list[FamilyAdapter]:
    """The evaluation rules of every env id that has an evaluation protocol, in card order
    (those of :func:`~derl_bench.evaluation.families.evaluated_env_ids`): one board each, each
    family resolved once."""
    adapters = []
    for spec in family_specs().values():
        family = resolve_family(spec)
        adapters += [resolve_adapter(env_id, family) for env_id in spec.env_ids]
    return adapters


def build_boards(records: Sequence[tuple[Path, dict[str, Any]]],
                 run_here: Collection[str] = (),
                 adapters: Sequence[FamilyAdapter] | None = None) -> list[Board]:
    """Group valid records into boards, in env-card order; ``run_here`` holds the digests of
    the records the project ran itself (:func:`~derl_bench.evaluation.record.read_run_here`);
    ``adapters`` the boards' evaluation rules (default: :func:`evaluated_adapters`)."""
    if adapters is None:
        adapters = evaluated_adapters()
    boards: dict[str, Board] = {}
    for adapter in adapters:
        name = adapter.benchmark
        card_board = adapter.spec.board(name)
        boards[name] = Board(name, adapter.env_id, list(adapter.levels()), [],
                             published_metric=adapter.has_published,
                             heading=card_board.title, success_rule=card_board.success_rule)
    rows: dict[tuple[str, str, str, str, str], Row] = {}
    groups = method_groups()
    for path, rec in records:
        board = boards[rec["benchmark"]]
        origin = provenance(rec, run_here)
        interface = policy_interface(rec)
        key = (rec["benchmark"], rec["method"], rec["model"], origin, interface)
        if key not in rows:
            source = rec["source"] or {}
            rows[key] = Row(rec["method"], rec["model"], rec["kind"], origin,
                            method_group(rec["method"], rec["setup"]["checkpoint"], groups),
                            source.get("citation", ""), source.get("url", ""),
                            source.get("table", ""), interface=interface)
            board.rows.append(rows[key])
        res = rec["results"]
        rates = [(res["metric"], res["success_rate"])]
        if board.published_metric and "published" in res:
            rates.append(("published", res["published"]["success_rate"]))
        for metric, rate in rates:
            cell = Cell(rate["mean"], rate["se"], res["n"], rec["date"], path.as_posix(),
                        rec["setup"])
            cells = rows[key].metric_cells(metric)
            old = cells.get(rec["level"])
            if old is None or (cell.date, cell.n or 0) > (old.date, old.n or 0):
                cells[rec["level"]] = cell
    for board in boards.values():
        board.rows.sort(key=lambda r: (r.interface != DEFAULT_POLICY_INTERFACE, r.interface,
                                       r.kind != "run", -_best(r), r.method, r.model))
    return [b for b in boards.values() if b.rows]


def _best(row: Row) -> float:
    return max((c.mean for c in [*row.cells.values(), *row.published.values()]), default=0.0)
