"""``derl/Arithmetic-v0``: seeded, procedurally generated arithmetic, a CPU-scale proxy task.

A problem is an expression of small non-negative integers joined by ``+`` and ``-``; the
reference solution reduces it left to right, one operation per sentence, and boxes the result::

    >>> problem = make_problem("add_sub", (23, 45, 12))
    >>> problem.question
    'Compute 23 + 45 - 12.'
    >>> problem.solution
    '23 + 45 = 68. 68 - 12 = 56. The answer is \\\\boxed{56}.'

Every problem of a split is a pure function of the split's definition on the card (problem
types, operand range, generator seed, count), so nothing is downloaded. Grading is the MATH
grader's (the last ``\\boxed{}`` must equal the answer), and the observers are the math family's
plus two that grade *how close* a wrong answer is
(:mod:`derl_bench.families.arithmetic.observers`).

Problem types (the operand count and the operations, left to right):

=========  ===============  =======================================================
type       form             constraint
=========  ===============  =======================================================
``add``    ``a + b``
``sub``    ``a - b``        ``a >= b``
``add3``   ``a + b + c``
``add_sub`` ``a + b - c``   ``a + b >= c``
``sub_add`` ``a - b + c``   ``a >= b`` (held out of training at L2)
=========  ===============  =======================================================

    >>> env = ArithmeticEnv(split="L0-eval")
    >>> question, info = env.reset(options={"index": 0})
    >>> _, reward, terminated, _, info = env.step(info["reference_solution"])
    >>> reward, terminated
    (1.0, True)
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from derl_bench.cards import CardError, load_card, sha256_lines
from derl_bench.envs.problem import ProblemEnv
from derl_bench.envs.spaces import text_space
from derl_bench.grading import Grade, grade_math, last_boxed

_NUMBER = re.compile(r"-?\d{1,30}(?:\.\d{1,30})?")

PROBLEM_TYPES: dict[str, tuple[str, ...]] = {
    "add": ("+",),
    "sub": ("-",),
    "add3": ("+", "+"),
    "add_sub": ("+", "-"),
    "sub_add": ("-", "+"),
}
"""The operations of each problem type, applied left to right."""


@dataclass(frozen=True)
class Problem:
    """One arithmetic problem: its question, reference answer and step-by-step solution."""

    problem_id: str
    kind: str
    operands: tuple[int, ...]
    question: str
    answer: str
    solution: str


def _reduce(kind: str, operands: tuple[int, ...]) -> tuple[int, list[str]]:
    ops = PROBLEM_TYPES[kind]
    value, steps = operands[0], []
    for op, operand in zip(ops, operands[1:], strict=True):
        new = value + operand if op == "+" else value - operand
        steps.append(f"{value} {op} {operand} = {new}.")
        value = new
    return value, steps


def make_problem(kind: str, operands: tuple[int, ...]) -> Problem:
    """The problem of type ``kind`` over ``operands`` (see the module docstring)."""
    if kind not in PROBLEM_TYPES:
        raise ValueError(f"unknown problem type {kind!r}; known: {', '.join(PROBLEM_TYPES)}")
    if len(operands) != len(PROBLEM_TYPES[kind]) + 1:
        raise ValueError(f"{kind} takes {len(PROBLEM_TYPES[kind]) + 1} operands")
    expression = str(operands[0]) + "".join(
        f" {op} {n}" for op, n in zip(PROBLEM_TYPES[kind], operands[1:], strict=True))
    value, steps = _reduce(kind, operands)
    solution = " ".join([*steps, f"The answer is \\boxed{{{value}}}."])
    return Problem(f"{kind}:{','.join(map(str, operands))}", kind, operands,
                   f"Compute {expression}.", str(value), solution)


def _valid(kind: str, operands: tuple[int, ...]) -> bool:
    # Every intermediate value stays non-negative, so answers never need a minus sign.
    value = operands[0]
    for op, operand in zip(PROBLEM_TYPES[kind], operands[1:], strict=True):
        value = value + operand if op == "+" else value - operand
        if value < 0:
            return False
    return True


BUCKETS = ("eval", "validation")
"""Hash buckets 0 and 1 of the training distribution; every other bucket is ``train``."""


def bucket(problem_id: str, buckets: int) -> str:
    """Which slice of its distribution a problem belongs to: ``eval`` (sha256 of its id in
    bucket 0 of ``buckets``), ``validation`` (bucket 1) or ``train`` (any other). Slices of
    the same distribution are therefore disjoint by construction.

    >>> bucket("add:1,2", 10) in ("eval", "validation", "train")
    True
    """
    digest = hashlib.sha256(problem_id.encode()).digest()
    index = int.from_bytes(digest[:8], "big") % buckets
    return BUCKETS[index] if index < len(BUCKETS) else "train"


@dataclass(frozen=True)
class SplitSpec:
    """A split as the card defines it."""

    kinds: tuple[str, ...]
    low: int
    high: int
    """Operands are drawn uniformly from ``low..high`` (inclusive)."""
    seed: int
    count: int
    bucket: str | None
    """``train``, ``validation`` or ``eval``: the hash slice of the training distribution
    this split keeps (:func:`bucket`); ``None`` for a distribution training never sees."""
    require_above: int | None = None
    """When set, at least one operand must exceed it (L1: unseen number ranges)."""


def split_spec(split: str) -> SplitSpec:
    """The card's definition of ``split``."""
    card = load_card("arithmetic")
    splits = card["splits"]
    if split not in splits:
        raise ValueError(f"derl/Arithmetic-v0 has no split {split!r}; "
                         f"choose from {', '.join(splits)}")
    spec = dict(splits[split])
    return SplitSpec(kinds=tuple(spec["kinds"]), low=int(spec["low"]), high=int(spec["high"]),
                     seed=int(spec["seed"]), count=int(spec["count"]),
                     bucket=spec.get("bucket"),
                     require_above=spec.get("require_above"))


def draw_split(name: str, family: str, seed: int, count: int, split_bucket: str | None,
               draw: Callable[[random.Random], Any]) -> tuple[Any, ...]:
    """``count`` distinct problems from ``draw(rng)`` (``None``: a rejected draw) with
    ``random.Random(seed)``, kept only in the hash slice ``split_bucket`` (:func:`bucket`,
    ``family``'s ``eval_buckets``), and checked against the manifest checksum the card gives
    split ``name``. Shared by the generated families (Arithmetic, the digit tasks)."""
    card = load_card(family)
    buckets = int(card["eval_buckets"])
    rng = random.Random(seed)
    seen: set[str] = set()
    problems: list[Any] = []
    attempts = 0
    while len(problems) < count:
        attempts += 1
        if attempts > 200 * count:
            raise ValueError(f"{family} split {name!r}: cannot draw {count} distinct problems")
        problem = draw(rng)
        if problem is None or problem.problem_id in seen:
            continue
        if split_bucket is not None and bucket(problem.problem_id, buckets) != split_bucket:
            continue
        seen.add(problem.problem_id)
        problems.append(problem)
    expected = card["splits"][name].get("manifest_sha256")
    digest = sha256_lines([p.problem_id for p in problems])
    if expected is not None and digest != expected:
        raise CardError(f"{family} split {name!r}: generated manifest sha256 {digest} != "
                        f"card's {expected}")
    return tuple(problems)


@functools.lru_cache(maxsize=32)
def generate_split(split: str) -> tuple[Problem, ...]:
    """The problems of ``split``, in manifest order: seeded draws without repetition."""
    spec = split_spec(split)

    def draw(rng: random.Random) -> Problem | None:
        kind = spec.kinds[rng.randrange(len(spec.kinds))]
        operands = tuple(rng.randint(spec.low, spec.high)
                         for _ in range(len(PROBLEM_TYPES[kind]) + 1))
        if not _valid(kind, operands):
            return None
        if spec.require_above is not None and max(operands) <= spec.require_above:
            return None
        return make_problem(kind, operands)

    return draw_split(split, "arithmetic", spec.seed, spec.count, spec.bucket, draw)


class ArithmeticEnv(ProblemEnv):
    """A single-step env over generated arithmetic problems.

    Args:
        split: a split of the card (``train``, ``validation``, ``L0-eval``, ``L1-eval``,
            ``L2-eval``).
        render_mode: ``"ansi"`` renders the question.
    """

    def __init__(self, split: str = "train", render_mode: str | None = None) -> None:
        self.split = split
        self.problems = generate_split(split)
        self.render_mode = render_mode
        self.observation_space = text_space(max(len(p.question) for p in self.problems))
        self.action_space = text_space(1 << 20)

    @classmethod
    def item_ids(cls, split: str = "train", **_: Any) -> list[str]:
        """The problem ids of a split, in play order (:mod:`derl_bench.envs.items`)."""
        return [p.problem_id for p in generate_split(split)]

    def _info(self) -> dict[str, Any]:
        return {**super()._info(), "problem_type": self.problem.kind}

    def grade(self, response: str) -> Grade:
        """Grade ``response`` as MATH is graded: its last ``\\boxed{}`` must hold the answer.

        A box holding a plain number is decided here, exactly; anything else goes to the
        MATH grader (normalised string match, then math-verify)."""
        extracted = last_boxed(response)
        if extracted is not None and _NUMBER.fullmatch(extracted.strip()):
            return Grade(float(extracted) == float(self.problem.answer), extracted)
        return grade_math(response, self.problem.answer)


__all__ = ["PROBLEM_TYPES", "ArithmeticEnv", "Problem", "SplitSpec", "bucket", "generate_split",
           "make_problem", "split_spec"]
