"""The engine: a lean driver of TextWorld's PDDL engine for ALFWorld games.

alfworld's ``AlfredTWEnv`` plays a game through ``textworld.gym`` → ``PddlEnv`` and wrappers.
That stack translates the game's PDDL to SAS four times per episode (twice on load, twice on
reset, one of them only for the planner) and, on every step, re-derives the text of every
admissible command through the grammar and copies all facts. The game logic is the same
everywhere, so this module keeps the engine (fast-downward's library and TextWorld's grammar)
and drops the repeated work:

- a game's SAS translation, parsed grammar and goal are built once and cached per process;
- so are its initial state, entity names and intro text, kept at its first start
  (``GameStart``): a GRPO group starts the same game again and again;
- ``goal_progress`` scores the goal's bindings that the static facts allow, found once per
  game (:meth:`~derl_bench.families.alfworld.goal.Goal.ground`), instead of searching the
  bindings again at every step;
- a command's text depends only on its operator (the grammar queries static facts), so it is
  derived once per operator and reused;
- the expert plan is the walkthrough's rest while the agent follows it; the planner (and its
  own SAS translation) runs only when the agent leaves the plan;
- feedback text is derived with the game's own grammar, so observations are identical to
  ``AlfredTWEnv``'s (tests compare the two on real games); it depends only on the game, the
  operator and the fluent facts after it (the grammar's queries sort the facts they match),
  so the text of a state reached again, as a GRPO group's samples do, is reused.

Nothing here writes outside the system temp folder: fast-downward copies its library there.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from derl_bench.families.alfworld.game import GameData, replan_sas
from derl_bench.families.alfworld.goal import GroundGoal
from derl_bench.families.alfworld.state import lean_state_class
from derl_bench.families.alfworld.textgen import derive_text
from derl_bench.families.alfworld.upstream import EngineError, demangler_class, import_engine

NOTHING_HAPPENS = "Nothing happens."


@dataclass(frozen=True)
class GameStart:
    """A game's initial state as its first start built it (``GameData.start``). Entity infos
    are shared read-only: derivation and play never change them."""

    state: tuple[Any, ...]
    entity_infos: dict[str, Any]
    names: dict[str, str]
    intro: str
    goal: GroundGoal


# fast-downward keeps its task in globals, so each live engine needs its own copy of the library.
# Copies are never unloaded: dlclose-ing one leaves C++ symbols that later copies bind to
# dangling (a segfault on the next load). Closed engines return their copy here for reuse.
_FREE_LIBS: list[Any] = []
_LOADED = [0]
"""How many copies this process has loaded: those not in ``_FREE_LIBS`` are in use."""
# Engines are built and closed from several threads at once (one per served session): the
# check-then-pop of a free copy and the count must not interleave.
_LIBS_LOCK = threading.Lock()


def _take_lib() -> Any:
    with _LIBS_LOCK:
        if _FREE_LIBS:
            return _FREE_LIBS.pop()
        _LOADED[0] += 1
    import fast_downward

    return fast_downward.load_lib()


def _give_back_lib(lib: Any) -> None:
    with _LIBS_LOCK:
        _FREE_LIBS.append(lib)


def libraries_in_use() -> int:
    """How many fast-downward library copies live engines hold (0 once every engine of the
    process is closed: the pool has them all back)."""
    with _LIBS_LOCK:
        return _LOADED[0] - len(_FREE_LIBS)


# Feedback texts of recent states, by (game, operator, fluent facts after it). Bounded by
# emptying rather than by recency: a group's samples reuse texts within a step, so what is lost
# is only the reuse across a clearing. The game is kept with its text so that a key whose game
# was freed (and its id reused) never matches.
_FEEDBACK: dict[tuple[int, str, frozenset], tuple[GameData, str]] = {}
_FEEDBACK_SIZE = 4096


class Engine:
    """One game being played: fast-downward's state plus TextWorld's text generation.

    Each engine loads its own copy of fast-downward's library (the library keeps global state),
    so several engines can live in one process. :meth:`close` unloads it.
    """

    def __init__(self) -> None:
        import fast_downward

        self._pddl_logic = import_engine()
        self._lib = _take_lib()
        self._operator_type = fast_downward.Operator
        self.game: GameData | None = None
        self._expert_loaded_for: str | None = None

    # -- lifecycle
    def close(self) -> None:
        """Give the library copy back to the process's pool (see :func:`_take_lib`)."""
        if self._lib is not None:
            _give_back_lib(self._lib)
            self._lib = None
            self.game = None

    def start(self, game: GameData) -> str:
        """Start ``game`` from its initial state and return the intro text."""
        if self._lib is None:
            raise EngineError("the engine is closed")
        self.game = game
        lib = self._lib
        lib.load_sas(game.sas.encode("utf-8"))
        # The walkthrough wins from the initial state, so it is the first expert plan; the
        # planner runs only once the agent leaves the plan (see step()).
        self._plan: list[str] | None = list(game.walkthrough) or None
        state = lean_state_class()(lib, game)
        self.state = state
        self.facts: set[tuple[str, ...]] = set(game.static_facts) | state.fluent_facts
        self._fluent: set[tuple[str, ...]] = set(state.fluent_facts)
        if game.start is None:
            # The initial state, its entities and its intro are the same at every start
            # (the derivation is deterministic), so they are built once per game.
            self.entity_infos = self._entity_infos(state)
            self._names = {k: info.name for k, info in self.entity_infos.items()}
            intro = self._derive("#intro#", {}, {})
            game.start = GameStart(state.snapshot(), self.entity_infos, self._names, intro,
                                   game.goal.ground(self.facts, game.objects_by_type))
        else:
            self.entity_infos = game.start.entity_infos
            self._names = game.start.names
        self._refresh_commands()
        return game.start.intro

    def _entity_infos(self, state: Any) -> dict[str, Any]:
        from textworld.generator.game import EntityInfo

        infos = {v.name: EntityInfo(v.name, v.type) for fact in state.facts for v in fact.arguments}
        for info in infos.values():
            info.name, info.definite, info.indefinite = info.id, "the", "a"
        demangler = demangler_class()(game_infos=infos, shuffle=False)
        for info in infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
        return infos

    # -- play
    def step(self, command: str) -> tuple[str, bool]:
        """Apply a command; return ``(feedback, admissible)``."""
        command = command.strip()
        operator = self._by_command.get(command)
        if operator is None:
            return NOTHING_HAPPENS, False  # the state, and so the plan, is unchanged
        # The rest of a plan still wins after its first command (actions are deterministic).
        self._plan = self._plan[1:] if self._plan and self._plan[0] == command else None
        action = self._action(operator)
        effects = self.state.apply_operator(operator)
        for positive, fact in effects:
            if positive:
                self.facts.add(fact)
                self._fluent.add(fact)
            else:
                self.facts.discard(fact)
                self._fluent.discard(fact)
        game = self.game
        assert game is not None
        key = (id(game), operator.name, frozenset(self._fluent))
        known = _FEEDBACK.get(key)
        if known is not None and known[0] is game:
            feedback = known[1]
        else:
            variables = {ph.name: self.entity_infos[var.name]
                         for ph, var in action.mapping.items()}
            feedback = self._derive(action.feedback_rule, variables, action.mapping)
            if len(_FEEDBACK) >= _FEEDBACK_SIZE:
                _FEEDBACK.clear()
            _FEEDBACK[key] = (game, feedback)
        self._refresh_commands()
        return feedback, True

    @property
    def won(self) -> bool:
        return bool(self._lib.check_goal())

    @property
    def admissible_commands(self) -> list[str]:
        return self._admissible

    def goal_progress(self) -> float:
        assert self.game is not None
        return self.game.goal.progress_of(self.game.start.goal, self.facts)

    def agent_location(self) -> str:
        for fact in self.facts:
            if fact[0] == "atlocation":
                return fact[2]
        return ""

    def expert_plan(self) -> list[str]:
        """Commands that win from the current state: the walkthrough's rest while the agent
        follows it, else fast-downward's plan (searched once per state the agent reaches off
        the plan; the planner's SAS translation is made on first use)."""
        if self._plan is None:
            assert self.game is not None
            if self._expert_loaded_for != self.game.path:
                self._lib.load_sas_replan(replan_sas(self.game).encode("utf-8"))
                self._expert_loaded_for = self.game.path
            self._plan = self.state.replan(self.entity_infos)
        return list(self._plan)

    # -- internals
    def _refresh_commands(self) -> None:
        lib = self._lib
        count = lib.get_applicable_operators_count()
        operators = (self._operator_type * count)()
        lib.get_applicable_operators(operators)
        self.state._operators = {op.id: op for op in operators}
        by_command: dict[str, Any] = {}
        game = self.game
        assert game is not None
        cache = game.commands
        for op in operators:
            name = op.name
            command = cache.get(name)
            if command is None:
                action = self._action(op)
                context = self._context(
                    {ph.name: self.entity_infos[var.name] for ph, var in action.mapping.items()},
                    action.mapping,
                )
                action.command_template = derive_text(game.logic.grammar,
                                                      action.command_template, context)
                command = cache[name] = action.format_command(self._names)
            by_command.setdefault(command, op)
        self._by_command = by_command
        self._admissible = sorted(by_command)

    def _action(self, op: Any) -> Any:
        return self.state.action_of(op)

    def _context(self, variables: dict[str, Any], mapping: dict[Any, Any]) -> dict[str, Any]:
        return {
            "state": self.state,
            "facts": self.state.facts,
            "variables": variables,
            "mapping": mapping,
            "entity_infos": self.entity_infos,
        }

    def _derive(self, rule: str, variables: dict[str, Any], mapping: dict[Any, Any]) -> str:
        assert self.game is not None
        return derive_text(self.game.logic.grammar, rule, self._context(variables, mapping))

