"""GRPO for a command policy on ALFWorld: an inner run's metrics, its validation score and its
model; the Meta-Reward sees the think/action parser's format_valid and every primitive."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from derl_bench.grpo.commands import CommandGRPOConfig, respond, train_commands
from derl_bench.observers.think_action import parse_think_action
from derl_bench.policies.command_model import init_command_model

ALFWORLD = "derl/ALFWorld-v0"


def test_the_response_is_the_command_in_valid_tags():
    assert parse_think_action(respond("go to cabinet 10")) == ("go to cabinet 10", True)


@pytest.mark.parametrize("reward,kl,epochs,temperature", [
    ("sum(new_location)", 0.0, 2, 1.0), ("format_valid * success", 0.1, 1, 1.0),
    # sampled at a temperature, the update recomputes the tempered draws' log-probabilities
    ("sum(new_location)", 0.0, 2, 0.5)])
def test_an_inner_run_trains_scores_and_logs_its_diagnostics(tmp_path, data_root, reward, kl,
                                                             epochs, temperature):
    base = init_command_model(tmp_path / "base", ALFWORLD)
    config = CommandGRPOConfig(model=str(base), output_dir=str(tmp_path / "run"),
                               env_id=ALFWORLD, meta_reward=reward, steps=2, games_per_step=2,
                               group_size=2, pool=4, validation_games=2, envs=4, num_threads=1,
                               max_episode_steps=6, kl_coef=kl, learning_rate=1e-2,
                               updates_per_batch=epochs, validation_every=2, curve_games=2,
                               temperature=temperature)
    history = train_commands(config)
    curve, steps, final = history[0], history[1:-1], history[-1]
    assert curve["step"] == 0 and 0.0 <= curve["validation/success"] <= 1.0
    assert [r["step"] for r in steps] == [1, 2]
    assert "validation/success" in steps[1] and "validation/success" not in steps[0]
    for row in steps:
        assert 0.0 <= row["groups_with_advantage"] <= 1.0
        assert row["time/game_reset_s"] >= 0 and row["time/model_rollout_s"] > 0
        assert row["kl"] >= 0.0 and row["entropy"] > 0.0  # sampled commands: -log p > 0
        assert len(row["epochs"]) == (epochs if row["commands/trained"] else 0)
        assert row["weights/max_change"] >= 0.0
    trained = [r for r in steps if r["commands/trained"]]
    if reward == "sum(new_location)":
        # new places differ between episodes: every step trains (at 0.5 a group's two
        # draws may coincide: the first step at least trains)
        assert len(trained) == 2 if temperature == 1.0 else trained[0] is steps[0]
        first = steps[0]["epochs"]
        # The first epoch's policy is the sampler (ratio 1, nothing clipped); the second has
        # moved, at this learning rate, far enough to clip.
        assert abs(first[0]["ratio/mean"] - 1.0) < 1e-4 and first[0]["clip_fraction"] == 0.0
        assert first[1]["clip_fraction"] > 0.0 and first[1]["ratio/mean"] != first[0]["ratio/mean"]
        assert all(e["grad_norm"] > 0 for e in first)
        assert steps[0]["kl"] < 1e-6  # the first batch's sampler is the base, tempered alike
        assert steps[1]["kl"] > 0.0  # the policy has left the base by step 2
        assert steps[1]["weights/max_change"] > 0.0
    assert 0.0 <= final["score"] <= 1.0
    out = tmp_path / "run"
    result = json.loads((out / "result.json").read_text())
    assert result["score"] == final["score"] and result["validation_games"] == 2
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2]
    # The folder is a run: its settings as a recipe that runs it again.
    import yaml

    from derl_bench.grpo.commands import command_config_from_dict

    assert command_config_from_dict(yaml.safe_load((out / "config.yaml").read_text())) == config
    from derl_bench.policies import load_model_and_tokenizer

    before, _ = load_model_and_tokenizer(str(base))
    after, _ = load_model_and_tokenizer(str(out / "model"))
    moved = any(not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters(),
                                                      strict=True))
    assert moved == bool(trained)


@pytest.mark.parametrize("reward,pool,drawn", [
    # the untrained base wins nothing: no group moves, every round is drawn, nothing trains
    ("success", 8, 6),
    # a pool of 3 runs out in the second round
    ("success", 3, 3),
    # one-step episodes: a group moves when its two draws differ in going somewhere new
    ("sum(new_location)", 8, None)])
def test_dynamic_sampling_keeps_only_groups_with_an_advantage(tmp_path, data_root, reward,
                                                               pool, drawn):
    base = init_command_model(tmp_path / "base", ALFWORLD)
    config = CommandGRPOConfig(model=str(base), output_dir=str(tmp_path / "run"),
                               env_id=ALFWORLD, meta_reward=reward, steps=2, games_per_step=2,
                               group_size=2, pool=pool, validation_games=0, envs=4,
                               num_threads=1, max_episode_steps=1 if drawn is None else 4,
                               filter_groups=True, max_draws=3, learning_rate=1e-2)
    steps = [row for row in train_commands(config) if isinstance(row.get("step"), int)]
    for row in steps:
        moving = round(row["groups_with_advantage"] * row["groups/drawn"])
        # the batch: as many moving groups as a step asks for, when the rounds found them
        assert row["groups/kept"] == min(moving, config.games_per_step)
        # every kept episode is one command, and every one carries an advantage
        assert row["commands/trained"] == row["groups/kept"] * config.group_size
        # rounds stop once enough groups move, and never pass max_draws
        rounds = -(-row["groups/drawn"] // config.games_per_step)
        assert rounds <= config.max_draws
        if drawn is not None:
            assert (row["groups/drawn"], moving) == (drawn, 0)
        elif rounds > 1:
            assert moving - row["groups/kept"] < config.games_per_step


def test_a_recurring_state_runs_forward_once_and_keeps_its_place():
    from derl_bench.grpo.commands import unique_rows
    from derl_bench.rollout.commands import CommandStep

    def step(prompt: list[int], chosen: int) -> CommandStep:
        return CommandStep((prompt, [[4], [5, 6]]), ["a", "b c"], chosen, -0.5, None, "policy")

    steps = [step([1, 2], 0), step([1, 2], 1), step([1, 2], 0), step([1, 3], 0),
             step([7], 1), step([1, 3, 5], 0), step([1, 2], 1)]
    unique, inverse = unique_rows(steps)
    assert len(unique) == 5
    assert [unique[i] for i in inverse.tolist()] == steps
    # Ordered by prompt, shortest first: one state's rows are neighbours in a minibatch.
    assert [u.ids[0] for u in unique] == [[7], [1, 2], [1, 2], [1, 3], [1, 3, 5]]


def test_a_command_recipe_refuses_what_it_cannot_run(tmp_path):
    from derl_bench.grpo.commands import command_config_from_dict
    from derl_bench.grpo.config import ConfigError, config_from_dict

    good = {"trainer": "commands", "model": "base", "env_id": ALFWORLD}
    assert command_config_from_dict(good).run_dir.name == "command-grpo"
    for bad, words in [({"epochs": 2}, "unknown recipe keys: epochs"),
                       ({"updates_per_batch": 0}, "updates_per_batch must be"),
                       ({"learning_rate": "fast"}, "learning_rate"),
                       ({"validation_every": -1}, "validation_every must be"),
                       ({"max_draws": 0}, "max_draws must be"),
                       ({"filter_groups": "yes"}, "filter_groups")]:
        with pytest.raises(ConfigError, match=words):
            command_config_from_dict({**good, **bad})
    with pytest.raises(ConfigError, match="env_id"):
        command_config_from_dict({"trainer": "commands", "model": "base"})
    # An LLM recipe names the trainer that reads a command recipe instead.
    with pytest.raises(ConfigError, match="trainer: commands trains a command policy"):
        config_from_dict({"trainer": "commands"})


def test_the_training_pool_leaves_out_the_games_the_base_was_taught_on(tmp_path):
    import numpy as np

    from derl_bench.grpo.commands import base_games, training_pool
    from derl_bench.grpo.config import ConfigError

    base = tmp_path / "base"
    base.mkdir()
    (base / "dagger.json").write_text(json.dumps({"pool": list(range(0, 60, 2)),
                                                  "games_in_split": 100,
                                                  "config": {"seed": 0, "pool": 30}}))
    config = CommandGRPOConfig(model=str(base), output_dir=str(tmp_path / "run"), env_id=ALFWORLD,
                               pool=40)
    pool = training_pool(config, 100)
    assert len(set(pool.tolist())) == 40 and not set(pool.tolist()) & set(range(0, 60, 2))
    assert np.array_equal(pool, training_pool(config, 100))  # seeded
    # A record without its pool: the pool its seed drew, as run_dagger draws it.
    (base / "dagger.json").write_text(json.dumps({"games_in_split": 100,
                                                  "config": {"seed": 3, "pool": 10}}))
    drawn = set(np.random.default_rng(3).permutation(100)[:10].tolist())
    assert base_games(base, 100) == drawn
    with pytest.raises(ConfigError, match="larger than the 90 training games"):
        training_pool(CommandGRPOConfig(model=str(base), output_dir="x", env_id=ALFWORLD,
                                        pool=95), 100)


def test_derl_bench_train_runs_a_command_recipe(tmp_path, data_root, capsys):
    from derl_bench.cli import main

    base = init_command_model(tmp_path / "base", ALFWORLD)
    recipe = tmp_path / "commands.yaml"
    recipe.write_text(f"trainer: commands\nenv_id: {ALFWORLD}\nmodel: {base}\n"
                      "meta_reward: sum(new_location)\nsteps: 1\ngames_per_step: 1\n"
                      "group_size: 2\npool: 2\nvalidation_games: 1\nenvs: 2\nnum_threads: 1\n"
                      "max_episode_steps: 4\nupdates_per_batch: 2\n")
    out = tmp_path / "run"
    assert main(["train", str(recipe), "--output", str(out), "learning_rate=1e-3"]) == 0
    assert "validation score" in capsys.readouterr().out
    [row] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(row["epochs"]) == 2 and row["commands/trained"] > 0
    assert json.loads((out / "result.json").read_text())["config"]["learning_rate"] == 1e-3
    written = sorted(p.name for p in out.iterdir())
    # A second run into the folder is refused; --resume has no checkpoint to continue.
    assert main(["train", str(recipe), "--output", str(out)]) == 2
    assert "already holds another run" in capsys.readouterr().err
    assert main(["train", str(recipe), "--output", str(out), "--resume"]) == 2
    assert "holds no checkpoint of a command run" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == written
    assert main(["train", str(recipe), "--output", str(out), "--overwrite", "seed=1"]) == 0
    assert json.loads((out / "result.json").read_text())["config"]["seed"] == 1
    # A run scored elsewhere (no validation game) records no score: null, not JSON's missing NaN
    unscored = tmp_path / "unscored"
    assert main(["train", str(recipe), "--output", str(unscored), "validation_games=0"]) == 0
    assert json.loads((unscored / "result.json").read_text())["score"] is None
    # A bad key or value is refused before anything is written, and so is a pool larger
    # than the training games the base was not taught on.
    (base / "dagger.json").write_text(json.dumps({"pool": list(range(3000))}))
    for override in ("epochs=3", "group_size=1", "pool=600"):
        fresh = tmp_path / f"refused-{override.split('=')[0]}"
        assert main(["train", str(recipe), "--output", str(fresh), override]) == 2
        assert not fresh.exists() or not any(fresh.iterdir())


def test_a_command_run_without_its_dataset_is_refused_before_its_folder_is_a_run(
        tmp_path, monkeypatch, capsys):
    from derl_bench.cli import main

    base = init_command_model(tmp_path / "base", ALFWORLD)
    monkeypatch.setenv("DERL_BENCH_DATA", str(tmp_path / "empty-root"))
    out = tmp_path / "run"
    recipe = str(Path(__file__).resolve().parents[2] / "baselines" / "alfworld-commands-pilot.yaml")
    assert main(["train", recipe, f"model={base}", "--output", str(out)]) == 2
    assert "dataset 'alfworld' is not in the data root" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_a_resumed_command_run_ends_as_a_run_never_stopped(tmp_path, data_root, capsys):
    """Two steps, a checkpoint, then ``--resume steps=4``: the same step rows (timings aside)
    and the same weights as four steps in one go; other changed settings are refused."""
    import torch

    from derl_bench.cli import main
    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.policies.command_model import init_command_model

    base = init_command_model(tmp_path / "base", ALFWORLD)
    recipe = tmp_path / "commands.yaml"
    recipe.write_text(f"trainer: commands\nenv_id: {ALFWORLD}\nmodel: {base}\n"
                      "meta_reward: sum(new_location)\ngames_per_step: 1\ngroup_size: 2\n"
                      "pool: 3\nvalidation_games: 1\nenvs: 2\nnum_threads: 1\n"
                      "max_episode_steps: 4\nupdates_per_batch: 2\nlearning_rate: 1e-3\n"
                      "save_every: 2\n")
    whole, halves = tmp_path / "whole", tmp_path / "halves"
    assert main(["train", str(recipe), "--output", str(whole), "steps=4"]) == 0
    assert main(["train", str(recipe), "--output", str(halves), "steps=2"]) == 0
    for changed in ("learning_rate=1e-2", "temperature=0.5"):
        assert main(["train", str(recipe), "--output", str(halves), "--resume", "steps=3",
                     changed]) == 2
        err = capsys.readouterr().err
        assert "these differ" in err and changed.split("=")[0] in err
    # a copy of the stopped run elsewhere continues as the same run, also when its
    # config.yaml predates a setting (it trained at the setting's default)
    moved = tmp_path / "moved"
    shutil.copytree(halves, moved)
    written = (moved / "config.yaml").read_text()
    assert "temperature: 1.0\n" in written
    (moved / "config.yaml").write_text(written.replace("temperature: 1.0\n", ""))
    assert main(["train", str(recipe), "--output", str(moved), "--resume", "steps=4"]) == 0
    assert main(["train", str(recipe), "--output", str(halves), "--resume", "steps=4"]) == 0

    def rows(run):
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
                for line in (run / "metrics.jsonl").read_text().splitlines()]

    assert [r["step"] for r in rows(halves)] == [1, 2, 3, 4]
    assert rows(halves) == rows(whole) == rows(moved)
    a, _ = load_model_and_tokenizer(str(whole / "model"))
    b, _ = load_model_and_tokenizer(str(halves / "model"))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                 b.state_dict().values(), strict=True))
    assert (halves / "checkpoint" / "state.pt").is_file()
    assert not (halves / "checkpoint.new").exists() and not (halves / "checkpoint.old").exists()


def test_a_model_built_for_another_view_trains_and_is_scored_in_it(tmp_path, data_root):
    from derl_bench.evaluation.commands import evaluate_commands
    from derl_bench.evaluation.record import command_record
    from derl_bench.policies import load_model_and_tokenizer
    from derl_bench.policies.command_model import VIEW_FILE, model_view
    from derl_bench.rollout.commands import CommandEpisode

    base = init_command_model(tmp_path / "base", ALFWORLD, view="tried")
    config = CommandGRPOConfig(model=str(base), output_dir=str(tmp_path / "run"),
                               env_id=ALFWORLD, meta_reward="sum(new_location)", steps=2,
                               games_per_step=2, group_size=2, pool=4, validation_games=2,
                               envs=4, num_threads=1, max_episode_steps=12, save_every=1)
    train_commands(config)
    for folder in (tmp_path / "run" / "model", tmp_path / "run" / "checkpoint" / "model"):
        assert model_view(folder) == "tried", folder
    episodes: list[CommandEpisode] = []
    result = evaluate_commands(tmp_path / "run" / "model", "L0", env=ALFWORLD, limit=4,
                               envs=4, num_threads=1, episodes_out=episodes)
    assert result["policy_interface"] == "compact-tried-constrained"
    # the prompts it played are the tried view's: a situation that came back says so
    _, tokenizer = load_model_and_tokenizer(str(tmp_path / "run" / "model"))
    prompts = [tokenizer.decode(s.ids[0]) for e in episodes for s in e.steps]
    repeated = [p for p in prompts if " tried : " in p]
    assert repeated, "12 random steps on 4 games never came back to a situation"
    # the same folder without its view file plays the compact view: other prompts
    (tmp_path / "run" / "model" / VIEW_FILE).unlink()
    compact: list[CommandEpisode] = []
    assert evaluate_commands(tmp_path / "run" / "model", "L0", env=ALFWORLD, limit=4,
                             envs=4, num_threads=1, episodes_out=compact)[
        "policy_interface"] == "compact-constrained"
    assert not any(" tried : " in tokenizer.decode(s.ids[0]) for e in compact for s in e.steps)
    # its record says which view it read
    record = command_record(result, episodes, method="grpo-outcome", model="command-tried",
                            model_dir=tmp_path / "run" / "model", checkpoint="final",
                            env=ALFWORLD, policy_interface=result["policy_interface"])
    assert record["policy_interface"] == "compact-tried-constrained"
