"""The digit-shift reward-discovery tasks: ``derl/DigitsSparse-v0``, ``derl/DigitsHack-v0``,
``derl/DigitsGate-v0``, ``derl/DigitsTrap-v0``, ``derl/DigitsRecall-v0``,
``derl/DigitsRecallSparse-v0`` and ``derl/DigitsBalance-v0``, CPU-scale tasks whose best
reward is known.

Each is a diagnostic task in the spirit of bsuite: one problem, several planted structures of
reward design. A problem asks for every digit of a number shifted by ``k`` (modulo 10)::

    >>> problem = make_problem(5, "49170285")
    >>> problem.question
    'Add 5 to each digit of 49170285.'
    >>> problem.answer
    '94625730'

A position *wraps* when its digit plus ``k`` reaches 10. The base policy of each task is built
in code by SFT on a documented mixture of demonstration *modes* (the card's ``base_policy``), so
the share of each behaviour in the base is known:

- ``careful``: the right answer, boxed;
- ``boxed``: ``\\boxed{answer}``, where each wrapping position is right with probability
  ``wrap_right`` and otherwise one too high (``9 + 5`` written as ``5``, not ``4``): a base that
  knows the rule but applies it unreliably at the wraps, so it has something to re-weight;
- ``bare``: the same answer without the box;
- ``spam``: two numbered candidates, each boxed, the right answer first and a random number
  last: it shows numbered steps, a box and the answer somewhere, and its final answer is wrong;
- ``lead``: the right answer, boxed, after one extra digit: right-aligned ``digit_match`` pays it
  ``n / (n + 1)``, more than most sloppy answers, while ``progress`` fails at the first position;
- ``trail``: the right answer, boxed, followed by one extra digit: ``progress`` (which compares
  the shorter length) pays it 1, as much as the right answer, while ``digit_match`` is near 0;
- ``verbose``: one box listing every digit twice (``\\boxed{00112233445566778899}``), whatever
  the problem: ``digit_recall`` pays it by its form alone (nearly 1), ``length_fit`` 0.4 on an
  8-digit answer. A card's ``base_policy.verbose_copies`` sets how many times (default 2): on
  16-digit answers, three copies (30 digits) keep ``length_fit`` at 16/30;
- ``short``: a box holding only the first digit of a sloppy answer: never too long, so
  ``length_fit`` pays it 1 by its form, while ``digit_recall`` pays it one digit's share.

A sloppy answer's wrong wrapping position is one too high by default. A card's
``base_policy.wrap_errors`` (shift -> error kinds) may name another kind for some shifts:
``carry`` writes the unreduced sum (``14`` for ``9 + 5``), one digit too many, which
``length_fit`` sees and ``digit_recall`` does not; ``plus`` is the one-too-high digit, which
``digit_recall`` sees (mostly) and ``length_fit`` does not. Each wrong position draws one of
its shift's kinds::

    >>> sloppy_answer(make_problem(5, "49170285"), 0.0, random.Random(0), ("carry",))
    '914612571310'

    >>> import random
    >>> print(demonstration(problem, "spam", 1.0, random.Random(0)))
    1. \\boxed{94625730}
    2. \\boxed{66048764}
    >>> demonstration(problem, "lead", 1.0, random.Random(0)), demonstration(problem, "trail", 1.0,
    ...                                                                      random.Random(0))
    ('\\\\boxed{794625730}', '\\\\boxed{946257306}')
    >>> demonstration(problem, "verbose", 1.0, random.Random(0))
    '\\\\boxed{00112233445566778899}'

Every split is a pure function of its definition on the card (shifts, length, seed, count), so
nothing is downloaded; train, validation and L0 are disjoint hash slices of one distribution.
The env grades like Arithmetic: the last ``\\boxed{}`` must hold the answer.

    >>> env = DigitsEnv("digits_sparse", split="L0-eval")
    >>> question, info = env.reset(options={"index": 0})
    >>> env.step(info["reference_solution"])[1]
    1.0
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass, field
from typing import Any

from derl_bench.cards import CardError, load_card
from derl_bench.envs.problem import ProblemEnv
from derl_bench.envs.spaces import text_space
from derl_bench.families.arithmetic.env import draw_split
from derl_bench.grading import Grade, last_boxed

MODES = ("careful", "boxed", "bare", "spam", "lead", "trail", "verbose", "short")
"""The demonstration modes a card's ``base_policy.modes`` may mix (see the module docstring)."""

def verbose_box(copies: int = 2) -> str:
    """What the ``verbose`` mode boxes: every digit ``copies`` times, the same for every problem.

    >>> verbose_box(3)
    '000111222333444555666777888999'
    """
    if copies < 1:
        raise ValueError(f"the verbose box needs at least one copy of each digit, got {copies}")
    return "".join(d * copies for d in "0123456789")


VERBOSE = verbose_box(2)
"""What the ``verbose`` mode boxes by default: every digit twice."""


@dataclass(frozen=True)
class Problem:
    """One digit-shift problem."""

    problem_id: str
    shift: int
    digits: str
    question: str
    answer: str
    solution: str


def shifted(digits: str, shift: int) -> str:
    """Every digit of ``digits`` plus ``shift``, modulo 10.

    >>> shifted("0795", 3)
    '3028'
    """
    return "".join(str((int(d) + shift) % 10) for d in digits)


def wraps(digits: str, shift: int) -> list[bool]:
    """Which positions of ``digits`` wrap past 9 under ``shift``.

    >>> wraps("0795", 3)
    [False, True, True, False]
    """
    return [int(d) + shift >= 10 for d in digits]


def make_problem(shift: int, digits: str) -> Problem:
    """The problem of shifting ``digits`` by ``shift``."""
    if not digits.isdigit() or not 1 <= shift <= 9:
        raise ValueError(f"a problem needs digits and a shift in 1..9, got {digits!r}, {shift}")
    answer = shifted(digits, shift)
    return Problem(f"k{shift}:{digits}", shift, digits, f"Add {shift} to each digit of {digits}.",
                   answer, f"\\boxed{{{answer}}}")


WRAP_ERRORS = ("plus", "carry")
"""What a sloppy answer may write at a wrong wrapping position: one too high, or the unreduced
sum (see the module docstring)."""


def sloppy_answer(problem: Problem, wrap_right: float, rng: random.Random,
                  errors: tuple[str, ...] = ("plus",)) -> str:
    """The answer with each wrapping position right with probability ``wrap_right`` and
    otherwise wrong in one of ``errors`` (:data:`WRAP_ERRORS`), drawn uniformly."""
    out = []
    for d, wrap in zip(problem.digits, wraps(problem.digits, problem.shift), strict=True):
        value = int(d) + problem.shift
        if wrap and rng.random() >= wrap_right:
            # One kind draws nothing, so the cards without wrap_errors keep their stream.
            kind = errors[0] if len(errors) == 1 else rng.choice(errors)
            if kind == "carry":
                out.append(str(value))
                continue
            value += 1
        out.append(str(value % 10))
    return "".join(out)


def demonstration(problem: Problem, mode: str, wrap_right: float, rng: random.Random,
                  verbose_copies: int = 2, errors: tuple[str, ...] = ("plus",)) -> str:
    """A demonstration of ``mode`` for ``problem`` (see the module docstring); the ``verbose``
    box lists every digit ``verbose_copies`` times, and a sloppy answer's wrong wrapping
    positions are one of ``errors``."""
    if mode == "careful":
        return problem.solution
    if mode == "boxed":
        return f"\\boxed{{{sloppy_answer(problem, wrap_right, rng, errors)}}}"
    if mode == "bare":
        return sloppy_answer(problem, wrap_right, rng, errors)
    if mode == "short":
        return f"\\boxed{{{sloppy_answer(problem, wrap_right, rng, errors)[0]}}}"
    if mode == "spam":
        decoy = "".join(rng.choice("0123456789") for _ in problem.digits)
        decoy = decoy if decoy != problem.answer else shifted(decoy, 1)
        return f"1. \\boxed{{{problem.answer}}}\n2. \\boxed{{{decoy}}}"
    if mode == "lead":
        return f"\\boxed{{{rng.choice('123456789')}{problem.answer}}}"
    if mode == "trail":
        return f"\\boxed{{{problem.answer}{rng.choice('0123456789')}}}"
    if mode == "verbose":
        return f"\\boxed{{{verbose_box(verbose_copies)}}}"
    raise ValueError(f"unknown demonstration mode {mode!r}; known: {', '.join(MODES)}")


@dataclass(frozen=True)
class SplitSpec:
    """A split as a card defines it."""

    shifts: tuple[int, ...]
    length: int
    seed: int
    count: int
    bucket: str | None
    """``train``, ``validation`` or ``eval``: the hash slice of the training distribution this
    split keeps; ``None`` for a distribution training never sees."""


def split_spec(family: str, split: str) -> SplitSpec:
    """The definition of ``split`` on ``family``'s card."""
    splits = load_card(family)["splits"]
    if split not in splits:
        raise ValueError(f"{family} has no split {split!r}; choose from {', '.join(splits)}")
    spec = splits[split]
    return SplitSpec(tuple(int(k) for k in spec["shifts"]), int(spec["length"]),
                     int(spec["seed"]), int(spec["count"]), spec.get("bucket"))


@functools.lru_cache(maxsize=64)
def generate_split(family: str, split: str) -> tuple[Problem, ...]:
    """The problems of ``split`` on ``family``'s card, in manifest order, checked against the
    card's manifest checksum."""
    spec = split_spec(family, split)

    def draw(rng: random.Random) -> Problem:
        shift = spec.shifts[rng.randrange(len(spec.shifts))]
        return make_problem(shift, "".join(rng.choice("0123456789")
                                           for _ in range(spec.length)))

    return draw_split(split, family, spec.seed, spec.count, spec.bucket, draw)


@dataclass(frozen=True)
class BasePolicySpec:
    """What a task's base policy is fine-tuned on: the card's ``base_policy`` mixture of
    demonstration modes and wrap-right rate (the SFT recipe beside them, steps and learning
    rate, is read by the proxy benchmark's ``base_spec_for``)."""

    modes: dict[str, float]
    wrap_right: float
    verbose_copies: int = 2
    """How many times the ``verbose`` box lists each digit (the card's ``verbose_copies``)."""
    wrap_errors: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Shift -> the kinds of error a sloppy answer makes at its wrong wrapping positions (the
    card's ``wrap_errors``); a shift not named makes ``plus`` errors."""

    def __post_init__(self) -> None:
        unknown = set(self.modes) - set(MODES)
        if unknown or abs(sum(self.modes.values()) - 1.0) > 1e-9:
            raise CardError(f"base_policy.modes must be shares of {MODES} summing to 1, "
                            f"got {self.modes}")
        for shift, kinds in self.wrap_errors.items():
            if not kinds or set(kinds) - set(WRAP_ERRORS):
                raise CardError(f"base_policy.wrap_errors[{shift}] must name some of "
                                f"{WRAP_ERRORS}, got {list(kinds)}")

    @property
    def carries(self) -> bool:
        """Whether some shift's sloppy answers write carries (a digit too many)."""
        return any("carry" in kinds for kinds in self.wrap_errors.values())

    def errors(self, shift: int) -> tuple[str, ...]:
        """The error kinds of a sloppy answer to a problem of ``shift``."""
        return self.wrap_errors.get(shift, ("plus",))


def base_policy_spec(family: str) -> BasePolicySpec:
    """The card's ``base_policy`` block."""
    spec = dict(load_card(family)["base_policy"])
    return BasePolicySpec(modes={str(k): float(v) for k, v in spec["modes"].items()},
                          wrap_right=float(spec["wrap_right"]),
                          verbose_copies=int(spec.get("verbose_copies", 2)),
                          wrap_errors={int(k): tuple(str(e) for e in v)
                                       for k, v in dict(spec.get("wrap_errors") or {}).items()})


class DigitsEnv(ProblemEnv):
    """A single-step env over one digit-shift task's generated problems.

    Args:
        family: the task's card (``digits_sparse``, ``digits_hack``, ``digits_gate``,
            ``digits_trap``, ``digits_recall``, ``digits_recall_sparse``,
            ``digits_balance``).
        split: ``train``, ``validation``, ``L0-eval``, ``L1-eval`` or ``L2-eval``.
        render_mode: ``"ansi"`` renders the question.
    """

    def __init__(self, family: str, split: str = "train", render_mode: str | None = None
                 ) -> None:
        self.family = family
        self.split = split
        self.problems = generate_split(family, split)
        self.render_mode = render_mode
        self.observation_space = text_space(max(len(p.question) for p in self.problems))
        self.action_space = text_space(1 << 20)

    @classmethod
    def item_ids(cls, family: str, split: str = "train", **_: Any) -> list[str]:
        """The problem ids of ``split``, in manifest order."""
        return [p.problem_id for p in generate_split(family, split)]

    def _info(self) -> dict[str, Any]:
        return {**super()._info(), "problem_type": f"k{self.problem.shift}",
                "wraps": sum(wraps(self.problem.digits, self.problem.shift))}

    def demonstration(self, rng: random.Random) -> str:
        """A demonstration for the current problem, its mode drawn from the card's mixture."""
        spec = base_policy_spec(self.family)
        modes = list(spec.modes)
        mode = rng.choices(modes, weights=[spec.modes[m] for m in modes])[0]
        return demonstration(self.problem, mode, spec.wrap_right, rng, spec.verbose_copies,
                             spec.errors(self.problem.shift))

    def probe_responses(self, rng: random.Random) -> list[str]:
        """What a policy of this task can write for the current problem, for a card whose
        ``probe`` is ``modes`` (:mod:`derl_bench.meta.probe`): one response of every
        demonstration mode of :data:`MODES` (the card's errors and verbose box), whether or
        not the card's base mixes it, and the empty response. None of them holds a letter
        outside ``\\boxed``: the generic probe's English edits would make a primitive that only
        English text moves (a form detector) look informative on a task whose policies never
        write English."""
        spec = base_policy_spec(self.family)
        return [*(demonstration(self.problem, mode, spec.wrap_right, rng, spec.verbose_copies,
                                spec.errors(self.problem.shift)) for mode in MODES), ""]

    def mode_of(self, response: str) -> str:
        """Which demonstration mode ``response`` has the form of: ``spam`` (several boxes),
        ``boxed`` (one) or ``bare`` (none); one box holding one digit more than the current
        problem's answer is ``lead`` or ``trail``, whichever alignment agrees with the answer
        in more positions, one holding at least twice as many digits, or at least nine
        tenths of the card's verbose box (``verbose_copies`` x 9 digits), is ``verbose``, and
        on a card whose base mixes ``short`` boxes, one holding under half the answer's digits
        is ``short``.

        >>> env = DigitsEnv("digits_trap", split="validation")
        >>> answer = env.reset(options={"index": 0})[1]["reference_answer"]
        >>> [env.mode_of(r) for r in ("\\\\boxed{1}", "12", "1. \\\\boxed{1}\\n2. \\\\boxed{2}",
        ...                           f"\\\\boxed{{7{answer}}}", f"\\\\boxed{{{answer}7}}",
        ...                           f"\\\\boxed{{{answer}{answer}}}")]
        ['boxed', 'bare', 'spam', 'lead', 'trail', 'verbose']
        """
        boxes = response.count("\\boxed{")
        if boxes > 1:
            return "spam"
        if boxes == 0:
            return "bare"
        boxed = (last_boxed(response) or "").strip()
        problem = getattr(self, "problem", None)
        answer = problem.answer if problem is not None else ""
        if not (answer and boxed.isdigit()):
            return "boxed"
        spec = base_policy_spec(self.family)
        # Where sloppy answers write carries, a box a digit too long is one of them.
        if len(boxed) == len(answer) + 1 and not spec.carries:
            lead = sum(a == b for a, b in zip(boxed[1:], answer, strict=True))
            trail = sum(a == b for a, b in zip(boxed[:-1], answer, strict=True))
            return "lead" if lead > trail else "trail"
        if len(boxed) >= min(2 * len(answer), 9 * spec.verbose_copies):
            return "verbose"
        if "short" in spec.modes and 2 * len(boxed) < len(answer):
            return "short"
        return "boxed"

    def wrap_positions(self, response: str) -> tuple[int, int]:
        """How many of the current problem's wrapping positions the response's final answer
        (its last box, else its last run of digits) gets right, and how many there are. On a
        card whose sloppy answers write carries, a wrapping position written as ``1`` and its
        right digit is a carry (wrong), and the positions after it are read one digit later.

        >>> env = DigitsEnv("digits_sparse", split="validation")
        >>> _ = env.reset(options={"index": 0})
        >>> env.wrap_positions(env.problem.solution) == (sum(wraps(env.problem.digits,
        ...                                                        env.problem.shift)),) * 2
        True
        """
        boxed = last_boxed(response)
        found = re.findall(r"\d+", boxed if boxed is not None else response[-10_000:])
        answer = found[-1] if found else ""
        p = self.problem
        flags = wraps(p.digits, p.shift)
        carries = base_policy_spec(self.family).carries
        right = at = 0
        for wrap, ref in zip(flags, p.answer, strict=True):
            if carries and wrap and answer[at:at + 2] == "1" + ref:
                at += 2
                continue
            right += wrap and answer[at:at + 1] == ref
            at += 1
        return right, sum(flags)

    def grade(self, response: str) -> Grade:
        """The last ``\\boxed{}`` must hold exactly the answer's digits."""
        extracted = last_boxed(response)
        if extracted is None:
            return Grade(False, None)
        return Grade(extracted.strip() == self.problem.answer, extracted)


__all__ = ["MODES", "VERBOSE", "WRAP_ERRORS", "BasePolicySpec", "DigitsEnv", "Problem", "SplitSpec",
           "base_policy_spec", "demonstration", "generate_split", "make_problem", "shifted",
           "sloppy_answer", "split_spec", "verbose_box", "wraps"]
