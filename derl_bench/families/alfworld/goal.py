"""Goal evaluation: a game's PDDL goal in prenex form, and the fraction of it that holds
(``goal_progress``)."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from derl_bench.families.alfworld.upstream import EngineError


@dataclass(frozen=True)
class Literal:
    """One atom of the goal, ``(pred args...)`` or ``(not (pred args...))``; args starting with
    ``?`` are variables (renamed to be unique across quantifier scopes)."""

    predicate: str
    args: tuple[str, ...]
    positive: bool = True

    def variables(self) -> tuple[str, ...]:
        return tuple(a for a in self.args if a.startswith("?"))


@dataclass
class Goal:
    """A goal in prenex form: existential variables with their types, and a flat conjunction.

    :meth:`progress` returns the best fraction, over bindings, of the *fluent* literals that
    hold; static literals (types, capabilities, equality) only restrict the bindings. The
    fraction is 1.0 exactly when the goal holds.
    """

    variables: dict[str, str]
    literals: list[Literal]
    fluent_predicates: frozenset[str]
    static_literals: list[Literal] = field(init=False)
    fluent_literals: list[Literal] = field(init=False)

    def __post_init__(self) -> None:
        self.static_literals = [
            lit for lit in self.literals
            if lit.predicate == "=" or lit.predicate not in self.fluent_predicates
        ]
        static_ids = {id(lit) for lit in self.static_literals}
        self.fluent_literals = [lit for lit in self.literals if id(lit) not in static_ids]

    def progress(self, facts: set[tuple[str, ...]], objects_by_type: dict[str, list[str]]) -> float:
        return self.progress_of(self.ground(facts, objects_by_type), facts)

    def progress_of(self, ground: GroundGoal, facts: set[tuple[str, ...]]) -> float:
        """:meth:`progress` from the goal's :meth:`ground` form (static facts unchanged)."""
        best = -1
        for literals in ground:
            best = max(best, sum((fact in facts) == positive for fact, positive in literals))
            if best == len(self.fluent_literals):
                break
        if not self.fluent_literals:
            return float(best >= 0)
        return max(0, best) / len(self.fluent_literals)

    def ground(self, facts: set[tuple[str, ...]], objects_by_type: dict[str, list[str]],
               ) -> GroundGoal:
        """Every binding of the goal's variables that the static literals allow, each as its
        fluent literals made ground: ``((fact, positive), ...)``. Static facts never change
        during a game, so a game's ground goal holds for all its states (``Engine`` keeps it
        per game); only which fluent facts hold changes."""
        domains: dict[str, list[str]] = {}
        for var, typ in self.variables.items():
            candidates = objects_by_type.get(typ, [])
            unary = [lit for lit in self.static_literals if lit.variables() == (var,)]
            domains[var] = [c for c in candidates
                            if all(_holds(lit, {var: c}, facts) for lit in unary)]
        order = sorted(domains, key=lambda v: len(domains[v]))
        checks: dict[str, list[Literal]] = defaultdict(list)
        for lit in self.static_literals:
            lit_vars = lit.variables()
            if len(lit_vars) > 1 or not lit_vars:
                last = max((order.index(v) for v in lit_vars), default=0)
                checks[order[last] if order else ""].append(lit)
        ground: list[tuple[tuple[tuple[str, ...], bool], ...]] = []
        binding: dict[str, str] = {}

        def search(depth: int) -> None:
            if depth == len(order):
                ground.append(tuple(((lit.predicate, *(binding.get(a, a) for a in lit.args)),
                                     lit.positive) for lit in self.fluent_literals))
                return
            var = order[depth]
            for value in domains[var]:
                binding[var] = value
                if all(_holds(lit, binding, facts) for lit in checks.get(var, ())):
                    search(depth + 1)
            binding.pop(var, None)

        if all(_holds(lit, {}, facts) for lit in checks.get("", ())):
            search(0)
        # Bindings that differ only in variables no fluent literal reads score alike.
        return tuple(dict.fromkeys(ground))


GroundGoal = tuple[tuple[tuple[tuple[str, ...], bool], ...], ...]
"""A goal's bindings with their fluent literals made ground (:meth:`Goal.ground`)."""


def _holds(lit: Literal, binding: dict[str, str], facts: set[tuple[str, ...]]) -> bool:
    args = tuple(binding.get(a, a) for a in lit.args)
    if lit.predicate == "=":
        value = args[0] == args[1]
    else:
        value = (lit.predicate, *args) in facts
    return value == lit.positive


_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def _sexp(text: str) -> Any:
    stack: list[list[Any]] = [[]]
    for token in _TOKEN.findall(text):
        if token == "(":
            stack.append([])
        elif token == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(token.lower())
    return stack[0]


def parse_goal(pddl_problem: str, fluent_predicates: Iterable[str]) -> Goal:
    """Parse the ``(:goal ...)`` of a PDDL problem into prenex form (see :class:`Goal`)."""
    start = pddl_problem.find("(:goal")
    if start < 0:
        raise EngineError("the PDDL problem has no (:goal ...)")
    depth, end = 0, start
    for end in range(start, len(pddl_problem)):
        depth += {"(": 1, ")": -1}.get(pddl_problem[end], 0)
        if depth == 0:
            break
    tree = _sexp(pddl_problem[start : end + 1])[0][1]
    variables: dict[str, str] = {}
    literals: list[Literal] = []
    counter = itertools.count()

    def walk(node: Any, renames: dict[str, str], positive: bool = True) -> None:
        head = node[0] if node else "and"
        if head == "and":
            for child in node[1:]:
                walk(child, renames, positive)
        elif head == "exists":
            scoped = dict(renames)
            for name, typ in _typed_list(node[1]):
                fresh = f"{name}#{next(counter)}"
                scoped[name] = fresh
                variables[fresh] = typ
            walk(node[2], scoped, positive)
        elif head == "not":
            walk(node[1], renames, not positive)
        elif head in ("or", "forall", "imply", "when"):
            raise EngineError(f"goal operator {head!r} is not supported by goal_progress")
        else:
            free = [a for a in node[1:] if a.startswith("?") and a not in renames]
            if free:
                raise EngineError(f"free variable {free[0]} in the goal atom ({head} ...)")
            literals.append(Literal(head, tuple(renames.get(a, a) for a in node[1:]), positive))

    walk(tree, {})
    return Goal(variables, literals, frozenset(fluent_predicates))


def _typed_list(tokens: list[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pending: list[str] = []
    it = iter(tokens)
    for token in it:
        if token == "-":
            typ = next(it)
            out.extend((name, typ) for name in pending)
            pending = []
        else:
            pending.append(token.rstrip(","))
    out.extend((name, "object") for name in pending)
    return out
