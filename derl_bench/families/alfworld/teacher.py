"""A searching teacher for ALFWorld: it plays from what a text agent could know.

The walkthrough and the planner (``expert=True``) know where every object is hidden, so their
first command often goes straight to a receptacle nothing in the text points at; a student that
sees only text cannot infer such a command. :class:`SearchTeacher` plays like alfworld's
hand-coded TextWorld expert (the one BUTLER was trained with) instead: it visits receptacles in
the order of a prior over where each object type starts (counted on the train split, see
:data:`PRIOR_PATH`), opens closed ones, remembers what it has seen, takes the object, heats,
cools or cleans it, or turns on a lamp, and puts it in a receptacle of the target type.

What it knows, and from where:

- the task (type, object, target) from the game's folder name, as upstream reads it from
  ``traj_data.json`` (:class:`TaskParams`);
- the receptacles and every object's whereabouts only from the text an agent is shown: the
  intro, the feedback of each command actually executed (:meth:`SearchTeacher.observe`) and the
  admissible commands (a listed ``take X from R`` says ``X`` is in ``R``);
- a few predicates of the engine's state through :func:`engine_view`, which hands over only
  :data:`VISIBLE_PREDICATES` (what it holds, which receptacles are open, whether an object is
  hot, cool or clean, whether a lamp is on), never ``inreceptacle`` or ``objectatlocation``.

So where it searches next depends only on what an agent has seen, and its memory follows every
executed command, whoever chose it: DAgger can ask it for a label in any state a learner
reached (``ALFWorldEnv(teacher=True)`` puts that label in ``info["teacher_action"]``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRIOR_PATH = Path(__file__).with_name("receptacle_prior.json")
"""Object-type x receptacle-type counts over the train games (``scripts/alfworld_prior.py``)."""

VISIBLE_PREDICATES = frozenset({"holds", "opened", "ishot", "iscool", "isclean", "istoggled"})
"""The engine predicates the teacher may read: none of them says where an object lies."""

Facts = Callable[[], frozenset[tuple[str, str]]]
"""Returns the visible predicates now, as ``(predicate, display name)`` pairs."""

# Which appliance each transforming task needs, the command's verb and the predicate it sets.
_PROCESS = {
    "pick_heat_then_place_in_recep": ("heat", ("microwave",), "ishot"),
    "pick_cool_then_place_in_recep": ("cool", ("fridge",), "iscool"),
    # Some bathrooms have a bathtub basin and no sink basin; both clean.
    "pick_clean_then_place_in_recep": ("clean", ("sinkbasin", "bathtubbasin"), "isclean"),
}
LAMP = "desklamp"  # every look_at_obj_in_light goal asks for a desk lamp (checked on the release)

_NAME = r"[a-z]+ \d+"
_INTRO = re.compile(r"Looking quickly around you, you see ([^\n]*)")
_ITEM = re.compile(rf"\ban? ({_NAME})")
_LISTING = re.compile(
    rf"(?:On the (?P<on>{_NAME}), you see|The (?P<inside>{_NAME}) is open\. In it, you see) "
    r"(?P<items>[^.]*)\.")
_ARRIVE = re.compile(rf"You arrive at ({_NAME})\.")
_FACING = re.compile(rf"You are facing the ({_NAME})\.")
_PICK = re.compile(rf"You pick up the ({_NAME}) from the ({_NAME})\.")
_MOVE = re.compile(rf"You move the ({_NAME}) to the ({_NAME})\.")
_TAKE_COMMAND = re.compile(rf"take ({_NAME}) from ({_NAME})$")


def kind(name: str) -> str:
    """``"countertop 2"`` -> ``"countertop"``."""
    return name.rsplit(" ", 1)[0]


def _number(name: str) -> int:
    tail = name.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


@dataclass(frozen=True)
class TaskParams:
    """What upstream's expert reads from ``traj_data.json``, here from the game's folder name
    ``<task type>-<Object>-<Mrecep>-<Receptacle>-<scene>`` (lower-cased to the text's words).

    ``target`` is the receptacle type to fill, or the lamp for ``look_at_obj_in_light``;
    ``mrecep`` is the movable receptacle, ``None`` for the six task types of the benchmark.
    """

    task_type: str
    obj: str
    target: str
    mrecep: str | None = None

    @classmethod
    def from_game_id(cls, game_id: str) -> TaskParams:
        parts = game_id.split("/")
        folder = parts[-2] if len(parts) >= 2 else parts[0]
        fields = folder.split("-")
        if len(fields) < 4:
            raise ValueError(f"not an ALFWorld task folder: {folder!r}")
        task_type, obj, mrecep, target = fields[:4]
        return cls(task_type=task_type, obj=obj.lower(), target=target.lower(),
                   mrecep=None if mrecep == "None" else mrecep.lower())

    @property
    def count(self) -> int:
        return 2 if self.task_type == "pick_two_obj_and_place" else 1


@dataclass(frozen=True)
class Prior:
    """How many objects of a type start, on average, in one receptacle of a type, and what
    fraction of a receptacle type has a door or lid (``openable``)."""

    objects: dict[str, dict[str, int]]
    receptacles: dict[str, int]
    openable: dict[str, float]

    def per_receptacle(self, obj: str, receptacle: str) -> float:
        instances = self.receptacles.get(receptacle, 0)
        found = self.objects.get(obj, {}).get(receptacle, 0)
        # An unseen pairing is unlikely, not impossible: the search still gets there last.
        return (found + 0.01) / (instances + 1.0)


@functools.cache
def load_prior(path: Path = PRIOR_PATH) -> Prior:
    data = json.loads(path.read_text(encoding="utf-8"))
    return Prior(objects=data["objects"], receptacles=data["receptacles"],
                 openable=data["openable"])


def engine_view(engine: Any) -> Facts:
    """The visible predicates of ``engine``'s current state (see :data:`VISIBLE_PREDICATES`).

    This is the teacher's only door into the engine: facts naming hidden locations stay out.
    """
    infos = engine.entity_infos

    def facts() -> frozenset[tuple[str, str]]:
        return frozenset(
            (fact[0], infos[fact[-1]].name)
            for fact in engine.facts
            if fact[0] in VISIBLE_PREDICATES and fact[-1] in infos
        )

    return facts


@dataclass
class Memory:
    """What the agent has been shown so far."""

    receptacles: list[str] = field(default_factory=list)
    contents: dict[str, set[str]] = field(default_factory=dict)  # last known, per receptacle
    looked: set[str] = field(default_factory=set)  # receptacles whose contents were listed
    doorless: set[str] = field(default_factory=set)  # listed as "On the ...": nothing to open
    here: str | None = None


class SearchTeacher:
    """Plays one ALFWorld game from text and a few visible predicates (module docstring).

    Call :meth:`reset` with the intro, then after every executed command (the teacher's or
    anyone's) :meth:`observe` with the command and its feedback; :meth:`act` returns the
    teacher's next command, always one of the admissible commands it is given.
    """

    def __init__(self, task: TaskParams, facts: Facts, prior: Prior | None = None) -> None:
        self.task = task
        self._facts = facts
        self.prior = prior or load_prior()
        self.memory = Memory()

    # ------------------------------------------------------------------ memory
    def reset(self, observation: str) -> None:
        """Start a game: read the receptacles from the intro."""
        self.memory = Memory()
        match = _INTRO.search(observation)
        if match:
            self.memory.receptacles = _ITEM.findall(match[1])
        self._read(observation)

    def observe(self, command: str, observation: str) -> None:
        """Update the memory with an executed command and the game's answer to it.

        The answer names what changed (``You pick up the mug 1 from the cabinet 2.``), so it
        alone is read; a command the game refused (``Nothing happens.``) changes nothing.
        """
        del command
        self._read(observation)

    def _read(self, text: str) -> None:
        memory = self.memory
        for pattern in (_ARRIVE, _FACING):
            match = pattern.search(text)
            if match:
                memory.here = match[1]
        for match in _LISTING.finditer(text):
            receptacle = match["on"] or match["inside"]
            items = set() if match["items"].strip() == "nothing" else set(
                _ITEM.findall(match["items"]))
            memory.contents[receptacle] = items
            memory.looked.add(receptacle)
            if match["on"]:
                memory.doorless.add(receptacle)
        for match in _PICK.finditer(text):
            memory.contents.setdefault(match[2], set()).discard(match[1])
        for match in _MOVE.finditer(text):
            memory.contents.setdefault(match[2], set()).add(match[1])

    def _read_commands(self, admissible: Iterable[str]) -> None:
        # The agent is shown the admissible commands: each ``take`` reveals where an object is.
        for command in admissible:
            match = _TAKE_COMMAND.match(command)
            if match:
                obj, receptacle = match[1], match[2]
                for others in self.memory.contents.values():
                    others.discard(obj)
                self.memory.contents.setdefault(receptacle, set()).add(obj)

    # ------------------------------------------------------------------ policy
    def act(self, admissible: Sequence[str]) -> str:
        """The teacher's next command, one of ``admissible``."""
        self._read_commands(admissible)
        allowed = set(admissible)
        command = self._choose(allowed)
        if command in allowed:
            return command
        # A stale memory (the learner changed something unseen) can name a command that is not
        # possible here; searching on is always possible.
        fallback = self._search(allowed, {self.task.obj})
        return fallback if fallback in allowed else sorted(allowed)[0]

    def _choose(self, allowed: set[str]) -> str:
        facts = self._facts()
        held = next((name for pred, name in facts if pred == "holds"), None)
        task = self.task
        if held is not None and kind(held) == task.obj:
            return self._with_object(held, facts, allowed)
        if held is not None:  # the learner picked up something else: put it down first
            drop = self._first_allowed(allowed, (f"move {held} to {r}"
                                                 for r in self._here_first()))
            if drop:
                return drop
            return self._search(allowed, {task.obj}, facts)
        found = self._known_objects()
        if found:
            obj, receptacle = found[0]
            take = f"take {obj} from {receptacle}"
            if take in allowed:
                return take
            if self.memory.here == receptacle and self._closed(receptacle, facts):
                return f"open {receptacle}"
            return f"go to {receptacle}"
        wanted = {task.obj}
        if task.task_type == "look_at_obj_in_light" and not self._lamps():
            wanted.add(LAMP)
        return self._search(allowed, wanted, facts)

    def _with_object(self, held: str, facts: frozenset[tuple[str, str]],
                     allowed: set[str]) -> str:
        """Holding an object of the task's type: transform it, light it or put it away."""
        task = self.task
        if task.task_type in _PROCESS:
            verb, appliances, done = _PROCESS[task.task_type]
            if (done, held) not in facts:
                instances = [r for kinds in appliances for r in self.memory.receptacles
                             if kind(r) == kinds]
                use = self._first_allowed(allowed, (f"{verb} {held} with {r}" for r in instances))
                if use:
                    return use
                if instances:
                    return f"go to {instances[0]}"
        if task.task_type == "look_at_obj_in_light":
            lamps = self._lamps()
            if not lamps:
                return self._search(allowed, {LAMP}, facts)
            lamp, receptacle = lamps[0]
            if ("istoggled", lamp) not in facts and f"use {lamp}" in allowed:
                return f"use {lamp}"
            return f"go to {receptacle}"
        target = self._target(allowed, facts)
        move = f"move {held} to {target}"
        if move in allowed:
            return move
        if self.memory.here == target and self._closed(target, facts):
            return f"open {target}"
        return f"go to {target}"

    def _search(self, allowed: set[str], wanted: set[str],
                facts: frozenset[tuple[str, str]] | None = None) -> str:
        """Open the receptacle here or go to the next one, by prior mass per step."""
        facts = self._facts() if facts is None else facts
        memory = self.memory
        skip_targets = self.task.task_type == "pick_and_place_simple" and wanted == {self.task.obj}
        best: tuple[float, bool, str, int] | None = None
        choice = ""
        for receptacle in memory.receptacles:
            if receptacle in memory.looked:
                continue
            mass = sum(self.prior.per_receptacle(w, kind(receptacle)) for w in wanted)
            if skip_targets and kind(receptacle) == self.task.target:
                mass = 0.0  # the goal would already hold if the object started there
            if receptacle == memory.here:
                steps, command = 1.0, f"open {receptacle}"
            else:
                # Expected steps: going there, and opening it if it has a door (unknown yet:
                # the type's share of doors; some cabinets are open shelves).
                steps = 1.0 + (self.prior.openable.get(kind(receptacle), 0.0)
                               if self._closed(receptacle, facts) else 0.0)
                command = f"go to {receptacle}"
            if command not in allowed:
                continue
            rank = (-mass / steps, receptacle != memory.here, kind(receptacle),
                    _number(receptacle))
            if best is None or rank < best:
                best, choice = rank, command
        if choice:
            return choice
        # Everything has been looked into (or the learner moved things unseen): look again
        # where nothing was listed lately, first the likeliest receptacles.
        memory.looked.clear()
        goes = sorted((c for c in allowed if c.startswith("go to ")),
                      key=lambda c: -sum(self.prior.per_receptacle(w, kind(c[6:]))
                                         for w in wanted))
        return goes[0] if goes else "look"

    # ------------------------------------------------------------------ helpers
    def _closed(self, receptacle: str, facts: frozenset[tuple[str, str]]) -> bool:
        """Whether to open ``receptacle`` before looking in or putting into it (asked where the
        agent is, whose text said whether it is closed)."""
        return (self.prior.openable.get(kind(receptacle), 0.0) > 0
                and ("opened", receptacle) not in facts
                and receptacle not in self.memory.doorless)

    def _here_first(self) -> list[str]:
        here = self.memory.here
        return ([here] if here else []) + [r for r in self.memory.receptacles if r != here]

    @staticmethod
    def _first_allowed(allowed: set[str], commands: Iterable[str]) -> str | None:
        return next((c for c in commands if c in allowed), None)

    def _known_objects(self) -> list[tuple[str, str]]:
        """Objects of the task's type the agent has seen and still has to move, with where
        they are, nearest first (here, then in the order of the room's receptacles)."""
        task = self.task
        placed = self._goal_receptacle() if task.count > 1 else None
        out = []
        for receptacle in self._here_first():
            if receptacle == placed:
                continue
            for obj in sorted(self.memory.contents.get(receptacle, ()), key=_number):
                if kind(obj) == task.obj:
                    out.append((obj, receptacle))
        return out

    def _lamps(self) -> list[tuple[str, str]]:
        return [(obj, receptacle) for receptacle in self._here_first()
                for obj in sorted(self.memory.contents.get(receptacle, ()))
                if kind(obj) == LAMP]

    def _count_in(self, receptacle: str) -> int:
        return sum(kind(o) == self.task.obj for o in self.memory.contents.get(receptacle, ()))

    def _goal_receptacle(self) -> str | None:
        """For pick-two: the target receptacle that already holds the most objects of the type
        (both must end up in the same one); ``None`` while none holds any."""
        best = max(self._targets(), key=self._count_in, default=None)
        return best if best is not None and self._count_in(best) > 0 else None

    def _targets(self) -> list[str]:
        return [r for r in self.memory.receptacles if kind(r) == self.task.target]

    def _target(self, allowed: set[str], facts: frozenset[tuple[str, str]]) -> str:
        """Where to put the object: for pick-two the receptacle that holds the first one;
        else one where the move is possible now, else the cheapest to reach."""
        targets = self._targets()
        if not targets:
            return self.memory.here or ""
        goal = self._goal_receptacle() if self.task.count > 1 else None
        if goal is not None:
            return goal

        def cost(receptacle: str) -> tuple[int, int, int]:
            movable = any(c.startswith("move ") and c.endswith(f" to {receptacle}")
                          for c in allowed)
            return (0 if movable else 1, int(self._closed(receptacle, facts)),
                    _number(receptacle))

        return min(targets, key=cost)
