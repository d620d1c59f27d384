"""Reward discovery over ALFWorld's command policy: each candidate trains the command policy
from its base (``inner_commands``) and scores its greedy validation success."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from derl_bench.grpo.config import ConfigError
from derl_bench.meta import MetaConfig, run_meta
from derl_bench.meta.inner import compile_inner_reward, train_and_score
from derl_bench.policies.command_model import init_command_model

RECIPE = {"steps": 1, "games_per_step": 1, "group_size": 2, "pool": 2, "envs": 2,
          "num_threads": 1, "max_episode_steps": 4}


def _config(tmp_path, base, **changes):
    values = {"method": "random", "outer_steps": 1, "population": 2, "validation_episodes": 2,
              "inner": {"env_id": "derl/ALFWorld-v0", "model": str(base), "level": "L0",
                        "tensorboard": False},
              "inner_commands": RECIPE, "executor": "local", "progress": False,
              "eval_levels": [], "output_dir": str(tmp_path / "meta")}
    return MetaConfig(**{**values, **changes})


def test_each_candidate_trains_the_command_policy_and_scores_its_validation(tmp_path,
                                                                           data_root):
    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    result = run_meta(_config(tmp_path, base))
    assert [c["status"] for c in result.candidates] == ["scored", "scored"]
    for candidate in result.candidates:
        run = Path(candidate["run"])
        written = json.loads((run / "result.json").read_text())
        # the candidate's score is the command run's own validation score, on its reward
        assert written["score"] == candidate["score"]
        assert written["config"]["meta_reward"] == candidate["expr"]
        assert written["config"]["model"] == str(base)
        assert written["config"]["seed"] == candidate["inner_seed"]
        assert written["validation_games"] == 2 and written["config"]["steps"] == 1
        assert (run / "model" / "config.json").is_file()


def _meta_process(recipe: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "derl_bench", "meta", str(recipe), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_a_command_run_killed_part_way_continues_from_its_checkpoint(tmp_path, data_root):
    """A search killed inside a long inner run does not start that run again: the run goes
    on from its last checkpoint and ends where an unstopped run ends."""
    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    recipe = {**RECIPE, "steps": 6, "save_every": 1}
    runs = {}
    for name in ("whole", "killed"):
        values = {"method": "random", "outer_steps": 1, "population": 1, "seed": 3,
                  "validation_episodes": 2, "inner_commands": recipe, "executor": "local",
                  "progress": False, "eval_levels": [],
                  "inner": {"env_id": "derl/ALFWorld-v0", "model": str(base), "level": "L0",
                            "tensorboard": False}}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values))
        runs[name] = (path, tmp_path / name)
    whole_recipe, whole = runs["whole"]
    output, _ = _meta_process(whole_recipe, "--output", str(whole)).communicate(timeout=600)
    assert "best Meta-Reward" in output, output

    killed_recipe, killed = runs["killed"]
    proc = _meta_process(killed_recipe, "--output", str(killed))
    inner = killed / "inner" / "g000-c00"
    deadline = time.monotonic() + 300
    while not (inner / "checkpoint" / "state.pt").is_file():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the inner run wrote no checkpoint"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (inner / "result.json").exists()  # killed inside the run
    kept = (inner / "metrics.jsonl").read_text().splitlines()[0]

    output, _ = _meta_process(killed_recipe, "--output", str(killed),
                              "--resume").communicate(timeout=600)
    assert "best Meta-Reward" in output, output
    # the rows before the checkpoint are the killed process's own, elapsed times included
    assert (inner / "metrics.jsonl").read_text().splitlines()[0] == kept
    candidate, = [json.loads(line) for line in (killed / "candidates.jsonl").read_text()
                  .splitlines()]
    reference, = [json.loads(line) for line in (whole / "candidates.jsonl").read_text()
                  .splitlines()]
    assert (candidate["expr"], candidate["score"], candidate["train_reward"]) == (
        reference["expr"], reference["score"], reference["train_reward"])
    resumed = load_file(inner / "model" / "model.safetensors")
    unstopped = load_file(whole / "inner" / "g000-c00" / "model" / "model.safetensors")
    assert resumed.keys() == unstopped.keys()
    assert all(resumed[k].equal(unstopped[k]) for k in resumed)


def test_a_command_checkpoint_of_other_settings_is_not_continued(tmp_path, data_root):
    """A checkpoint that other settings left in an inner run's folder is removed, not resumed."""
    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    run_dir = tmp_path / "inner"
    changes = []
    for learning_rate in (5e-5, 1e-3):
        config = _config(tmp_path, base, inner_commands={
            **RECIPE, "steps": 2, "save_every": 1, "learning_rate": learning_rate})
        train_and_score(config, compile_inner_reward(config, "sum(new_location)"), run_dir,
                        str(base))
        written = json.loads((run_dir / "result.json").read_text())
        assert written["config"]["learning_rate"] == learning_rate
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text()
                .splitlines()]
        assert [row["step"] for row in rows if "step" in row] == [1, 2]
        changes.append(rows[0]["weights/max_change"])
    # the second run's first step was trained at its own learning rate, not kept from the first
    assert changes[1] > 5 * changes[0]


@pytest.mark.parametrize(("changes", "reason"), [
    ({"inner_commands": {"stepz": 2}}, "unknown or run-set fields stepz"),
    ({"inner_commands": {"meta_reward": "success"}}, "run-set fields meta_reward"),
    ({"batch_inner": "true"}, "do not train as one population"),
    ({"inner": {"env_id": "derl/GSM8K-v0", "model": "tiny"}},
     "needs the inner env's card to have a 'commands' hook; the card of derl/GSM8K-v0 has none"),
    ({"inner": {"env_id": "derl/ScienceWorld-v0", "model": "tiny"}},
     "the card of derl/ScienceWorld-v0 has none"),
    ({"validation_split": "valid_seen"}, "validation_split cannot be changed"),
])
def test_a_command_recipe_is_checked(tmp_path, changes, reason):
    with pytest.raises(ConfigError, match=reason):
        _config(tmp_path, tmp_path / "base", **changes)
