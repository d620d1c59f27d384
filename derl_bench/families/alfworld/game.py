"""A game's data before play: its PDDL translated to SAS, its grammar parsed and its goal,
built once per game and process."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import pickle
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from derl_bench.families.alfworld.goal import Goal, parse_goal
from derl_bench.families.alfworld.textgen import parsed_symbols
from derl_bench.families.alfworld.upstream import import_engine


@dataclass
class GameData:
    """What a game needs before play, built once per game and process (see :func:`load_game`)."""

    path: str
    walkthrough: list[str]
    task: Any  # fast-downward's parsed task
    sas: str
    logic: Any  # textworld.envs.pddl.logic.GameLogic
    goal: Goal
    objects_by_type: dict[str, list[str]]
    static_facts: set[tuple[str, ...]]
    commands: dict[str, str] = field(default_factory=dict)  # operator name -> command text
    sas_replan: str | None = None
    start: Any = None
    """What every start of the game would rebuild the same: the initial state's facts, entity
    names, intro text and ground goal, kept by the engine at the first start
    (``engine.GameStart``)."""


def _pddl2sas(domain: str, problem: str, optimize: bool = False) -> tuple[Any, str]:
    import fast_downward

    argv = sys.argv  # fast-downward's translator overwrites sys.argv; give it back
    try:
        return fast_downward.pddl2sas(domain, problem, optimize=optimize)
    finally:
        sys.argv = argv


TRANSLATIONS = ".sas-cache"
"""The folder beside a release's ``json_2.1.1`` that keeps each game's translation."""


def _translation_file(path: str, raw: bytes) -> Path | None:
    """Where the translation of the game file ``path`` (bytes ``raw``) is kept, or None for a
    game outside a release layout. The name hashes the file's bytes, fast-downward's version
    and Python's, so an edited game or another translator never reads a stale entry."""
    import fast_downward

    for folder in Path(path).parents:
        if folder.name.startswith("json_"):
            key = hashlib.sha256(raw)
            key.update(f"{getattr(fast_downward, '__version__', '')}|{sys.version_info[:2]}"
                       .encode())
            return folder.parent / TRANSLATIONS / f"{key.hexdigest()}.pickle"
    return None


def _translate(path: str, raw: bytes, data: dict[str, Any]) -> tuple[Any, str]:
    """fast-downward's translation of a game, from the disk cache when it holds it.

    Translating the PDDL to SAS costs most of a game's load (about 0.6-0.9 s; reading the
    pickle back about 3 ms), and training plays the same games in many processes (rollout
    workers, inner runs, evaluations), so each game is translated once per data root. A
    cache that cannot be read is translated again; one that cannot be written is skipped.
    """
    cached = _translation_file(path, raw)
    if cached is not None and cached.is_file():
        try:
            with open(cached, "rb") as fh:
                task, sas = pickle.load(fh)
            return task, sas
        except Exception:  # a damaged entry: translate again and replace it
            pass
    task, sas = _pddl2sas(data["pddl_domain"], data["pddl_problem"])
    if cached is not None:
        staged: Path | None = None
        try:
            cached.parent.mkdir(exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=cached.parent, delete=False,
                                             suffix=".tmp") as fh:
                staged = Path(fh.name)
                pickle.dump((task, sas), fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(staged, cached)  # whole or not at all, whoever writes it too
        except OSError:  # a read-only data root: play without the cache
            if staged is not None:
                staged.unlink(missing_ok=True)
    return task, sas


GAME_FIELDS = ("pddl_domain", "pddl_problem", "grammar")
"""What every ``game.tw-pddl`` holds as text; a game without them cannot be played."""


def _game_json(path: str, raw: bytes) -> dict[str, Any]:
    """The game file's JSON; :class:`~derl_bench.data.read.DataFileError` naming the file when
    it is cut short, edited into something else or not a game."""
    from derl_bench.data.read import damaged

    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise damaged(Path(path), f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    except ValueError as err:
        raise damaged(Path(path), f"not a valid ALFWorld game file: not JSON ({err})") from None
    missing = [name for name in GAME_FIELDS
               if not isinstance(data, dict) or not isinstance(data.get(name), str)]
    if missing:
        raise damaged(Path(path), f"not a valid ALFWorld game file: no {', '.join(missing)}")
    return data


GAMES_CACHED = 256
"""Games :func:`load_game` keeps per process: a GRPO run's pool (200) and its validation games
are each read once per run, not again at every reset."""


def _check_release_bytes(path: str, raw: bytes) -> None:
    """Refuse a release game whose bytes are not the release's: a changed byte can leave a
    game that parses and plays, but is not the game its id names (a win may become unwinnable)."""
    from derl_bench.data.read import damaged
    from derl_bench.families.alfworld.data import game_digest_problem
    from derl_bench.families.alfworld.games import GAMES_DIR

    parts = Path(path).parts
    if len(parts) >= 5 and parts[-5] == GAMES_DIR:
        problem = game_digest_problem("/".join(parts[-4:-1]), raw)
        if problem is not None:
            raise damaged(Path(path), problem)


@functools.lru_cache(maxsize=GAMES_CACHED)
def load_game(path: str) -> GameData:
    """Read and translate one ``game.tw-pddl`` file (cached per process, and its translation
    on disk beside the release, see :func:`_translate`). A file that is not a game (cut short,
    not JSON, without its PDDL or grammar, or with PDDL that does not parse) raises
    :class:`~derl_bench.data.read.DataFileError` naming it."""
    from derl_bench.data.read import damaged

    with open(path, "rb") as fh:
        raw = fh.read()
    data = _game_json(path, raw)
    _check_release_bytes(path, raw)
    import_engine()
    from fast_downward.translate.pddl import conditions

    try:
        task, sas = _translate(path, raw, data)
        logic = _game_logic(data["pddl_domain"], data["grammar"])
    except Exception as err:  # the engine imported: what fails now is this file's text
        raise damaged(Path(path), f"not a playable ALFWorld game: its PDDL or grammar does "
                                  f"not parse ({type(err).__name__}: {err})") from err
    fluents = {eff.literal.predicate for action in task.actions for eff in action.effects}
    objects_by_type: dict[str, list[str]] = defaultdict(list)
    for obj in task.objects:
        objects_by_type[obj.type_name].append(obj.name)
    static = {
        (atom.predicate, *atom.args)
        for atom in task.init
        if isinstance(atom, conditions.Atom)
        and atom.predicate != "="
        and atom.predicate not in fluents
    }
    return GameData(
        path=path,
        walkthrough=list(data.get("walkthrough") or []),
        task=task,
        sas=sas,
        logic=logic,
        goal=parse_goal(data["pddl_problem"], fluents),
        objects_by_type=dict(objects_by_type),
        static_facts=static,
    )


# Games differ only in their grammar's "task" line; the rest of the grammar is parsed once.
_TASK_RULE = re.compile(r'("task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*)("(?:[^"\\]|\\.)*")(\s*\}\s*\])')
_TASK_PLACEHOLDER = '"#task placeholder#"'


@functools.lru_cache(maxsize=4)
def _shared_logic(domain: str, grammar_without_task: str) -> Any:
    return import_engine().GameLogic(domain=domain, grammar=grammar_without_task)


def _game_logic(domain: str, grammar: str) -> Any:
    """``GameLogic(domain, grammar)``, reusing the parse of everything but the task line."""
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar, ProductionRule

    match = _TASK_RULE.search(grammar)
    if match is None or len(_TASK_RULE.findall(grammar)) != 1:
        return import_engine().GameLogic(domain=domain, grammar=grammar)
    shared = _shared_logic(
        domain, _TASK_RULE.sub(lambda m: m[1] + _TASK_PLACEHOLDER + m[3], grammar))
    logic = copy.copy(shared)
    logic.grammar = ContextSensitiveGrammar()
    logic.grammar._rules = defaultdict(list, shared.grammar._rules)
    task_text = json.loads(match[2])
    logic.grammar._rules["task"] = [
        ProductionRule(lhs="task", rhs=list(parsed_symbols(task_text)), condition="")
    ]
    return logic


def replan_sas(game: GameData) -> str:
    if game.sas_replan is None:
        with open(game.path, encoding="utf-8") as fh:
            data = json.load(fh)
        game.sas_replan = _pddl2sas(data["pddl_domain"], data["pddl_problem"], optimize=True)[1]
    return game.sas_replan


def parse_atom(name: str) -> tuple[bool, tuple[str, ...]]:
    """``"Atom pred(a, b)"`` -> ``(True, ("pred", "a", "b"))``; ``NegatedAtom`` -> False."""
    kind, rest = name.split(" ", 1)
    pred, args = rest.split("(", 1)
    args = args[:-1]
    return kind == "Atom", (pred, *(a for a in args.split(", ") if a))
