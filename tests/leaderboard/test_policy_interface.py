"""A record's policy interface: absent in every committed record (the papers' prompt and free
generation), ``compact-constrained`` or ``compact-tried-constrained`` for the ALFWorld command
policies, anything else refused; the boards show rows of another interface apart from the
papers' and name it."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from derl_bench.cli import main
from derl_bench.evaluation.record import command_record, mark_run_here, read_run_here
from derl_bench.evaluation.schema import (
    COMPACT_CONSTRAINED,
    COMPACT_TRIED_CONSTRAINED,
    DEFAULT_POLICY_INTERFACE,
    PROMPT_FREE_TEXT,
    policy_interface,
)
from derl_bench.leaderboard import submission_files, validate_file
from derl_bench.leaderboard.board import build_boards
from tests.evaluation.test_command_record import BASE, _episodes, _evaluation

REPO = Path(__file__).resolve().parents[2]
BOARDS = REPO / "leaderboards"
GSM8K_RUN = BOARDS / "gsm8k" / "random-none-L0.json"


def test_committed_records_are_of_the_papers_interface_but_the_command_policies():
    records = [json.loads(p.read_text()) for p in submission_files(BOARDS)]
    papers = [r for r in records if "policy_interface" not in r]
    assert papers and {policy_interface(r) for r in papers} == {PROMPT_FREE_TEXT} == {
        DEFAULT_POLICY_INTERFACE}
    # the ALFWorld command policies name theirs, and no record names the default
    others = [r for r in records if "policy_interface" in r]
    assert {(r["benchmark"], r["policy_interface"]) for r in others} <= {
        ("alfworld", COMPACT_CONSTRAINED), ("alfworld", COMPACT_TRIED_CONSTRAINED)}


@pytest.mark.parametrize(("interface", "reason"), [
    ("free-form", "$.policy_interface: must be one of ['prompt-free-text', "
                  "'compact-constrained', 'compact-tried-constrained']"),
    ("", "$.policy_interface: must be one of"),
    (COMPACT_CONSTRAINED, "derl/GSM8K-v0 offers no 'compact-constrained' interface"),
    ("compact-tried-constrained",
     "derl/GSM8K-v0 offers no 'compact-tried-constrained' interface"),
    (PROMPT_FREE_TEXT, None),
])
def test_a_record_names_an_interface_its_env_offers(tmp_path, interface, reason):
    record = json.loads(GSM8K_RUN.read_text())
    record["policy_interface"] = interface
    path = tmp_path / "leaderboards" / "gsm8k" / GSM8K_RUN.name
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    problems = validate_file(path).problems
    if reason is None:
        assert problems == []
    else:
        assert any(reason in p for p in problems), problems


@pytest.fixture(scope="module")
def board_dir(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the committed boards' records of the papers' interface plus run-here records
    of a command policy on L0 and L1."""
    root = tmp_path_factory.mktemp("boards") / "leaderboards"
    shutil.copytree(BOARDS, root, ignore=shutil.ignore_patterns("plots"))
    # only the papers' interface from the committed boards, so the tests control the rest
    for path in submission_files(root):
        if "policy_interface" in json.loads(path.read_text()):
            path.unlink()
    written = []
    for level in ("L0", "L1"):
        episodes = _episodes(level)
        record = command_record(_evaluation(episodes, level), episodes, seed=0, **BASE)
        path = root / "alfworld" / f"teacher-dagger-s0-{level}.json"
        path.write_text(json.dumps(record, indent=2))
        written.append(path)
    mark_run_here(root, written)
    assert main(["leaderboard", "validate", "--dir", str(root)]) == 0
    assert main(["leaderboard", "render", "--dir", str(root), "--no-charts"]) == 0
    return root


def _records(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    return [(p, json.loads(p.read_text())) for p in submission_files(root)]


def test_the_board_keeps_each_interface_apart(board_dir):
    boards = {b.benchmark: b for b in build_boards(_records(board_dir), read_run_here(board_dir))}
    board = boards["alfworld"]
    assert board.interfaces() == [PROMPT_FREE_TEXT, COMPACT_CONSTRAINED]
    [row] = board.rows_of(COMPACT_CONSTRAINED)
    assert (row.method, row.provenance, row.group) == (
        "teacher-dagger (seed 0)", "run here", "supervised fine-tuning")
    assert set(row.cells) == {"L0", "L1"}
    assert board.rows[-1] is row  # after every row of the papers' interface
    assert all(b.interfaces() == [PROMPT_FREE_TEXT] for b in boards.values() if b is not board)


def test_the_same_method_under_two_interfaces_is_two_rows(board_dir):
    path = board_dir / "alfworld" / "teacher-dagger-s0-L0.json"
    record = json.loads(path.read_text())
    prompted = copy.deepcopy(record)
    del prompted["policy_interface"]
    boards = build_boards([(path, record), (path, prompted)])
    rows = boards[0].rows
    assert [r.interface for r in rows] == [PROMPT_FREE_TEXT, COMPACT_CONSTRAINED]
    assert len({r.method for r in rows}) == 1


def _board_section(readme: str, title: str) -> str:
    start = readme.index(f"## {title} (")
    end = readme.find("\n## ", start + 1)
    return readme[start:end]


def test_the_readme_lists_the_interface_in_a_table_of_its_own(board_dir):
    section = _board_section((board_dir / "README.md").read_text(), "ALFWorld")
    papers, heading, rest = section.partition(f"### Policy interface `{COMPACT_CONSTRAINED}`")
    assert heading, section
    assert "teacher-dagger" not in papers and "| oracle | none | run here |" in papers
    assert "constrained to the admissible commands" in rest
    row = next(line for line in rest.splitlines() if line.startswith("| teacher-dagger"))
    assert row.startswith("| teacher-dagger (seed 0) | tiny-command-633k | run here | ")
    assert row.count(" ± ") == 2 and row.endswith(" | – |")  # L0, L1; no L2 record
    for other in ("ScienceWorld", "GSM8K"):
        assert "Policy interface" not in _board_section(
            (board_dir / "README.md").read_text(), other)


def test_the_page_shows_the_interface_apart_in_each_view_and_names_it(board_dir):
    page = (board_dir / "index.html").read_text()
    view = re.search(r'<section class="view" id="view-alfworld-L0-strict".*?</section>', page,
                     re.S).group(0)
    papers, heading, rest = view.partition(
        f"<h3>Policy interface <code>{COMPACT_CONSTRAINED}</code></h3>")
    assert heading and "teacher-dagger" not in papers and "oracle" in papers
    assert "teacher-dagger (seed 0)" in rest and rest.count("<table") == 1
    assert '<td class="num" data-sort="1">1</td>' in rest  # ranked among its own interface
    l2 = re.search(r'id="view-alfworld-L2-strict".*?</section>', page, re.S).group(0)
    assert "Policy interface" not in l2  # no record of it on L2
    everything = re.search(r'id="view-all".*?</section>', page, re.S).group(0)
    assert ">policy interface</th>" in everything
    assert everything.count(f">{COMPACT_CONSTRAINED}</td>") == 2


def test_the_chart_labels_the_interface(board_dir, tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    from derl_bench.leaderboard.chart import render_chart

    labels = []
    bar = Axes.bar

    def recording_bar(self, *args, **kwargs):
        labels.append(kwargs.get("label"))
        return bar(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "bar", recording_bar)
    board = next(b for b in build_boards(_records(board_dir), read_run_here(board_dir))
                 if b.benchmark == "alfworld")
    render_chart(board, tmp_path / "alfworld.png")
    assert (tmp_path / "alfworld.png").read_bytes()[:4] == b"\x89PNG"
    assert labels[-1] == f"teacher-dagger (seed 0) · tiny-command-633k [{COMPACT_CONSTRAINED}]"
    assert sum(COMPACT_CONSTRAINED in label for label in labels) == 1


def test_a_long_boards_chart_keeps_every_legend_entry_in_the_image(tmp_path):
    """The committed ALFWorld board has dozens of rows: the saved image must grow to hold a
    legend of that many entries below the axes (a legend beside a fixed-size figure ran off
    its edge and squeezed the axes to a strip)."""
    import math
    import struct

    from derl_bench.leaderboard.chart import LEGEND_LINES, render_chart

    board = next(b for b in build_boards(_records(BOARDS), read_run_here(BOARDS))
                 if b.benchmark == "alfworld")
    assert len(board.rows) > 2 * LEGEND_LINES  # the case at stake: several legend columns
    render_chart(board, tmp_path / "alfworld.png")
    width, height = struct.unpack(">II", (tmp_path / "alfworld.png").read_bytes()[16:24])
    lines = math.ceil(len(board.rows) / math.ceil(len(board.rows) / LEGEND_LINES))
    # the axes' 4.5 inches at 100 dpi, and each legend line's 7 points below them
    assert height >= 450 + lines * 7 * 100 / 72
    assert width >= 1000


def test_a_record_interface_agrees_with_its_policy(tmp_path):
    """A command policy's record without the field would be read as a free-text prompt row;
    and the constrained interface belongs to command policies alone."""
    command = next(p for p in (BOARDS / "alfworld").glob("grpo-outcome-s*-L0.json"))
    record = json.loads(command.read_text())
    assert record["policy"].startswith("commands:")
    del record["policy_interface"]
    path = tmp_path / "leaderboards" / "alfworld" / command.name
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    assert any("is a command policy; its record must state a command policy's "
               "policy_interface ('compact-constrained', 'compact-tried-constrained')" in p
               for p in validate_file(path).problems)
    record["policy_interface"] = "compact-tried-constrained"  # the other view's: accepted
    path.write_text(json.dumps(record))
    assert not any("policy_interface" in p for p in validate_file(path).problems)
    record = json.loads((BOARDS / "alfworld" / "random-none-L0.json").read_text())
    record["policy_interface"] = COMPACT_CONSTRAINED
    path = tmp_path / "leaderboards" / "alfworld" / "random-none-L0.json"
    path.write_text(json.dumps(record))
    assert any("is the interface of a command policy (commands:...), not of 'random'" in p
               for p in validate_file(path).problems)


def test_control_searchers_get_a_table_of_their_own(board_dir):
    """The DigitsBalance board's control searchers (better or worse than random search by
    construction) follow its ranked table under their group's heading, never inside it."""
    from derl_bench.leaderboard.markdown import CONTROLS_NOTE
    from derl_bench.meta.methods import CONTROLS_GROUP

    section = _board_section((board_dir / "README.md").read_text(), "digitsbalance")
    ranked, heading, controls = section.partition(f"### {CONTROLS_GROUP}")
    assert heading and CONTROLS_NOTE in controls
    assert "| control-" not in ranked and "| random (seed 0) |" in ranked
    assert re.findall(r"^\| (control-\w+) \(seed \d\)", controls, re.M).count(
        "control-planted") == 10
    assert "| random (" not in controls
