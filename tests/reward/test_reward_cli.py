"""``derl-bench reward check`` and ``derl-bench reward eval``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from derl_bench.cli import main
from derl_bench.reward import compile_reward

OFFICIAL = "g1 + 0.5 * (g2 + 0.5 * (g3 + 0.5 * (g4 + 0.5)))"


def test_check_prints_canonical_hash_structure_primitives(capsys):
    assert main(["reward", "check", OFFICIAL, "--domain", "math"]) == 0
    out = capsys.readouterr().out
    reward = compile_reward(OFFICIAL, domain="math")
    assert reward.canonical in out and reward.hash in out
    assert "structure     linear" in out
    assert "cot_steps, format_boxed, loose_outcome, outcome" in out


def test_check_json(capsys):
    assert main(["reward", "check", "g1 * g2", "--domain", "agent", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["structure"] == "veto"
    assert report["primitives"] == ["env_reward", "success"]
    assert report["hash"] == compile_reward("g1*g2", domain="agent").hash


def test_check_with_custom_primitives(capsys):
    assert (
        main(
            [
                "reward",
                "check",
                "mine + 1",
                "--domain",
                "math",
                "--primitives",
                "mine,outcome",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["range"] == ["-inf", "inf"]


@pytest.mark.parametrize(
    "expr,fragment",
    [
        ("g1 + sucess", "unknown primitive at position 5"),
        ("__import__('os')", "forbidden construct at position 0"),
        ("g1 +", "syntax error at position 4"),
        ("9**9**9", "number error at position 3"),
    ],
)
def test_check_rejects_with_status_2(expr, fragment, capsys):
    assert main(["reward", "check", expr, "--domain", "agent"]) == 2
    captured = capsys.readouterr()
    assert fragment in captured.err and captured.out == ""


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_eval_over_logged_primitives(tmp_path, capsys):
    log = _write(
        tmp_path / "t.jsonl",
        [
            json.dumps([{"success": 0, "env_reward": 0.2}, {"success": 1, "env_reward": 1.0}]),
            json.dumps({"steps": [{"success": 0, "env_reward": 0.5}]}),
            "",
            json.dumps([]),
        ],
    )
    assert (
        main(
            [
                "reward",
                "eval",
                "g1 + mean(env_reward)",
                "--domain",
                "agent",
                "--trajectories",
                log,
                "--per-step",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["reward"] for r in rows] == pytest.approx([1.6, 0.5, 0.0])
    assert rows[0]["per_step"] == pytest.approx([0.2, 1.4])
    assert rows[2]["steps"] == 0 and rows[2]["per_step"] == []


def test_eval_bound_and_invalid_flag(tmp_path, capsys):
    log = _write(tmp_path / "t.jsonl", [json.dumps([{"score": 1e300}])])
    assert (
        main(
            [
                "reward",
                "eval",
                "score**4",
                "--domain",
                "agent",
                "--trajectories",
                log,
                "--bound",
                "10",
            ]
        )
        == 0
    )
    row = json.loads(capsys.readouterr().out)
    assert row == {"episode": 0, "reward": 10.0, "steps": 1, "invalid": True}


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("{not json", "not JSON"),
        ('{"steps": 3}', "list of per-step dicts"),
        ('[{"env_reward": 1}]', "lacks primitive 'success'"),
    ],
)
def test_eval_rejects_bad_files(tmp_path, capsys, content, fragment):
    log = _write(tmp_path / "t.jsonl", [content])
    assert main(["reward", "eval", "g1", "--domain", "agent", "--trajectories", log]) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize(("value", "shown"), [('"1"', "'1'"), ('"0.5"', "'0.5'"),
                                               ('" -2 "', "' -2 '")])
def test_eval_refuses_a_primitive_given_as_text(tmp_path, capsys, value, shown):
    args = ["reward", "eval", "g1", "--domain", "agent", "--trajectories"]
    text = _write(tmp_path / "text.jsonl", [
        f'[{{"success": 0, "env_reward": 0}}, {{"success": {value}, "env_reward": 1}}]'])
    assert main([*args, text]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("error: trajectory error: episode 0 step 1: 'success' is not a "
                            f"number: {shown}\n")
    # JSON numbers and booleans are what a step holds
    numbers = _write(tmp_path / "numbers.jsonl", [
        '[{"success": false, "env_reward": 0}, {"success": true, "env_reward": 1}]'])
    assert main([*args, numbers]) == 0
    assert json.loads(capsys.readouterr().out)["reward"] == 1.0


@pytest.mark.parametrize("depth", ["just under the recursion limit", 100_000])
def test_eval_refuses_json_nested_too_deeply_to_read(tmp_path, capsys, depth):
    import sys

    # The limit is the process's: a library that ran earlier in the same pytest run may raise it
    if not isinstance(depth, int):
        depth = sys.getrecursionlimit() - 5
    log = _write(tmp_path / "deep.jsonl", ['[{"success": 0, "env_reward": 0}]',
                                           "[" * depth + "]" * depth])
    assert main(["reward", "eval", "g1", "--domain", "agent", "--trajectories", log]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: {log}:2: nested too deeply to read (an episode is a list "
                            "of per-step dicts of numbers)\n")


def test_eval_missing_file(tmp_path, capsys):
    assert (
        main(
            [
                "reward",
                "eval",
                "g1",
                "--domain",
                "agent",
                "--trajectories",
                str(tmp_path / "none.jsonl"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "none.jsonl" in err


def test_console_script_exit_status():
    exe = shutil.which("derl-bench")
    command = [exe] if exe else [sys.executable, "-m", "derl_bench"]
    done = subprocess.run(
        [*command, "reward", "check", "g1.real", "--domain", "math"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "attribute access" in done.stderr
