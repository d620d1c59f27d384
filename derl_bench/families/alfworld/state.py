"""fast-downward's state of a game, built from the cached translation (TextWorld's
``PddlState`` without its per-episode re-translation)."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from typing import Any

from derl_bench.families.alfworld.game import GameData, parse_atom
from derl_bench.families.alfworld.upstream import import_engine


def _make_lean_state_class() -> type:
    pddl_logic = import_engine()
    from textworld.logic import Action, Placeholder, Type, Variable

    base: Any = pddl_logic.PddlState  # loaded from alfworld at run time

    class LeanPddlState(base):
        """``PddlState`` built from a cached translation, keeping a set of fluent facts."""

        def __init__(self, downward_lib: Any, game: GameData) -> None:
            self._facts: defaultdict[str, set[Any]] = defaultdict(set)
            self._vars_by_name: dict[str, Any] = {}
            self._vars_by_type: defaultdict[str, set[Any]] = defaultdict(set)
            self._var_counts: Counter[str] = Counter()
            self._logic = game.logic
            self.downward_lib = downward_lib
            self.task = game.task
            self._actions = {a.name: a for a in game.task.actions}
            for type_ in game.task.types:
                try:
                    self._logic.types.add(Type(type_.name, type_.supertype_names))
                except ValueError:
                    pass
            self.name2type = {o.name: o.type_name for o in game.task.objects}
            self._operators: dict[Any, Any] = {}
            self._action_cache: dict[str, Any] = {}
            if game.start is not None:  # the game's initial state, built at its first start
                self._restore(game.start.state)
                return
            facts = []
            for atom in game.task.init:
                fact = _init_proposition(atom, self.name2type)
                if fact is not None:
                    facts.append(fact)
            self.add_facts(facts)
            size = downward_lib.get_state_size()
            atoms = (pddl_logic.Atom * size)()
            downward_lib.get_state(atoms)
            self.fluent_facts: set[tuple[str, ...]] = set()
            props = []
            for atom in atoms:
                positive, fact = parse_atom(atom.name)
                if positive:
                    self.fluent_facts.add(fact)
                    props.append(atom.get_fact(self.name2type))
            self.add_facts(props)

        def snapshot(self) -> tuple[Any, ...]:
            """This state's facts and variables, to start the same game again from them."""
            # Frozen copies: play goes on changing this state's own sets.
            return ({k: frozenset(v) for k, v in self._facts.items()}, dict(self._vars_by_name),
                    {k: frozenset(v) for k, v in self._vars_by_type.items()},
                    Counter(self._var_counts), frozenset(self.fluent_facts))

        def _restore(self, snapshot: tuple[Any, ...]) -> None:
            # Propositions and variables are immutable; only the containers are copied.
            facts, by_name, by_type, counts, fluents = snapshot
            self._facts = defaultdict(set, {k: set(v) for k, v in facts.items()})
            self._vars_by_name = dict(by_name)
            self._vars_by_type = defaultdict(set, {k: set(v) for k, v in by_type.items()})
            self._var_counts = Counter(counts)
            self.fluent_facts = set(fluents)

        def action_of(self, op: Any) -> Any:
            action = self._action_cache.get(op.name)
            if action is None:
                name, *arguments = op.name.split()
                action = Action(name=name, preconditions=[], postconditions=[])
                action.mapping = {
                    Placeholder(p.name.strip("?"), p.type_name): Variable(arg, p.type_name)
                    for p, arg in zip(self._actions[name].parameters, arguments, strict=False)
                }
                logic_action = self._logic.actions[name]
                action.command_template = logic_action.template
                action.feedback_rule = logic_action.feedback_rule
                self._action_cache[op.name] = action
            action.id = op.id
            return action

        def apply_operator(self, op: Any) -> list[tuple[bool, tuple[str, ...]]]:
            effects = (pddl_logic.Atom * op.nb_effect_atoms)()
            self.downward_lib.apply_operator(op.id, effects)
            changes = []
            for effect in effects:
                prop = effect.get_fact(self.name2type)
                self.remove_fact(prop.negate())
                self.add_fact(prop)
                changes.append(parse_atom(effect.name))
            return changes

    return LeanPddlState


def _init_proposition(atom: Any, name2type: dict[str, str]) -> Any:
    """The textworld proposition of one of the task's initial atoms (as ``PddlState`` does)."""
    from fast_downward.translate.pddl import conditions, f_expression
    from textworld.logic import Proposition, Variable

    if isinstance(atom, conditions.Atom):
        if atom.predicate == "=":
            return None
        return Proposition(atom.predicate, [Variable(arg, name2type[arg]) for arg in atom.args])
    if isinstance(atom, f_expression.Assign):
        if atom.fluent.symbol == "total-cost":
            return None
        name = f"{atom.expression.value}"
        if str.isdigit(name):
            return None
        return Proposition(name, [Variable(arg, name2type[arg]) for arg in atom.fluent.args])
    return None


@functools.cache
def lean_state_class() -> type:
    return _make_lean_state_class()

