"""Data checked where it is read: ``train`` and ``evaluate`` refuse data that differs from the
data catalogue's checksums, and a damaged data file is named (with its line) wherever it is
parsed. Every test works on a copy of the data under ``tmp_path``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

from derl_bench.cli import main
from derl_bench.data import verify
from derl_bench.data.read import DataFileError, read_json, read_jsonl
from derl_bench.data.verify import DataChecksumError, check_data
from derl_bench.families.math.env import load_problems

REPO = Path(__file__).resolve().parents[2]
GSM8K_RECIPE = str(REPO / "baselines" / "gsm8k-outcome.yaml")


def _gsm8k_copy(data_root: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data root holding a copy of GSM8K, made the current one."""
    shutil.copytree(data_root / "gsm8k", root / "gsm8k")
    monkeypatch.setenv("DERL_BENCH_DATA", str(root))
    return root / "gsm8k"


def _flip_an_answer(path: Path) -> None:
    """One byte changed: the first answer 18 becomes 98, and the file still parses."""
    raw = path.read_bytes()
    at = raw.index(b'#### 18"') + len(b"#### ")
    path.write_bytes(raw[:at] + b"9" + raw[at + 1:])


@pytest.fixture
def fresh_problems():
    # Problems are cached per process by dataset, split and explicit root: a test that swaps
    # the data root under the same arguments must read its own copy.
    load_problems.cache_clear()
    yield
    load_problems.cache_clear()


def test_train_refuses_a_gsm8k_file_with_a_flipped_byte(data_root, tmp_path, monkeypatch,
                                                        capsys):
    gsm8k = _gsm8k_copy(data_root, tmp_path / "root", monkeypatch)
    _flip_an_answer(gsm8k / "train.jsonl")
    run = tmp_path / "run"
    assert main(["train", GSM8K_RECIPE, "--output", str(run), "steps=1", "progress=false"]) == 2
    err = capsys.readouterr().err
    assert f"{gsm8k / 'train.jsonl'} differs from the data catalogue (sha256 " in err
    assert "`derl-bench data verify gsm8k`" in err
    assert "`derl-bench data download gsm8k --force`" in err
    assert not run.exists()
    # The Python entry point the command trains through refuses it as well.
    from derl_bench.grpo import load_config
    from derl_bench.grpo.dispatch import run_training

    with pytest.raises(DataChecksumError, match="train.jsonl differs from the data catalogue"):
        run_training(load_config(GSM8K_RECIPE, [f"output_dir={run}"]))
    assert not run.exists()


def test_evaluate_refuses_a_gsm8k_file_with_a_flipped_byte(data_root, tmp_path, monkeypatch,
                                                           capsys, fresh_problems):
    gsm8k = _gsm8k_copy(data_root, tmp_path / "root", monkeypatch)
    _flip_an_answer(gsm8k / "test.jsonl")
    out = tmp_path / "record.json"
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "random",
                 "--output", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: {gsm8k / 'test.jsonl'} differs from the data catalogue (sha256 " in err
    assert "`derl-bench data verify gsm8k`" in err
    assert not out.exists()
    from derl_bench.evaluation import evaluate

    with pytest.raises(DataChecksumError, match="test.jsonl differs from the data catalogue"):
        evaluate("derl/GSM8K-v0", "L0", "random", limit=1)


def test_a_truncated_data_file_is_named_with_its_line(data_root, tmp_path, monkeypatch, capsys,
                                                      fresh_problems):
    gsm8k = _gsm8k_copy(data_root, tmp_path / "root", monkeypatch)
    test = gsm8k / "test.jsonl"
    test.write_bytes(test.read_bytes()[:-40])  # the last problem cut off mid-string
    with pytest.raises(DataFileError) as caught:
        gym.make("derl/GSM8K-v0", split="test", data_root=str(tmp_path / "root"))
    assert str(caught.value).startswith(f"{test}, line 1319: not valid JSON (Unterminated string")
    assert "`derl-bench data download gsm8k --force`" in str(caught.value)
    out = tmp_path / "record.json"
    assert main(["evaluate", "--env", "derl/GSM8K-v0", "--level", "L0", "--policy", "random",
                 "--output", str(out), "--no-progress"]) == 2
    assert f"error: {test}, line 1319: not valid JSON" in capsys.readouterr().err
    assert not out.exists()


def test_a_corrupt_alfworld_game_is_a_clear_error_naming_it(data_root, tmp_path, monkeypatch,
                                                            capsys):
    from derl_bench.evaluation import adapter_for

    root = tmp_path / "root"
    (root / "alfworld" / "json_2.1.1").mkdir(parents=True)
    shutil.copy(data_root / "alfworld" / ".complete", root / "alfworld")
    shutil.copytree(data_root / "alfworld" / "json_2.1.1" / "valid_seen",
                    root / "alfworld" / "json_2.1.1" / "valid_seen")
    monkeypatch.setenv("DERL_BENCH_DATA", str(root))
    first = adapter_for("derl/ALFWorld-v0").eval_set("L0").entries[0]
    game = root / "alfworld" / "json_2.1.1" / first / "game.tw-pddl"
    game.write_bytes(game.read_bytes()[:1000])
    out = tmp_path / "record.json"
    assert main(["evaluate", "--env", "derl/ALFWorld-v0", "--level", "L0", "--policy", "random",
                 "--limit", "1", "--output", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    # the eval set's checksum catches it first, and names the game
    assert f"the files that differ: {game};" in err
    assert "`derl-bench data download alfworld --force`" in err
    assert not out.exists()
    # The env, which has no eval set to hash, says what is wrong with the file.
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval", games=[first])
    with pytest.raises(DataFileError, match="not a valid ALFWorld game file: not JSON"):
        env.reset(options={"game": first})
    env.close()
    # JSON that is no game names the file too.
    game.write_text(json.dumps({"walkthrough": []}))
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval", games=[first])
    with pytest.raises(DataFileError, match="not a valid ALFWorld game file: no pddl_domain, "
                                            "pddl_problem, grammar"):
        env.reset(options={"game": first})
    env.close()


def test_parse_errors_name_the_file_and_line(tmp_path):
    lines = tmp_path / "rows.jsonl"
    lines.write_bytes(b'{"a": 1}\n\n{"a": 2\n')
    with pytest.raises(DataFileError, match=r"rows.jsonl, line 3: not valid JSON \("):
        read_jsonl(lines)
    lines.write_bytes(b'{"a": "\xff"}\n')
    with pytest.raises(DataFileError, match=r"rows.jsonl, line 1: not UTF-8 text"):
        read_jsonl(lines)
    single = tmp_path / "problem.json"
    single.write_text('{"problem": "1 + 1", "solution": "\\\\boxed{2')
    with pytest.raises(DataFileError, match=r"problem.json: not valid JSON \(Unterminated"):
        read_json(single)


def test_the_catalogue_check_hashes_a_file_once_while_it_is_unchanged(data_root, tmp_path,
                                                                       monkeypatch):
    root = tmp_path / "root"
    _gsm8k_copy(data_root, root, monkeypatch)
    hashed: list[Path] = []
    sha256_file = verify.sha256_file
    monkeypatch.setattr(verify, "sha256_file", lambda path: hashed.append(path)
                        or sha256_file(path))
    for _ in range(3):  # a command's own check, then each inner run's
        check_data(["gsm8k/test.jsonl", "gsm8k/no-such.jsonl", "arithmetic/L0-eval"], root)
    assert hashed == [root / "gsm8k" / "test.jsonl"]
    # A digest computed already (for a record) is compared, not computed again.
    check_data({"gsm8k/train.jsonl": sha256_file(root / "gsm8k" / "train.jsonl")}, root)
    assert len(hashed) == 1
    # A file replaced since it was hashed is hashed again, and refused when it differs.
    _flip_an_answer(root / "gsm8k" / "test.jsonl")
    with pytest.raises(DataChecksumError):
        check_data(["gsm8k/test.jsonl"], root)
    assert len(hashed) == 2
