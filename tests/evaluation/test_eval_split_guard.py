"""A meta run never selects Meta-Rewards on an eval set: item identity of splits."""

from __future__ import annotations

import re

import pytest
import yaml

from derl_bench.cli import main
from derl_bench.envs.items import eval_splits, split_items
from derl_bench.evaluation.families import adapter_for
from derl_bench.family import resolve_family
from derl_bench.grpo.config import ConfigError
from derl_bench.meta import MetaConfig, run_meta
from derl_bench.meta.inner import EvalSplitOverlapError, check_validation_split

TINY_INNER = {"model": "tiny", "steps": 1, "group_size": 2, "prompts_per_step": 1,
              "max_new_tokens": 8, "tensorboard": False}
AGENTS = ("derl/ALFWorld-v0", "derl/ScienceWorld-v0")


def meta(env_id: str, split: str | None, tmp_path, **inner) -> MetaConfig:
    return MetaConfig(name="guard", method="random", outer_steps=1, population=2,
                      validation_episodes=2, validation_split=split,
                      inner={**TINY_INNER, "env_id": env_id, **inner},
                      output_dir=str(tmp_path / "run"), progress=False, executor="local")


def test_eval_splits_are_the_evaluation_protocols_eval_sets(data_root):
    for env_id in ("derl/GSM8K-v0", "derl/MATH-v0", "derl/Arithmetic-v0", *AGENTS):
        adapter = adapter_for(env_id)
        levels = eval_splits(adapter.resolved, env_id)
        assert list(levels) == list(adapter.levels())
        for level, kwargs in levels.items():
            assert adapter.level(level).env_kwargs == kwargs
            assert split_items(adapter.resolved, env_id, kwargs["split"], kwargs.get("level")) == \
                adapter.level(level).manifest.load()


@pytest.mark.parametrize("env_id", ["derl/GSM8K-v0", "derl/MATH-v0", "derl/Arithmetic-v0",
                                    *AGENTS])
def test_every_envs_default_validation_split_is_disjoint_from_its_eval_sets(env_id, data_root,
                                                                             tmp_path):
    check_validation_split(meta(env_id, None, tmp_path))
    for level in ("L0", "L1", "L2") if env_id in AGENTS else ():
        check_validation_split(meta(env_id, None, tmp_path, level=level))


@pytest.mark.parametrize(("env_id", "split", "inner", "fragment"), [
    ("derl/Arithmetic-v0", "L0-eval", {}, "shares 500 of its 500 items with the L0 eval set"),
    ("derl/Arithmetic-v0", "L2-eval", {}, "with the L2 eval set (split=L2-eval)"),
    ("derl/GSM8K-v0", "test", {}, "shares 1319 of its 1319 items with the L0 eval set"),
    # MATH's test split holds MATH-500, the eval set: a partial overlap is refused too
    ("derl/MATH-v0", "test", {}, "shares 500 of its 5000 items with the L0 eval set"),
    ("derl/ALFWorld-v0", "eval", {"level": "L2"}, "with the L1 eval set (level=L1, split=eval)"),
    ("derl/ScienceWorld-v0", "eval", {"level": "L1"}, "with the L1 eval set"),
])
def test_validation_on_an_eval_split_is_refused(env_id, split, inner, fragment, data_root,
                                                tmp_path):
    with pytest.raises(EvalSplitOverlapError, match=re.escape(fragment)):
        check_validation_split(meta(env_id, split, tmp_path, **inner))


def test_an_unknown_validation_split_is_a_config_error(data_root, tmp_path):
    with pytest.raises(ConfigError, match="validation_split 'dev'"):
        check_validation_split(meta("derl/GSM8K-v0", "dev", tmp_path))


def test_run_meta_refuses_before_writing_anything(tmp_path):
    with pytest.raises(EvalSplitOverlapError):
        run_meta(meta("derl/Arithmetic-v0", "L0-eval", tmp_path))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("env_id", "split"), [("derl/Arithmetic-v0", "L0-eval"),
                                               ("derl/GSM8K-v0", "test")])
def test_the_meta_command_exits_2_with_the_reason(env_id, split, data_root, tmp_path, capsys):
    recipe = tmp_path / "meta.yaml"
    recipe.write_text(yaml.safe_dump({
        "method": "random", "outer_steps": 1, "population": 2, "validation_episodes": 2,
        "validation_split": split, "eval_levels": [], "executor": "local",
        "inner": {**TINY_INNER, "env_id": env_id}}))
    assert main(["meta", str(recipe), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"validation_split {split!r} of {env_id} shares" in err and "optimistic" in err
    assert not (tmp_path / "run").exists()


def test_reasoning_gym_meta_runs_are_checked_per_task(tmp_path):
    env_id = "derl/ReasoningGym-v0"
    for task in ("chain_sum", "basic_arithmetic"):
        check_validation_split(meta(env_id, None, tmp_path, env_kwargs={"task": task}))
        levels = eval_splits(resolve_family(env_id), env_id, task=task)
        assert list(levels) == ["L0", "L1", "L2"] and levels["L1"]["task"] == task
    with pytest.raises(EvalSplitOverlapError, match="with the L0 eval set"):
        check_validation_split(meta(env_id, "eval", tmp_path,
                                    env_kwargs={"task": "basic_arithmetic"}))
