"""Logs stay readable: no carriage-return frames and no third-party bars when output is a file."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import yaml

from derl_bench.progress import LogBar, progress_bar

REPO = Path(__file__).resolve().parents[1]


def test_a_bar_writing_to_a_file_prints_plain_lines():
    log = io.StringIO()
    bar = progress_bar(total=4, desc="episodes", file=log, mininterval=0.0)
    assert isinstance(bar, LogBar)
    for _ in range(4):
        bar.update(1)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0].startswith("episodes:   0%") and lines[-1].startswith("episodes: 100%")
    assert all(line.strip() for line in lines)  # no blank line from closing


def test_a_bar_that_does_not_stay_leaves_nothing_to_clear():
    log = io.StringIO()
    with progress_bar(total=2, desc="files", file=log, leave=False) as bar:
        bar.update(2)
    assert "\r" not in log.getvalue()
    assert log.getvalue().splitlines()[0].startswith("files:")


def test_sft_train_and_evaluate_write_a_clean_log(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "quiet", "env_id": "derl/Arithmetic-v0", "model": str(tmp_path / "sft"),
        "steps": 2, "group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8,
        "save_every": 1, "tensorboard": False, "progress": True}))
    cli = f"{sys.executable} -m derl_bench"
    script = (f"set -e\n"
              f"{cli} model sft {tmp_path / 'sft'} --env derl/Arithmetic-v0 --steps 2 "
              f"--batch-size 2\n"
              f"{cli} train {recipe} --output {tmp_path / 'run'}\n"
              f"{cli} evaluate --env derl/Arithmetic-v0 --level L0 --limit 3 "
              f"--policy llm:{tmp_path / 'sft'} --max-new-tokens 8 "
              f"--output {tmp_path / 'record.json'}\n")
    log = tmp_path / "log.txt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HOME": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(log, "w") as fh:
        done = subprocess.run(["bash", "-c", script], stdout=fh, stderr=subprocess.STDOUT,
                              cwd=tmp_path, env=env, timeout=600)
    text = log.read_text()
    assert done.returncode == 0, text
    assert (tmp_path / "record.json").is_file() and (tmp_path / "run" / "checkpoints").is_dir()
    assert "\r" not in text, text
    for bar in ("Loading weights", "Writing model shards"):
        assert bar not in text, text
    # The project's own bars still report, one plain line at a time.
    assert "sft derl/Arithmetic-v0: 100%" in text and "quiet: 100%" in text, text
    assert "derl/Arithmetic-v0 L0: 100%" in text, text
