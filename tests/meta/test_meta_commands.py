"""Reward discovery over ALFWorld's command policy: each candidate trains the command policy
from its base (``inner_commands``) and scores its greedy validation success."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from derl_bench.grpo.config import ConfigError
from derl_bench.meta import MetaConfig, run_meta
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
