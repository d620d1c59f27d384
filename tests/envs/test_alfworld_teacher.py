"""The searching ALFWorld teacher: it wins real games, labels states a learner reached, and
searches only where what the agent has seen points."""

from __future__ import annotations

import ast
import json
import random
import re
import runpy
from pathlib import Path

import gymnasium as gym
import pytest

import derl_bench  # noqa: F401  (registers the envs)
from derl_bench.data.root import dataset_dir
from derl_bench.families.alfworld import games, teacher
from derl_bench.families.alfworld.engine import Engine
from derl_bench.families.alfworld.game import load_game
from derl_bench.families.alfworld.teacher import SearchTeacher, TaskParams, engine_view
from derl_bench.families.alfworld.upstream import ensure_alfworld_data

CAP = 30


def _first_of_each_type(level: str) -> dict[str, int]:
    first: dict[str, int] = {}
    for index, game_id in enumerate(games.level_games(level, "eval")):
        first.setdefault(games.task_type(game_id), index)
    return first


@pytest.fixture(scope="module")
def teacher_env(data_root):
    env = gym.make("derl/ALFWorld-v0", level="L1", split="eval", teacher=True,
                   max_episode_steps=CAP)
    yield env
    env.close()


def test_the_teacher_wins_a_game_of_every_type(teacher_env):
    picked = _first_of_each_type("L1")
    assert len(picked) == 6
    for task_type, index in picked.items():
        _, info = teacher_env.reset(options={"index": index})
        done = False
        while not done:
            label = info["teacher_action"]
            assert label in info["admissible_commands"], (task_type, label)
            _, reward, terminated, truncated, info = teacher_env.step(label)
            done = terminated or truncated
        assert terminated and reward == 1.0, task_type
        assert info["teacher_action"] == ""


def test_labels_stay_admissible_and_win_after_random_detours(teacher_env):
    """DAgger's situation: a learner's random commands, then the teacher takes over."""
    rng = random.Random(7)
    picked = _first_of_each_type("L1")
    for task_type in ("pick_two_obj_and_place", "pick_heat_then_place_in_recep",
                      "look_at_obj_in_light"):
        _, info = teacher_env.reset(options={"index": picked[task_type]})
        for _ in range(6):  # the learner wanders: takes, moves, opens, whatever it picks
            assert info["teacher_action"] in info["admissible_commands"]
            _, _, terminated, _, info = teacher_env.step(rng.choice(info["admissible_commands"]))
            if terminated:
                break
        steps = 0
        while not terminated:
            assert info["teacher_action"] in info["admissible_commands"]
            _, _, terminated, truncated, info = teacher_env.step(info["teacher_action"])
            steps += 1
            assert not truncated, task_type
        assert info["won"] and steps <= CAP - 6


# --------------------------------------------------------------------------- no peeking


# A game where the book turns up only at the teacher's seventh receptacle.
SEARCHED_GAME = ("valid_seen/pick_and_place_simple-Book-None-Sofa-229/"
                 "trial_T20190907_042856_259139")


def _rehide(path: Path, obj_type: str, receptacle_id: str, out: Path) -> Path:
    """A copy of a game where every object of ``obj_type`` starts in ``receptacle_id``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    problem = data["pddl_problem"]
    found = re.search(rf"\(receptacleAtLocation ({re.escape(receptacle_id)}) (\S+)\)", problem,
                      re.IGNORECASE)
    assert found, receptacle_id
    dest, location = found[1], found[2]
    pattern = rf"{re.escape(obj_type)}_bar_\S+"
    problem = re.sub(rf"\(inReceptacle ({pattern}) \S+\)", rf"(inReceptacle \1 {dest})",
                     problem, flags=re.IGNORECASE)
    problem = re.sub(rf"\(objectAtLocation ({pattern}) \S+\)",
                     rf"(objectAtLocation \1 {location})", problem, flags=re.IGNORECASE)
    data["pddl_problem"] = problem
    out.mkdir(parents=True)
    target = out / games.GAME_FILE
    target.write_text(json.dumps(data), encoding="utf-8")
    return target


def _search(path: Path, game_id: str, steps: int) -> tuple[list[str], int | None, Engine]:
    """The teacher's first commands on a game, and the step at which the task's object first
    showed in the text the agent gets (observation or admissible commands)."""
    engine = Engine()
    task = TaskParams.from_game_id(game_id)
    intro = engine.start(load_game(str(path)))
    coach = SearchTeacher(task, engine_view(engine))
    coach.reset(intro)
    shows = re.compile(rf"\b{task.obj} \d")
    commands, seen_at = [], None
    for step in range(steps):
        command = coach.act(engine.admissible_commands)
        commands.append(command)
        feedback, _ = engine.step(command)
        coach.observe(command, feedback)
        if seen_at is None and (shows.search(feedback)
                                or any(shows.search(c) for c in engine.admissible_commands)):
            seen_at = step
    return commands, seen_at, engine


def test_the_search_order_does_not_depend_on_where_the_object_is_hidden(data_root, tmp_path):
    ensure_alfworld_data(dataset_dir(games.FAMILY, data_root))
    game_id = SEARCHED_GAME
    assert game_id in games.level_games("L0", "eval")
    path = games.game_path(game_id, data_root)
    task = TaskParams.from_game_id(game_id)
    commands, seen_at, engine = _search(path, game_id, 12)
    assert seen_at is not None and seen_at >= 3  # a search of several receptacles to compare
    visited = {c.removeprefix("go to ") for c in commands[: seen_at + 1] if c.startswith("go to")}
    # Hide the objects where the teacher had not looked yet, somewhere open (no lid to lift).
    names = {info.name: key for key, info in engine.entity_infos.items()}
    elsewhere = [r for r in engine.admissible_commands if r.startswith("go to ")]
    openable = teacher.load_prior().openable
    dest = next(c.removeprefix("go to ") for c in reversed(elsewhere)
                if c.removeprefix("go to ") not in visited
                and teacher.kind(c.removeprefix("go to ")) not in openable
                and teacher.kind(c.removeprefix("go to ")) != task.target)
    engine.close()
    moved = _rehide(path, game_id.split("/")[1].split("-")[1], names[dest],
                    tmp_path / "moved" / "trial")
    other, other_seen_at, other_engine = _search(moved, game_id, 12)
    other_engine.close()
    assert other_seen_at is None or other_seen_at > seen_at
    # Same commands until the original game showed the object; then the searches part.
    assert other[: seen_at + 1] == commands[: seen_at + 1]
    assert other != commands


def test_the_teacher_reads_the_engine_only_through_its_visible_predicates():
    """Where an object lies is never read: only engine_view touches the engine's facts, and it
    keeps the predicates of VISIBLE_PREDICATES, which name no location."""
    assert not {"inreceptacle", "objectatlocation", "atlocation"} & teacher.VISIBLE_PREDICATES
    tree = ast.parse(Path(teacher.__file__).read_text(encoding="utf-8"))
    view = next(n for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef) and n.name == "engine_view")
    inside = {id(n) for n in ast.walk(view)}
    engine_attributes = {"facts", "fluent_facts", "state", "game", "expert_plan", "walkthrough",
                         "static_facts", "sas"}
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in engine_attributes:
            assert id(node) in inside, ast.unparse(node)
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            assert "location" not in str(node.value).lower(), node.value
            assert "inreceptacle" not in str(node.value).lower(), node.value


def test_task_params_come_from_the_folder_name():
    params = TaskParams.from_game_id(
        "valid_seen/pick_heat_then_place_in_recep-Egg-None-CounterTop-1/trial_T1")
    assert params == TaskParams("pick_heat_then_place_in_recep", "egg", "countertop", None)
    assert TaskParams.from_game_id(
        "train/pick_two_obj_and_place-CD-None-Drawer-304/trial_x").count == 2


def test_the_prior_counts_initial_placements_of_the_train_games(data_root):
    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts/alfworld_prior.py"))
    problem = """(:init
        (objectType Egg_bar_1 EggType) (objectType Egg_bar_2 EggType)
        (receptacleType Fridge_bar_1 FridgeType) (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleType Cabinet_bar_2 CabinetType) (openable Fridge_bar_1)
        (openable Cabinet_bar_1)
        (inReceptacle Egg_bar_1 Fridge_bar_1) (inReceptacle Egg_bar_2 Fridge_bar_1))
        (:goal (inReceptacle Egg_bar_1 Cabinet_bar_2))"""
    pairs, receptacles, openable = script["count_game"](problem)
    assert pairs == {("egg", "fridge"): 2}  # the goal's atoms are not the initial state
    assert receptacles == {"fridge": 1, "cabinet": 2}
    assert openable == {"fridge": 1, "cabinet": 1}
    prior = json.loads(teacher.PRIOR_PATH.read_text(encoding="utf-8"))
    assert prior["games"] == len(games.discover_games("train", data_root))
    assert teacher.load_prior().per_receptacle("egg", "fridge") > teacher.load_prior(
    ).per_receptacle("egg", "bed")
