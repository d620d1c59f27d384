"""Run configs from YAML recipes and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from derl_bench.family import family_spec
from derl_bench.grpo import ConfigError, TrainConfig, load_config, parse_overrides
from derl_bench.reward import compile_reward

BASELINES = Path(__file__).resolve().parents[2] / "baselines"
RECIPES = sorted([*BASELINES.glob("*-outcome.yaml"), *BASELINES.glob("*-outcome-format.yaml"),
                  *BASELINES.glob("*-average.yaml")])


def test_three_recipes_per_env():
    names = {p.stem for p in RECIPES}
    for env in ("gsm8k", "math", "alfworld", "scienceworld"):
        assert {f"{env}-outcome", f"{env}-outcome-format", f"{env}-average"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_loads_and_its_meta_reward_compiles(recipe):
    config = load_config(recipe)
    assert config.name == recipe.stem and config.model == "tiny"
    domain = family_spec(config.env_id).domain
    reward = compile_reward(config.meta_reward, domain=domain)
    expected = {"math": "outcome", "agent": "success"}[domain]
    if recipe.stem.endswith("-outcome"):
        assert reward.primitives == (expected,)
    elif recipe.stem.endswith("-outcome-format"):
        fmt = {"math": "format_boxed", "agent": "format_valid"}[domain]
        assert set(reward.primitives) == {expected, fmt}
    else:
        assert expected in reward.primitives and len(reward.primitives) >= 2
    if domain == "agent":
        assert config.level == "L0"


def test_overrides_are_parsed_as_yaml_and_validated(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("env_id: derl/GSM8K-v0\nsteps: 2\n")
    config = load_config(recipe, ["steps=5", "learning_rate=1e-4", "clip_eps_high=0.28",
                                  "env_kwargs={grader_timeout: 2}", "meta_reward=g1 + 0.5 * g2"])
    assert config.name == "r" and config.steps == 5 and config.learning_rate == 1e-4
    assert config.env_kwargs == {"grader_timeout": 2}
    assert config.meta_reward == "g1 + 0.5 * g2"
    assert config.env_make_kwargs() == {"split": "train", "grader_timeout": 2}
    assert load_config(recipe, ["learning_rate=1"]).learning_rate == 1.0  # int accepted as float
    assert parse_overrides(["level=L1", "dtype="]) == {"level": "L1", "dtype": None}


@pytest.mark.parametrize("override, message", [
    ("steps=two", "steps"), ("group_size=1", "group_size"), ("clip_eps=1.5", "clip_eps"),
    ("trainer=ppo", "trainer"), ("bogus=1", "unknown"), ("steps", "KEY=VALUE"),
    ("scale_by_std=3", "scale_by_std"),
])
def test_bad_overrides_are_rejected(tmp_path, override, message):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("env_id: derl/GSM8K-v0\n")
    with pytest.raises(ConfigError, match=message):
        load_config(recipe, [override])


def test_bad_recipe_files_are_rejected(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "broken.yaml").write_text("steps: [\n")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    for name in ("list.yaml", "broken.yaml", "absent.yaml", "binary.yaml"):
        with pytest.raises(ConfigError):
            load_config(tmp_path / name)
    # An empty recipe is a mistake, not a request for every default.
    for text in ("", "\n  \n", "# nothing yet\n"):
        (tmp_path / "empty.yaml").write_text(text)
        with pytest.raises(ConfigError, match="empty.yaml is empty"):
            load_config(tmp_path / "empty.yaml")


def test_level_goes_to_the_env_only_when_set():
    assert "level" not in TrainConfig().env_make_kwargs()
    assert TrainConfig(env_id="derl/ALFWorld-v0", level="L2").env_make_kwargs()["level"] == "L2"
    assert TrainConfig(output_dir=None, name="x").run_dir == Path("runs/x")
