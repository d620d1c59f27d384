"""Supervised warm start on an env's own demonstrations: math solutions, ALFWorld walkthroughs."""

from __future__ import annotations

import pytest

from derl_bench.cli import main
from derl_bench.sft import SFTConfig, drop_format, gsm8k_solution, run_sft


def test_sft_on_arithmetic_learns_the_reference_solutions(tmp_path):
    report = run_sft(SFTConfig(env_id="derl/Arithmetic-v0", output=str(tmp_path / "m"),
                               steps=40, batch_size=16, learning_rate=5e-3))
    assert report["loss_last"] < 0.5 * report["loss_first"]
    from derl_bench.policies import LLMPolicy, SamplingConfig

    policy = LLMPolicy.from_pretrained(tmp_path / "m", "arithmetic",
                                       sampling=SamplingConfig(40, 0.0))
    text = policy.generate([policy.math_prompt("Compute 12 + 30.")])[0].text
    assert " = " in text and "answer" in text, text


def test_sft_runs_on_gsm8k_and_alfworld_demonstrations(data_root, tmp_path):
    for env_id, kwargs in (("derl/GSM8K-v0", {}), ("derl/ALFWorld-v0", {"level": "L0"})):
        out = tmp_path / env_id.split("/")[1]
        report = run_sft(SFTConfig(env_id=env_id, output=str(out), steps=3, batch_size=4,
                                   **kwargs))
        assert len(report["losses"]) == 3 and (out / "config.json").is_file()


def test_demonstration_text():
    assert gsm8k_solution("3 + 4 = <<3+4=7>>7.\n#### 7") == "3 + 4 = 7.\nThe answer is \\boxed{7}."
    assert drop_format("So \\boxed{56}.") == "So 56."


def test_cli_refuses_to_overwrite_and_leaves_no_partial_output(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    assert main(["model", "sft", str(taken), "--env", "derl/Arithmetic-v0", "--steps", "1"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    assert main(["model", "sft", str(tmp_path / "x"), "--env", "derl/Nope-v0"]) == 2
    assert main(["model", "sft", str(tmp_path / "x"), "--env", "derl/Arithmetic-v0",
                 "--steps", "0"]) == 2
    assert "steps must be a whole number >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="format_dropout"):
        SFTConfig(env_id="derl/Arithmetic-v0", output=str(tmp_path / "y"), format_dropout=2)
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x-*"))
