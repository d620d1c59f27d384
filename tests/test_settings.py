"""Settings are checked before any work: a bad one is refused with a message naming it and what
it may be, exit 2 on the command line, and nothing written (docs/guarantees.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from derl_bench.cli import main
from derl_bench.grpo.config import ConfigError, load_config
from derl_bench.meta import load_meta_config

REPO = Path(__file__).resolve().parents[1]
GSM8K = str(REPO / "baselines" / "gsm8k-outcome.yaml")
META = str(REPO / "baselines" / "meta-derl-gsm8k.yaml")


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], output: Path) -> str:
    """Run the command line; check that it exits 2 without a traceback and leaves ``output``
    absent; return what it printed on stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert not output.exists(), sorted(p.name for p in output.rglob("*"))
    return err


def test_a_recipe_that_sets_a_key_twice_is_refused(tmp_path, capsys):
    recipe = tmp_path / "twice.yaml"
    recipe.write_text("env_id: derl/Arithmetic-v0\nsteps: 2\nseed: 0\nsteps: 5\n")
    with pytest.raises(ConfigError, match=r"twice.yaml, line 4: 'steps' is set twice \(first "
                                          r"on line 2\)"):
        load_config(recipe)
    err = refused(capsys, ["train", str(recipe), "--output", str(tmp_path / "run")],
                  tmp_path / "run")
    assert "line 4: 'steps' is set twice" in err
    # A meta recipe's sections are held to the same rule, and so is an override's mapping.
    meta = tmp_path / "meta.yaml"
    meta.write_text("method: random\ninner:\n  env_id: derl/Arithmetic-v0\n  model: tiny\n"
                    "  model: other\n")
    with pytest.raises(ConfigError, match="line 5: 'model' is set twice"):
        load_meta_config(meta)
    err = refused(capsys, ["meta", str(meta), "--output", str(tmp_path / "run")],
                  tmp_path / "run")
    assert "meta.yaml, line 5: 'model' is set twice (first on line 4)" in err
    with pytest.raises(ConfigError, match="'grader_timeout' is set twice"):
        load_config(GSM8K, ["env_kwargs={grader_timeout: 1, grader_timeout: 2}"])
