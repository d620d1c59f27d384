"""A compact ALFWorld state built from the game's text alone, for a small command policy.

A policy that sees only the last few observations forgets what it has seen, and the full
observation history is hundreds of tokens of room lists and shelf contents. :class:`CompactState`
keeps what a household task needs, parsed from the observation strings and the commands that
were executed (never from the engine), and renders it in 60-150 words::

    goal : clean soapbar then put in drawer
    hold : soapbar 1 clean
    at : drawer 4 open
    see : nothing
    tools : sinkbasin 1 2
    seen : soapbar 1 @ bathtubbasin 1
    visited : bathtubbasin 1 , drawer 4 , sinkbasin 2
    unvisited : countertop 1 2 , drawer 1 2 3 5 6 7 8 , garbagecan 1 , ...
    last : open drawer 4 ok
    >

Every rendered word is one token of the ALFWorld tokenizer
(:mod:`derl_bench.families.alfworld.vocab`): object and receptacle types, instance numbers, the
commands' verbs and the fixed words below. Lines start with a header word (``goal :``) so the
structure survives a whitespace tokenizer, which drops newlines.

The parser follows the text of ALFWorld's grammar (``alfred.twl2``) in this release:
``You arrive at cabinet 1. The cabinet 1 is closed.``, ``On the countertop 1, you see a mug 1,
and a knife 2.``, ``You pick up the mug 1 from the countertop 1.``, ``You move the mug 1 to the
sinkbasin 1.``, ``You heat the mug 1 using the microwave 1.``, ``You turn on the desklamp 1.``,
``Nothing happens.``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NOTHING_HAPPENS = "Nothing happens."
"""The game's answer to a command that does nothing (also ``derl_bench.families.alfworld``'s; kept
here so the state depends on the text only)."""

STATE_WORDS = (
    "goal", "hold", "at", "see", "tools", "seen", "visited", "unvisited", "unopened", "last",
    "ok", "failed", "nothing", "unknown", "room", "open", "closed", "other", "then", "put", "in",
    "two", "clean", "heat", "cool", "look", "under", "hot", "cold", "on", "off", ":", ",", "@",
    "+", ">",
)
"""The words :meth:`CompactState.render` writes besides type names, numbers and commands."""

LAMPS = ("desklamp", "floorlamp")
TOOL_OF_VERB = {"clean": ("sinkbasin",), "heat": ("microwave",), "cool": ("fridge",),
                "look": LAMPS}
"""The receptacles or objects a goal's verb needs (look: a lamp to switch on)."""

_ENTITY = re.compile(r"\b([a-z]+) (\d+)\b")
_GOAL_LINE = re.compile(r"Your task is to: (.*?)\.?\s*$", re.MULTILINE)
_ROOM_LIST = re.compile(r"Looking quickly around you, you see (.*?)\.\s*$", re.MULTILINE)

# The release's goal sentences (alfworld's task descriptions), most specific first; each gives
# the verb, the object type and the target (receptacle type, or the lamp for ``look``).
_GOALS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), verb) for pattern, verb in (
        (r"^(?:find|put) two (\w+) and put them in (\w+)$", "two"),
        (r"^put two (\w+) (?:in|on) (\w+)$", "two"),
        (r"^put (?:a|an|some) clean (\w+) (?:in|on) (\w+)$", "clean"),
        (r"^put (?:a|an|some) hot (\w+) (?:in|on) (\w+)$", "heat"),
        (r"^put (?:a|an|some) cool (\w+) (?:in|on) (\w+)$", "cool"),
        (r"^(clean|heat|cool) (?:a|an|some) (\w+) and put it (?:in|on) (\w+)$", ""),
        (r"^put (?:a|an|some) (\w+) (?:in|on) (\w+)$", "put"),
        (r"^look at (\w+) under the (\w+)$", "look"),
        (r"^examine the (\w+) with the (\w+)$", "look"),
    )
)


@dataclass(frozen=True)
class Goal:
    """A goal sentence, parsed: ``verb`` is put, two, clean, heat, cool or look."""

    verb: str
    obj: str
    target: str

    def words(self) -> str:
        if self.verb == "look":
            return f"look at {self.obj} under {self.target}"
        if self.verb == "two":
            return f"put two {self.obj} in {self.target}"
        if self.verb == "put":
            return f"put {self.obj} in {self.target}"
        return f"{self.verb} {self.obj} then put in {self.target}"


def parse_goal(sentence: str) -> Goal | None:
    """The goal of a ``Your task is to: ...`` sentence (without the prefix), or None when it
    follows none of the release's templates."""
    text = sentence.strip().rstrip(".").strip().lower()
    for pattern, verb in _GOALS:
        match = pattern.match(text)
        if match:
            groups = match.groups()
            if not verb:
                verb, groups = groups[0], groups[1:]
            return Goal(verb=verb, obj=groups[0], target=groups[1])
    return None


def entities(text: str) -> list[str]:
    """``"a mug 1, and a knife 2"`` -> ``["mug 1", "knife 2"]`` (names as the game prints them)."""
    return [f"{kind} {number}" for kind, number in _ENTITY.findall(text)]


def kind_of(name: str) -> str:
    return name.rsplit(" ", 1)[0]


def _number(name: str) -> int:
    return int(name.rsplit(" ", 1)[1])


def group(names: Iterable[str]) -> str:
    """``["drawer 2", "cabinet 1", "drawer 1"]`` -> ``"cabinet 1 , drawer 1 2"``: one type word
    per type, its numbers ascending, types in first-seen order (compact and still one token per
    type and number)."""
    by_kind: dict[str, list[int]] = {}
    for name in names:
        by_kind.setdefault(kind_of(name), []).append(_number(name))
    return " , ".join(f"{kind} {' '.join(str(n) for n in sorted(set(nums)))}"
                      for kind, nums in by_kind.items())


@dataclass
class CompactState:
    """What an agent knows of an ALFWorld episode, updated from the text it sees.

    Call :meth:`reset` with the first observation, then :meth:`update` after every step with
    the command sent and the game's answer; :meth:`render` gives the state as a few lines of
    vocabulary words. ``info`` is accepted on both for the env's API but only its
    ``admissible_commands`` (text) are read, to list receptacles the room description missed.
    """

    goal: Goal | None = None
    goal_text: str = ""
    receptacles: list[str] = field(default_factory=list)  # the room list, in the game's order
    location: str = ""  # "" while in the middle of the room
    visited: list[str] = field(default_factory=list)
    contents: dict[str, list[str]] = field(default_factory=dict)  # receptacle -> objects seen
    # Objects the agent put into receptacles whose contents it never saw listed.
    placed: dict[str, str] = field(default_factory=dict)
    openness: dict[str, bool] = field(default_factory=dict)  # openable receptacle -> is open
    held: str = ""
    properties: dict[str, list[str]] = field(default_factory=dict)  # object -> hot/clean/cold/on
    last_command: str = ""
    last_failed: bool = False

    # ------------------------------------------------------------------ updates
    def reset(self, observation: str, info: Mapping[str, Any] | None = None) -> CompactState:
        """Start from the game's first observation (room list and goal)."""
        self.__dict__.update(type(self)().__dict__)  # forget the previous episode
        goal_match = _GOAL_LINE.search(observation)
        self.goal_text = goal_match.group(1).strip() if goal_match else ""
        self.goal = parse_goal(self.goal_text)
        room = _ROOM_LIST.search(observation)
        self.receptacles = entities(room.group(1)) if room else []
        self._add_receptacles_from(info)
        return self

    def update(self, command: str, observation: str,
               info: Mapping[str, Any] | None = None) -> CompactState:
        """Apply one executed ``command`` and the game's ``observation`` in answer to it."""
        command = " ".join(command.split())
        self.last_command = command
        text = observation.strip()
        self.last_failed = text == NOTHING_HAPPENS
        if not self.last_failed:
            self._apply(command, text)
        self._add_receptacles_from(info)
        return self

    def _apply(self, command: str, text: str) -> None:
        # Each pattern is one feedback rule of the grammar; the sentences of an answer are
        # matched independently (arrive/open are followed by an examine sentence).
        if m := re.match(r"You arrive at ([a-z]+ \d+)\.", text):
            self.location = m.group(1)
            if self.location not in self.visited:
                self.visited.append(self.location)
            self._note_receptacle(self.location)
        if m := re.match(r"You open the ([a-z]+ \d+)\.", text):
            self.openness[m.group(1)] = True
        if m := re.match(r"You close the ([a-z]+ \d+)\.", text):
            self.openness[m.group(1)] = False
        if m := re.search(r"The ([a-z]+ \d+) is closed\.", text):
            self.openness[m.group(1)] = False
        if m := re.search(r"(?:On the ([a-z]+ \d+), you see|The ([a-z]+ \d+) is open\. In it, "
                          r"you see) (.*?)\.?$", text):
            where = m.group(1) or m.group(2)
            if m.group(2):
                self.openness[where] = True
            self.contents[where] = entities(m.group(3))
            self._note_receptacle(where)
        if m := re.search(r"You pick up the ([a-z]+ \d+)(?: from the ([a-z]+ \d+))?\.", text):
            self.held = m.group(1)
            self.placed.pop(self.held, None)
            for objects in self.contents.values():
                if self.held in objects:
                    objects.remove(self.held)
        if m := re.search(r"You (?:move|put) the ([a-z]+ \d+) (?:to|in) the ([a-z]+ \d+)\.", text):
            obj, where = m.groups()
            if where in self.contents:
                self.contents[where].append(obj)
            else:  # the rest of its contents is still unknown
                self.placed[obj] = where
            if self.held == obj:
                self.held = ""
        if m := re.match(r"You (heat|cool|clean) the ([a-z]+ \d+) using the ([a-z]+ \d+)\.", text):
            verb, obj, _ = m.groups()
            word = {"heat": "hot", "cool": "cold", "clean": "clean"}[verb]
            self._set_property(obj, word, drop={"hot": "cold", "cold": "hot"}.get(word))
        if m := re.match(r"You turn (on|off) the ([a-z]+ \d+)\.", text):
            state, obj = m.groups()
            self._set_property(obj, state, drop="off" if state == "on" else "on")
        if m := re.match(r"You are carrying: (.*?)\.?$", text):
            found = entities(m.group(1))
            self.held = found[0] if found else self.held
        if text.startswith("You are not carrying anything"):
            self.held = ""
        if text.startswith("You are in the middle of a room"):
            self.location = ""

    def _set_property(self, obj: str, word: str, drop: str | None) -> None:
        props = self.properties.setdefault(obj, [])
        if drop in props:
            props.remove(drop)
        if word not in props:
            props.append(word)

    def _note_receptacle(self, name: str) -> None:
        if name not in self.receptacles:
            self.receptacles.append(name)

    def _add_receptacles_from(self, info: Mapping[str, Any] | None) -> None:
        # ``go to X`` commands name every receptacle; the room description may omit none, but
        # reading them costs nothing and keeps "unvisited" complete.
        for command in (info or {}).get("admissible_commands", ()):
            if command.startswith("go to "):
                self._note_receptacle(command[len("go to "):])

    # ------------------------------------------------------------------ reading
    def relevant_types(self) -> set[str]:
        """Types the goal names, plus the tools its verb needs."""
        if self.goal is None:
            return set(re.findall(r"[a-z]+", self.goal_text.lower()))
        kinds = {self.goal.obj, self.goal.target}
        kinds.update(TOOL_OF_VERB.get(self.goal.verb, ()))
        if self.goal.verb == "look":
            kinds.update(LAMPS)
        return kinds

    def where_seen(self) -> dict[str, str]:
        """Relevant objects last seen in a receptacle -> that receptacle (memory)."""
        relevant = self.relevant_types()
        seen = {obj: where for where, objects in self.contents.items() for obj in objects}
        seen.update(self.placed)
        return {obj: where for obj, where in seen.items() if kind_of(obj) in relevant}

    def render(self) -> str:
        """The state as lines of vocabulary words (see the module docstring)."""
        relevant = self.relevant_types()
        lines = [f"goal : {self.goal.words() if self.goal else self.goal_text.lower()}"]
        lines.append(f"hold : {self._describe(self.held) if self.held else 'nothing'}")
        if self.location:
            door = self.openness.get(self.location)
            lines.append(f"at : {self.location}"
                         + ("" if door is None else " open" if door else " closed"))
            objects = self.contents.get(self.location)
            if objects is None:  # closed and not yet opened: its contents are unknown
                lines.append("see : unknown")
            else:
                shown = [self._describe(o) for o in objects if kind_of(o) in relevant]
                rest = len(objects) - len(shown)
                lines.append("see : " + (" , ".join(shown) if shown else "nothing")
                             + (f" + {rest} other" if rest else ""))
        else:
            lines.append("at : room")
        needed = TOOL_OF_VERB.get(self.goal.verb, ()) if self.goal else ()
        tools = [group(r for r in self.receptacles if kind_of(r) in needed)]
        # A lamp switched on where no listing showed it (``use`` works from next to it).
        located = set(self.where_seen())
        tools += [self._describe(obj) for obj in self.properties
                  if kind_of(obj) in LAMPS and obj not in located]
        tools = [t for t in tools if t]
        if tools:
            lines.append("tools : " + " , ".join(tools))
        elsewhere = [f"{self._describe(obj)} @ {where}"
                     for obj, where in self.where_seen().items() if where != self.location]
        if elsewhere:
            lines.append("seen : " + " , ".join(elsewhere))
        if self.visited:
            lines.append(f"visited : {group(self.visited)}")
        unvisited = [r for r in self.receptacles if r not in self.visited]
        if unvisited:
            lines.append(f"unvisited : {group(unvisited)}")
        # Receptacles found closed and never opened: visited, yet their contents are unknown.
        unopened = [r for r in self.visited if r not in self.contents]
        if unopened:
            lines.append(f"unopened : {group(unopened)}")
        if self.last_command:
            lines.append(f"last : {self.last_command} {'failed' if self.last_failed else 'ok'}")
        lines.append(">")
        return "\n".join(lines)

    def _describe(self, obj: str) -> str:
        return " ".join([obj, *self.properties.get(obj, ())])


TRIED_WORDS = ("tried",)
"""The words :class:`TriedState` writes besides :data:`STATE_WORDS` and commands."""


def _situation(lines: list[str]) -> str:
    """A rendered compact state without its ``last :`` line: what a command was tried from."""
    return "\n".join(line for line in lines if not line.startswith("last :"))


@dataclass
class TriedState(CompactState):
    """The compact state and what the agent already did in the situation it is in.

    A deterministic policy over :class:`CompactState` that comes back to a state it has seen
    chooses the same command again, forever: the compact state keeps no memory of what was
    tried. This view adds one line, ``tried :``, listing (in the order first executed) the
    commands executed before from a state that rendered the same, the ``last :`` line aside::

        tried : go to cabinet 1 , examine countertop 1

    so a state never comes back with the same command unmentioned, and a policy can learn to
    leave a place it is going round in. Read from the text alone, as the compact state.

        >>> state = TriedState().reset("You are in the middle of a room. Looking quickly "
        ...                            "around you, you see a cabinet 1, and a sofa 1.\\n\\n"
        ...                            "Your task is to: put a pillow in sofa.")
        >>> _ = state.update("look", "You are in the middle of a room.")
        >>> state.render().splitlines()[-3:]
        ['tried : look', 'last : look ok', '>']
    """

    tried: dict[str, list[str]] = field(default_factory=dict)

    def update(self, command: str, observation: str,
               info: Mapping[str, Any] | None = None) -> TriedState:
        command = " ".join(command.split())
        done = self.tried.setdefault(_situation(CompactState.render(self).splitlines()), [])
        if command not in done:
            done.append(command)
        super().update(command, observation, info)
        return self

    def render(self) -> str:
        lines = CompactState.render(self).splitlines()
        done = self.tried.get(_situation(lines))
        if done:
            at = next((i for i, line in enumerate(lines) if line.startswith("last :")),
                      len(lines) - 1)
            lines.insert(at, "tried : " + " , ".join(done))
        return "\n".join(lines)

