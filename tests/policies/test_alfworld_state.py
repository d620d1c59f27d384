"""The compact ALFWorld state and the word-level tokenizer, on real games of every task type.

The state is built from text only: it is checked against what the game itself says is
possible (the admissible commands, text too), rebuilt from recorded text pairs alone, and its
module imports nothing of the env.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import gymnasium as gym
import pytest

import derl_bench  # noqa: F401  (registers the envs)
from derl_bench.families.alfworld import compact_state
from derl_bench.families.alfworld.compact_state import CompactState, group, parse_goal
from derl_bench.families.alfworld.vocab import alfworld_vocabulary, build_alfworld_tokenizer
from derl_bench.family import family_spec
from derl_bench.policies.command_model import EOC, UNK, CommandParts, init_command_model

TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep",
              "pick_two_obj_and_place")


def _sample_games(per_type: int = 2) -> list[str]:
    from derl_bench.families.alfworld import games

    ids = list(games.iter_games("L0", "eval"))
    return [g for t in TASK_TYPES for g in [i for i in ids if i.split("/")[1].startswith(t)]
            [:per_type]]


@pytest.fixture(scope="module")
def episodes(data_root):
    """Recorded text of real episodes: the walkthrough with seeded detours (admissible
    commands off the plan and commands that do nothing), as (first observation, admissible
    commands, steps)."""
    env = gym.make("derl/ALFWorld-v0", level="L0", split="eval", max_episode_steps=60)
    rng = random.Random(0)
    recorded = []
    for game in _sample_games():
        obs, info = env.reset(options={"game": game})
        record = {"obs": obs, "admissible": info["admissible_commands"], "steps": []}
        for command in info["walkthrough"]:
            detour = rng.random()
            # Detours that leave the walkthrough winning: wandering off or looking around just
            # before the walkthrough goes somewhere anyway.
            harmless = [c for c in info["admissible_commands"]
                        if c.split()[0] in ("go", "examine", "look", "inventory")]
            if detour < 0.3 and command.startswith("go to "):
                plan = [rng.choice(harmless), command]
            elif detour < 0.35:
                plan = ["take " + command, command]  # not admissible: "Nothing happens."
            else:
                plan = [command]
            for cmd in plan:
                obs, _, terminated, truncated, info = env.step(cmd)
                record["steps"].append((cmd, obs, info["admissible_commands"]))
                if terminated or truncated:
                    break
            if terminated or truncated:
                break
        record["won"] = bool(info["won"])
        recorded.append(record)
    env.close()
    return recorded


def _states(record: dict) -> list[tuple[CompactState, list[str]]]:
    """The state after the reset and after every step, with the commands admissible then."""
    state = CompactState().reset(record["obs"], {"admissible_commands": record["admissible"]})
    out = [(_copy(state), record["admissible"])]
    for command, obs, admissible in record["steps"]:
        state.update(command, obs, {"admissible_commands": admissible})
        out.append((_copy(state), admissible))
    return out


def _copy(state: CompactState) -> CompactState:
    import copy

    return copy.deepcopy(state)


def test_the_state_module_reads_no_engine():
    tree = ast.parse(Path(compact_state.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m.split(".")[0] for m in imported} <= {"__future__", "re", "collections",
                                                   "dataclasses", "typing"}


def test_state_agrees_with_what_the_game_allows(episodes):
    """Every admissible command is consistent with the state parsed from the text: the
    receptacles it can go to are known, what it can take is where the state saw it, what it
    can move is what the state says is held, what it can open is known closed."""
    checked = 0
    for record in episodes:
        for state, admissible in _states(record):
            assert state.goal is not None, state.goal_text
            for cmd in admissible:
                words = cmd.split()
                if cmd.startswith("go to "):
                    assert cmd[6:] in state.receptacles
                elif words[0] == "take":
                    # Receptacles can share a spot (a coffeemachine on a countertop), so one
                    # may take from a neighbour never shown; what was shown must be right.
                    obj, where = " ".join(words[1:3]), " ".join(words[4:6])
                    if where == state.location or where in state.contents:
                        assert obj in state.contents[where], cmd
                elif words[0] in ("move", "heat", "cool", "clean"):
                    assert state.held == " ".join(words[1:3]), cmd
                elif words[0] in ("open", "close"):
                    where = " ".join(words[1:3])
                    if where == state.location or where in state.openness:
                        assert state.openness[where] is (words[0] == "close"), cmd
                checked += 1
    assert checked > 1000


def test_state_rebuilds_from_recorded_text_alone(episodes):
    """Only the observation strings and the commands sent are needed: replaying the recorded
    text (no env in sight) gives the same state at every step."""
    for record in episodes:
        online = [s.render() for s, _ in _states(record)]
        state = CompactState().reset(record["obs"])
        replayed = [state.render()]
        for command, obs, _ in record["steps"]:
            replayed.append(state.update(command, obs).render())
        # Without the admissible commands the room list comes from the first observation only;
        # in these games it already names every receptacle.
        assert replayed == online


def test_state_remembers_and_marks_failures(episodes):
    assert all(record["won"] for record in episodes)  # every feedback kind was seen
    texts = [s.render() for record in episodes for s, _ in _states(record)]
    assert any(" failed\n" in t for t in texts) and any(" ok\n" in t for t in texts)
    assert any("\nseen : " in t for t in texts)  # relevant objects remembered elsewhere
    assert any("hot" in t for t in texts) and any("clean" in t.split("\n", 2)[1] for t in texts)
    for t in texts:
        assert t.startswith("goal : ") and t.endswith("\n>")


def test_goals_of_every_template_parse():
    assert parse_goal("put two newspaper in drawer").verb == "two"
    assert parse_goal("find two pen and put them in dresser").words() == "put two pen in dresser"
    assert parse_goal("heat some egg and put it in countertop").words() == (
        "heat egg then put in countertop")
    assert parse_goal("put a cool tomato in microwave").verb == "cool"
    assert parse_goal("examine the keychain with the desklamp").words() == (
        "look at keychain under desklamp")
    assert parse_goal("put some soapbottle on cabinet.").words() == "put soapbottle in cabinet"
    assert parse_goal("dance") is None
    assert group(["drawer 2", "cabinet 10", "drawer 1"]) == "drawer 1 2 , cabinet 10"


@pytest.fixture(scope="module")
def tokenizer():
    return build_alfworld_tokenizer()


def test_state_token_counts_and_vocabulary(episodes, tokenizer):
    counts = []
    for record in episodes:
        for state, _ in _states(record):
            ids = tokenizer(state.render())["input_ids"]
            assert tokenizer.unk_token_id not in ids, state.render()
            counts.append(len(ids))
    assert 20 <= min(counts) and max(counts) <= 150, (min(counts), max(counts))


def test_every_admissible_command_is_in_vocabulary(episodes, tokenizer):
    for record in episodes:
        for _, admissible in _states(record):
            for cmd in admissible:
                tokens = tokenizer.convert_ids_to_tokens(tokenizer(cmd)["input_ids"])
                assert UNK not in tokens and tokens == cmd.split(), cmd
                assert tokenizer.decode(tokenizer(cmd)["input_ids"]) == cmd


def test_prompt_and_command_tokenise_as_a_concatenation(episodes, tokenizer):
    pairs = 0
    for record in episodes:
        for state, admissible in _states(record):
            prompt = state.render()
            for cmd in admissible:
                joined = tokenizer(prompt + " " + cmd)["input_ids"]
                assert joined == tokenizer(prompt)["input_ids"] + tokenizer(cmd)["input_ids"]
                pairs += 1
    assert pairs > 1000


def test_every_type_of_the_games_is_one_token(data_root, tokenizer):
    """The object and receptacle types declared in the games' PDDL problems are all words of
    the vocabulary (the vocabulary is built from alfworld's files, not from the games)."""
    import json
    import re

    from derl_bench.families.alfworld import games

    vocabulary = set(alfworld_vocabulary())
    for game in _sample_games(per_type=4):
        problem = json.loads(games.game_path(game).read_text())["pddl_problem"]
        types = {t.lower() for t in re.findall(r"\b(\w+)Type - [or]type", problem)}
        assert types and types <= vocabulary, types - vocabulary


def test_a_saved_model_folder_loads_with_autotokenizer(tmp_path, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = init_command_model(tmp_path / "alfworld-cmd", "derl/ALFWorld-v0")
    loaded = AutoTokenizer.from_pretrained(path)
    text = "goal : put mug in cabinet > take mug 10 from countertop 1"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.convert_tokens_to_ids(EOC) == tokenizer.convert_tokens_to_ids(EOC)
    assert (loaded.bos_token, loaded.eos_token, loaded.pad_token) == ("<bos>", "<eos>", "<pad>")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.vocab_size == len(loaded) == len(alfworld_vocabulary())


def test_the_card_hands_the_state_and_the_tokenizer_to_the_command_stack():
    parts = family_spec("derl/ALFWorld-v0").part("commands")
    assert isinstance(parts, CommandParts)
    assert parts.state is CompactState and parts.tokenizer is build_alfworld_tokenizer
    assert not family_spec("derl/ScienceWorld-v0").has_part("commands")


def _tried_states(record: dict) -> list[str]:
    from derl_bench.families.alfworld.compact_state import TriedState

    state = TriedState().reset(record["obs"], {"admissible_commands": record["admissible"]})
    texts = [state.render()]
    for command, obs, admissible in record["steps"]:
        state.update(command, obs, {"admissible_commands": admissible})
        texts.append(state.render())
    return texts


def test_the_tried_view_is_the_compact_state_and_the_commands_tried_from_it(episodes):
    from derl_bench.families.alfworld.compact_state import TriedState

    for record in episodes:
        compact = [s.render() for s, _ in _states(record)]
        tried = _tried_states(record)
        # the same state, one line more where something was tried from the same situation
        for c, t in zip(compact, tried, strict=True):
            assert [line for line in t.splitlines() if not line.startswith("tried : ")] == (
                c.splitlines())
    state = TriedState().reset(episodes[0]["obs"])
    first = state.render()
    assert "tried" not in first
    # going round: examine the room twice, each time from the state the first left
    state.update("look", "You are in the middle of a room. Looking quickly around you, "
                         "you see nothing.")
    assert "\ntried : look\nlast : look ok\n>" in state.render()
    state.update("inventory", "You are not carrying anything.")
    assert "tried : look , inventory\n" in state.render()
    state.update("look", "You are in the middle of a room.")
    assert state.render().count("tried :") == 1 and "look , inventory" in state.render()
    # a new episode forgets what the last one tried
    assert state.reset(episodes[0]["obs"]).render() == first


def test_the_tried_view_keeps_every_token_id_of_the_compact_view(episodes, tokenizer):
    from derl_bench.families.alfworld.vocab import build_tried_tokenizer

    tried = build_tried_tokenizer()
    assert len(tried) == len(tokenizer) + 1
    assert {w: tried.convert_tokens_to_ids(w) for w in tokenizer.get_vocab()} == (
        tokenizer.get_vocab())
    for record in episodes:
        for text in _tried_states(record):
            assert tried.unk_token_id not in tried(text)["input_ids"], text


def test_a_model_folder_names_its_view_and_a_view_the_family_lacks_is_refused(tmp_path):
    import json

    from derl_bench.cards import CardError
    from derl_bench.evaluation.schema import COMMAND_INTERFACES, POLICY_INTERFACES
    from derl_bench.families.alfworld.compact_state import TriedState
    from derl_bench.family import resolve_family
    from derl_bench.policies.command_model import VIEW_FILE, command_parts, model_view

    parts = command_parts(resolve_family("derl/ALFWorld-v0"))
    assert parts.view(None) is parts and parts.view("compact") is parts
    assert parts.view("tried").state is TriedState
    for view in (parts, *parts.views):
        assert view.interface in COMMAND_INTERFACES and view.interface in POLICY_INTERFACES
    with pytest.raises(CardError, match="offers: compact, tried"):
        parts.view("history")
    plain = init_command_model(tmp_path / "plain", "derl/ALFWorld-v0")
    assert not (plain / VIEW_FILE).exists() and model_view(plain) is None
    tried = init_command_model(tmp_path / "tried", "derl/ALFWorld-v0", view="tried")
    assert model_view(tried) == "tried"
    assert json.loads((tried / VIEW_FILE).read_text()) == {"view": "tried"}
    (tried / VIEW_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="is not the model's view"):
        model_view(tried)
    with pytest.raises(CardError, match="no command view 'history'"):
        init_command_model(tmp_path / "history", "derl/ALFWorld-v0", view="history")
    assert not (tmp_path / "history").exists()
