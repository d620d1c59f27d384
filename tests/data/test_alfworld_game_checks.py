"""Damaged ALFWorld games are refused, never played or scored: a game file with one changed byte
still parses and plays, so every split has a content hash (the tree checksum of its games) and
every release game its own digest. ``data verify`` checks contents and names the damaged games;
``evaluate`` and ``train`` refuse them before anything is written; the env refuses to load one.

Every test works on a copy of the data root under ``tmp_path``: its game files are hard links to
the real ones, and a damaged game is a new file put in place of its link, so the real data is
never touched."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

from derl_bench.cli import main
from derl_bench.data.read import DataFileError
from derl_bench.families.alfworld.game import load_game
from derl_bench.families.alfworld.games import level_games

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def alfworld_copy(data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data root holding ALFWorld (games linked, the rest copied), made the current one."""
    source, root = data_root / "alfworld", tmp_path / "root"
    shutil.copytree(source / "logic", root / "alfworld" / "logic")
    shutil.copy(source / ".complete", root / "alfworld" / ".complete")
    for split in ("train", "valid_seen", "valid_unseen", "valid_train"):
        shutil.copytree(source / "json_2.1.1" / split, root / "alfworld" / "json_2.1.1" / split,
                        copy_function=os.link)
    monkeypatch.setenv("DERL_BENCH_DATA", str(root))
    load_game.cache_clear()  # games are cached by path; a test's damage must be read
    yield root
    load_game.cache_clear()


def damage(root: Path, game: str) -> Path:
    """One byte of ``game``'s file changed (the file still parses), in a new file put in place
    of the link."""
    path = root / "alfworld" / "json_2.1.1" / game / "game.tw-pddl"
    raw = path.read_bytes()
    at = raw.index(b'"walkthrough"')
    at = raw.index(b"go to", at) + 4
    fresh = path.with_suffix(".tmp")
    fresh.write_bytes(raw[:at] + b"T" + raw[at + 1:])
    os.replace(fresh, path)
    return path


def test_data_verify_checks_contents_and_names_the_damaged_games(alfworld_copy, capsys):
    assert main(["data", "verify", "alfworld", "--root", str(alfworld_copy)]) == 0
    capsys.readouterr()
    games = level_games("L0", "eval")
    damaged = [damage(alfworld_copy, game) for game in games[:7]]
    assert main(["data", "verify", "alfworld", "--root", str(alfworld_copy)]) == 1
    out = capsys.readouterr()
    text = out.out + out.err
    # the count is right, the contents are not: the split and its first damaged games named
    assert "7 of 140 files differ from the release" in text
    for path in damaged[:5]:
        assert str(path) in text
    assert "and 2 more" in text
    assert str(damaged[5]) not in text


def test_evaluate_refuses_a_damaged_eval_game_and_writes_nothing(alfworld_copy, tmp_path,
                                                                 capsys):
    game = level_games("L0", "eval")[3]
    path = damage(alfworld_copy, game)
    out = tmp_path / "record.json"
    assert main(["evaluate", "--env", "derl/ALFWorld-v0", "--level", "L0", "--policy", "oracle",
                 "--limit", "1", "--output", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "alfworld/json_2.1.1:L0-eval" in err and "differ from the data catalogue" in err
    assert f"the files that differ: {path}" in err
    assert "`derl-bench data download alfworld --force`" in err
    assert not out.exists()


def test_the_env_refuses_to_load_a_damaged_game(alfworld_copy):
    game = level_games("L0", "eval")[0]
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval", games=[game])
    env.reset(options={"game": game})  # the release's game loads
    load_game.cache_clear()
    path = damage(alfworld_copy, game)
    with pytest.raises(DataFileError, match="its content differs from the release's game"
                       ) as caught:
        env.reset(options={"game": game})
    assert str(caught.value).startswith(str(path))
    env.close()


@pytest.mark.parametrize("recipe", ["commands", "llm"])
def test_train_refuses_a_damaged_training_game_before_writing(alfworld_copy, tmp_path, capsys,
                                                              recipe):
    from derl_bench.policies.command_model import init_command_model

    path = damage(alfworld_copy, level_games("L0", "train")[100])
    if recipe == "commands":
        base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
        args = [str(REPO / "baselines" / "alfworld-commands-pilot.yaml"), f"model={base}"]
    else:
        args = [str(REPO / "baselines" / "alfworld-outcome.yaml"), "model=tiny", "steps=1"]
    run = tmp_path / "run"
    assert main(["train", *args, "--output", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{alfworld_copy / 'alfworld' / 'json_2.1.1' / 'train'} differs from the data " \
           "catalogue (tree checksum " in err
    assert f"the files that differ: {path}" in err
    assert not run.exists()
