"""derl/ALFWorld-v0 on the real ALFWorld games: API, determinism, robustness, manifests."""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import derl_bench  # noqa: F401  (registers the envs)
from benchmarks.alfworld_upstream import make_alfred_tw_env
from derl_bench.cards import load_card, read_manifest, sha256_lines
from derl_bench.families.alfworld import NOTHING_HAPPENS, ALFWorldEnv, EngineError, games
from derl_bench.families.alfworld.game import load_game

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def eval_env(data_root):
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval")
    yield env
    env.close()


# --------------------------------------------------------------------------- manifests


def test_manifests_match_the_release_and_their_checksums(data_root):
    card = load_card("alfworld")
    for level in games.LEVELS:
        for split in games.SPLITS:
            name = games.manifest_name(level, split)
            entries = read_manifest("alfworld", name)  # verifies count and sha256
            assert sha256_lines(entries) == card["manifests"][name]["sha256"]
            assert entries == games.level_games_from_release(level, split, data_root)


def test_level_splits_follow_the_protocol(data_root):
    counts = {(lv, sp): len(games.level_games(lv, sp))
              for lv in games.LEVELS for sp in games.SPLITS}
    assert counts == {("L0", "train"): 3553, ("L0", "validation"): 200, ("L0", "eval"): 140,
                      ("L1", "train"): 3553, ("L1", "validation"): 200, ("L1", "eval"): 134,
                      ("L2", "train"): 2207, ("L2", "validation"): 127, ("L2", "eval"): 38}
    for level in games.LEVELS:
        train, validation, evaluation = (set(games.level_games(level, s)) for s in games.SPLITS)
        assert not train & evaluation and not validation & (train | evaluation)
        assert all(g.startswith("valid_train/") for g in validation)
    assert {games.task_type_index(g) for g in games.level_games("L2", "validation")} == {1, 2, 3, 4}
    assert all(g.startswith("valid_seen/") for g in games.level_games("L0", "eval"))
    assert all(g.startswith("valid_unseen/") for g in games.level_games("L1", "eval"))
    assert {games.task_type_index(g) for g in games.level_games("L2", "eval")} == {5, 6}
    assert {games.task_type_index(g) for g in games.level_games("L2", "train")} == {1, 2, 3, 4}
    assert all(g.startswith("valid_unseen/") for g in games.level_games("L2", "eval"))


def test_a_tampered_manifest_is_rejected(tmp_path, monkeypatch):
    from derl_bench import cards, family

    fake = tmp_path / "envs"
    (fake / "manifests" / "alfworld").mkdir(parents=True)
    (fake / "alfworld.md").write_text((REPO / "envs" / "alfworld.md").read_text())
    lines = (REPO / "envs/manifests/alfworld/L2-eval.txt").read_text().splitlines()
    (fake / "manifests/alfworld/L2-eval.txt").write_text("\n".join(lines[:-1] + [lines[0]]) + "\n")
    monkeypatch.setattr(cards, "cards_dir", lambda: fake)
    family.reload()
    try:
        with pytest.raises(cards.CardError, match="sha256"):
            cards.read_manifest("alfworld", "L2-eval")
    finally:
        monkeypatch.undo()
        family.reload()


def test_games_iterates_in_manifest_order(data_root):
    assert list(ALFWorldEnv.games("L2", "eval")) == read_manifest("alfworld", "L2-eval")


# --------------------------------------------------------------------------- the API


def test_check_env_passes(data_root):
    env = gym.make("derl/ALFWorld-v0", level="L2", split="eval")
    try:
        check_env(env.unwrapped, skip_render_check=False)
    finally:
        env.close()


def test_reset_info_and_walkthrough_win(eval_env):
    game_id = games.level_games("L0", "eval")[0]
    obs, info = eval_env.reset(options={"game": game_id})
    assert "Your task is to: " in obs
    assert info["game_id"] == game_id and info["level"] == "L0" and info["split"] == "eval"
    assert info["task_type"] == game_id.split("/")[1].split("-")[0]
    assert info["walkthrough"] and info["won"] is False
    assert set(info["primitives"]) >= {"success", "goal_progress", "action_admissible"}
    for i, command in enumerate(info["walkthrough"]):
        assert command in info["admissible_commands"]
        obs, reward, terminated, truncated, info = eval_env.step(command)
        last = i == len(info.get("walkthrough", [])) or terminated
        assert reward == (1.0 if terminated else 0.0)
    assert terminated and not truncated and info["won"] and last
    assert info["primitives"]["success"] == 1.0 and info["primitives"]["goal_progress"] == 1.0
    assert "walkthrough" not in info


def test_truncation_at_the_step_cap_is_never_a_win(data_root):
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval", max_episode_steps=3)
    try:
        env.reset(seed=1)
        outcomes = [env.step("look") for _ in range(3)]
        assert [o[3] for o in outcomes] == [False, False, True]
        assert all(o[1] == 0.0 and not o[2] for o in outcomes)
        assert outcomes[-1][4]["primitives"]["success"] == 0.0
        assert [o[4]["primitives"]["step_fraction"] for o in outcomes] == [1 / 3, 2 / 3, 1.0]
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["derl/ALFWorld-v0", "derl/ScienceWorld-v0"])
@pytest.mark.parametrize("cap", [None, 5])
def test_the_step_cap_is_one_timelimit_inside_the_observers(data_root, env_id, cap):
    from derl_bench.cards import load_card
    from derl_bench.family import family_spec
    from derl_bench.observers import ObserveWrapper

    spec = family_spec(env_id)
    assert gym.spec(env_id).max_episode_steps == spec.max_steps == load_card(spec.name)["max_steps"]
    env = gym.make(env_id) if cap is None else gym.make(env_id, max_episode_steps=cap)
    try:
        layers = []
        inner = env
        while isinstance(inner, gym.Wrapper):
            layers.append(inner)
            inner = inner.env
        limits = [w._max_episode_steps for w in layers if isinstance(w, gym.wrappers.TimeLimit)]
        assert limits == [cap or spec.max_steps]
        observing = [i for i, w in enumerate(layers) if isinstance(w, ObserveWrapper)]
        timing = next(i for i, w in enumerate(layers) if isinstance(w, gym.wrappers.TimeLimit))
        assert observing == [0] and timing > 0  # the observers wrap the one cap and see it
        assert env.max_steps == limits[0]
        assert not hasattr(env.unwrapped, "max_steps")  # the bare env counts no cap of its own
    finally:
        env.close()


def test_max_steps_is_not_an_env_argument():
    with pytest.raises(TypeError, match="max_episode_steps=5"):
        gym.make("derl/ALFWorld-v0", max_steps=5)


def test_reset_seed_picks_the_same_game(eval_env):
    ids = [eval_env.reset(seed=s)[1]["game_id"] for s in (7, 8, 7)]
    assert ids[0] == ids[2]
    assert len({eval_env.reset(seed=s)[1]["game_id"] for s in range(6)}) > 2


def _random_admissible_run(seed: int, episodes: int = 3, game_seed: int | None = None,
                           max_steps: int = 12) -> list[tuple]:
    """Seeded random admissible commands over ``episodes`` games, reset with seeds
    ``game_seed`` (default ``seed``), ``game_seed + 1``, ...: each step's command, observation,
    reward, flags, admissible commands and primitives."""
    env = gym.make("derl/ALFWorld-v0", level="L1", split="eval", max_episode_steps=max_steps)
    rng = random.Random(seed)
    trajectory = []
    try:
        for episode in range(episodes):
            obs, info = env.reset(seed=(seed if game_seed is None else game_seed) + episode)
            trajectory.append(("reset", info["game_id"], obs))
            done = False
            while not done:
                command = rng.choice(info["admissible_commands"])
                obs, reward, terminated, truncated, info = env.step(command)
                done = terminated or truncated
                trajectory.append((command, obs, reward, terminated, truncated,
                                   tuple(info["admissible_commands"]),
                                   tuple(sorted(info["primitives"].items()))))
    finally:
        env.close()
    return trajectory


def test_seeded_random_admissible_agent_is_reproducible(data_root):
    first, second = _random_admissible_run(5), _random_admissible_run(5)
    assert first == second
    assert len(first) > 3


def test_a_games_later_starts_play_as_its_first(data_root):
    # A game's first start builds its initial state, intro and ground goal; later starts reuse
    # them, and must play exactly as a first start does (play changes the state's own sets).
    load_game.cache_clear()
    first = _random_admissible_run(3, episodes=4)
    assert _random_admissible_run(3, episodes=4) == first
    assert any(dict(step[-1])["goal_progress"] > 0 for step in first if len(step) == 7)


def test_unknown_game_and_option_are_clear_errors(eval_env):
    with pytest.raises(games.UnknownGameError):
        eval_env.reset(options={"game": "valid_seen/no-such-game/trial_0"})
    with pytest.raises(games.UnknownGameError):
        eval_env.reset(options={"game": "../../etc/passwd"})
    with pytest.raises(ValueError, match="unknown reset options"):
        eval_env.reset(options={"level": "L2"})
    with pytest.raises(ValueError, match="level"):
        ALFWorldEnv(level="L3")


# --------------------------------------------------------------------------- robustness


BAD_ACTIONS = [
    "",
    "   ",
    "go to " + "x" * 1_000_000,
    "\ud800\udfff go to sinkbasin 1",
    "take\x00 apple\x1b[31m 1",
    "please find me a sandwich",
    b"\xff\xfe\xfd",
    "GO TO COUNTERTOP 1;rm -rf /",
]


@pytest.mark.parametrize("action", BAD_ACTIONS, ids=range(len(BAD_ACTIONS)))
def test_bad_actions_give_a_valid_step(eval_env, action):
    obs, info = eval_env.reset(seed=0)
    admissible = list(info["admissible_commands"])
    out = eval_env.step(action)
    assert len(out) == 5
    obs, reward, terminated, truncated, info = out
    assert obs == NOTHING_HAPPENS and reward == 0.0 and not terminated and not truncated
    assert info["primitives"]["action_admissible"] == 0.0
    assert info["primitives"]["action_effective"] == 0.0
    assert info["admissible_commands"] == admissible  # the state did not change


def test_crashed_engine_fails_clearly_then_recovers_on_reset(data_root):
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval")
    try:
        _, info = env.reset(seed=2)
        bare = env.unwrapped
        # Break the engine the way a failing native call would: its state is gone.
        bare._engine.state = None
        with pytest.raises(EngineError, match="call reset"):
            env.step(info["walkthrough"][0])
        with pytest.raises(EngineError, match="crashed"):
            env.step("look")
        _, info = env.reset(seed=2)
        for command in info["walkthrough"]:
            _, reward, terminated, _, info = env.step(command)
        assert terminated and reward == 1.0
    finally:
        env.close()


def test_close_releases_the_engine_and_vector_workers(data_root):
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval")
    env.reset(seed=0)
    env.close()
    assert env.unwrapped._engine is None
    env.close()  # idempotent
    vec = gym.vector.AsyncVectorEnv(
        [lambda: gym.make("derl/ALFWorld-v0", level="L2", split="eval")] * 2
    )
    vec.reset(seed=0)
    vec.step(["look", "inventory"])
    vec.close()
    assert multiprocessing.active_children() == []


def test_nothing_is_written_to_home(data_root, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    script = textwrap.dedent(
        """
        import gymnasium as gym, derl_bench
        from derl_bench.families.alfworld import games
        from benchmarks.alfworld_upstream import make_alfred_tw_env
        game = games.level_games("L0", "eval")[0]
        upstream = make_alfred_tw_env([str(games.game_path(game))], asynchronous=False)
        upstream.reset()
        upstream.close()
        env = gym.make("derl/ALFWorld-v0", level="L0", split="eval", expert=True)
        obs, info = env.reset(seed=0)
        obs, _, _, _, info = env.step(info["admissible_commands"][0])  # off the plan: planner
        assert info["expert_plan"]
        env.close()
        """
    )
    environ = {k: v for k, v in os.environ.items() if k not in ("ALFWORLD_DATA", "XDG_CACHE_HOME")}
    environ.update(HOME=str(home), DERL_BENCH_DATA=str(data_root), PYTHONPATH=str(REPO))
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    subprocess.run([sys.executable, "-c", script], check=True, env=environ, cwd=workdir,
                   timeout=300)
    assert list(home.rglob("*")) == []
    assert list(workdir.rglob("*")) == []  # the planner leaves no plan files behind


# --------------------------------------------------------------------------- same game as alfworld


def _group_run(samples: int = 8, games: int = 3) -> list[tuple]:
    """Games played ``samples`` times each with seeded random commands, as GRPO groups are."""
    return [step for sample in range(samples * games)
            for step in _random_admissible_run(sample, 1, game_seed=sample // samples,
                                               max_steps=30)]


def test_reused_feedback_is_the_text_a_derivation_gives(data_root, monkeypatch):
    # Feedback is kept by (game, operator, fluent facts); a group's samples reach the same
    # states by other paths, and must read what deriving the text there again reads.
    from derl_bench.families.alfworld import engine

    engine._FEEDBACK.clear()
    kept = _group_run()
    steps = sum(step[0] != "reset" for step in kept)
    assert len(engine._FEEDBACK) < steps  # some steps were served from what was kept

    class Forgetful(dict):
        def get(self, key, default=None):
            return None

    monkeypatch.setattr(engine, "_FEEDBACK", Forgetful())
    assert _group_run() == kept


def test_text_and_commands_match_alfworlds_own_env(data_root):
    """Replaying walkthroughs and seeded random commands gives alfworld's exact observations,
    admissible commands and win flags."""
    rng = random.Random(0)
    picked = games.level_games("L1", "eval")[::34] + games.level_games("L0", "eval")[::70]
    paths = [str(games.game_path(g, data_root)) for g in picked]
    argv = sys.argv[:]
    upstream = make_alfred_tw_env(paths, asynchronous=False)
    env = ALFWorldEnv(level="L0", split="eval")
    try:
        for _ in paths:
            theirs, infos = upstream.reset()
            path = infos["extra.gamefile"][0]
            game_id = str(Path(path).relative_to(games.games_root(data_root)).parent)
            ours, info = env.reset(options={"game": game_id})
            assert ours == theirs[0]
            assert info["admissible_commands"] == infos["admissible_commands"][0]
            commands = [rng.choice(info["admissible_commands"]) for _ in range(4)] + ["jump"]
            for command in commands + load_game(path).walkthrough:
                theirs, _, _, infos = upstream.step([command])
                ours, _, terminated, _, info = env.step(command)
                assert ours == theirs[0], command
                assert info["admissible_commands"] == infos["admissible_commands"][0]
                assert info["won"] == infos["won"][0]
                if terminated:
                    break
    finally:
        sys.argv = argv
        upstream.close()
        env.close()


def test_expert_plan_wins_from_where_the_agent_is(data_root):
    env = gym.make("derl/ALFWorld-v0", level="L1", split="eval", expert=True, max_episode_steps=60)
    rng = random.Random(3)
    try:
        for seed in (0, 1):
            _, info = env.reset(seed=seed)
            assert info["expert_plan"] == info["walkthrough"]
            for _ in range(2):  # leave the plan
                _, _, terminated, _, info = env.step(rng.choice(info["admissible_commands"]))
            plans = 0
            while not terminated:
                plan = info["expert_plan"]
                assert plan and plan[0] in info["admissible_commands"]
                _, _, terminated, truncated, info = env.step(plan[0])
                assert not truncated
                plans += 1
            assert info["won"] and info["expert_plan"] == [] and plans <= 30
    finally:
        env.close()
