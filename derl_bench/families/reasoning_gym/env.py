"""``derl/ReasoningGym-v0``: single-step problems from reasoning-gym's procedural generators.

The task (a reasoning-gym dataset name) and the level are parameters::

    env = gymnasium.make("derl/ReasoningGym-v0", task="chain_sum", level="L0")

A level is a distribution, a split a slice of it (see ``envs/reasoning_gym.md``):

- ``L0``: the task's generator at the card's training curriculum level;
- ``L1``: the same generator one curriculum level harder;
- ``L2``: the held-out generators the card lists for the task, at the training level.

``split`` picks the slice: ``train``, ``validation`` or ``eval``. Each slice is drawn from its
own generator seed and keeps only the problems whose question hashes into its bucket, so the
slices never share a question. The eval slices of the card's tasks are checked against the
manifest checksums on the card.

A response is scored by the generator's own ``score_answer`` on the extracted answer (the last
``\\boxed{}``, else what follows the last "answer is"); it succeeds when that score is 1.

    >>> env = ReasoningGymEnv(task="chain_sum", level="L0", split="eval")
    >>> question, info = env.reset(options={"index": 0})
    >>> _, reward, terminated, _, info = env.step(info["reference_solution"])
    >>> reward, terminated, info["rg_score"]
    (1.0, True, 1.0)
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from derl_bench.cards import CardError, load_card, sha256_lines
from derl_bench.envs.problem import ProblemEnv
from derl_bench.envs.spaces import text_space
from derl_bench.grading import Grade, last_boxed

LEVELS = ("L0", "L1", "L2")
SPLITS = ("train", "validation", "eval")
_ANSWER_IS = re.compile(r"answer(?:\s+is|:)\s*(.+)", re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    """One generated problem and the entry reasoning-gym scores answers against."""

    problem_id: str
    kind: str
    question: str
    answer: str
    solution: str
    entry: Mapping[str, Any]


def _card() -> dict[str, Any]:
    return load_card("reasoning_gym")


def generators(task: str, level: str) -> tuple[tuple[str, int], ...]:
    """``(generator, curriculum level)`` pairs the level of ``task`` draws from, in turn."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    card = _card()
    train_level = int(card["curriculum_level"])
    if level == "L0":
        return ((task, train_level),)
    if level == "L1":
        return ((task, train_level + 1),)
    held_out = (card["tasks"].get(task) or {}).get("held_out")
    if not held_out:
        raise ValueError(f"the card lists no held-out generators for task {task!r}; "
                         f"L2 exists for {', '.join(card['tasks'])}")
    return tuple((str(g), train_level) for g in held_out)


def bucket(question: str, buckets: int) -> str:
    """The slice a question belongs to: ``eval`` (sha256 in bucket 0), ``validation``
    (bucket 1) or ``train``.

    >>> bucket("Calculate 1 + 1.", 10) in SPLITS
    True
    """
    index = int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % buckets
    return ("eval", "validation")[index] if index < 2 else "train"


def _dataset(generator: str, curriculum_level: int, seed: int, size: int,
             overrides: Mapping[str, Any]) -> Any:
    from reasoning_gym.factory import DATASETS, create_curriculum, has_curriculum

    if generator not in DATASETS:
        raise ValueError(f"reasoning-gym has no task {generator!r}")
    dataset_cls, config_cls = DATASETS[generator]
    if has_curriculum(generator):
        curriculum = create_curriculum(generator)
        curriculum.set_global_level(curriculum_level)
        config = curriculum.generate_configuration({"seed": seed, "size": size})
        for key, value in overrides.items():
            setattr(config, key, value)
    else:
        config = config_cls(**{**overrides, "seed": seed, "size": size})
    config.validate()
    return dataset_cls(config=config)


def _problem(generator: str, item: Mapping[str, Any]) -> Problem:
    question, answer = str(item["question"]), str(item["answer"])
    digest = hashlib.sha256(question.encode()).hexdigest()[:16]
    return Problem(f"{generator}:{digest}", generator, question, answer,
                   f"The answer is \\boxed{{{answer}}}.", item)


@functools.lru_cache(maxsize=32)
def _generate(task: str, level: str, split: str, config: tuple[tuple[str, Any], ...]
              ) -> tuple[Problem, ...]:
    card = _card()
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    count, seed = int(card["sizes"][split]), int(card["seeds"][split])
    buckets = int(card["buckets"])
    sources = generators(task, level)
    seen: set[str] = set()
    problems: list[Problem] = []
    # Draw in passes, one generator after another, each pass from its own seed, until the
    # slice is full; a seeded run therefore always yields the same problems in the same order.
    # A pass that finds nothing new means the distribution is exhausted.
    for attempt in range(100):
        before = len(problems)
        for g, (generator, curriculum_level) in enumerate(sources):
            chunk = _dataset(generator, curriculum_level,
                             seed * 1_000_003 + attempt * 101 + g, 2 * count, dict(config))
            for i in range(len(chunk)):
                item = chunk[i]
                question = str(item["question"])
                if question in seen or bucket(question, buckets) != split:
                    continue
                seen.add(question)
                problems.append(_problem(generator, item))
                if len(problems) == count:
                    return _checked(task, level, split, config, tuple(problems))
        if len(problems) == before:
            break
    raise ValueError(f"{task} {level} {split}: the generators give fewer than {count} distinct "
                     f"problems in this slice ({len(problems)}); widen the config")


def _checked(task: str, level: str, split: str, config: tuple[tuple[str, Any], ...],
             problems: tuple[Problem, ...]) -> tuple[Problem, ...]:
    expected = (_card().get("data_checksums") or {}).get(manifest_key(task, level))
    if split == "eval" and not config and expected is not None:
        digest = sha256_lines([p.problem_id for p in problems])
        if digest != expected:
            raise CardError(f"derl/ReasoningGym-v0 {task} {level}: generated manifest sha256 "
                            f"{digest} != card's {expected} (another reasoning-gym version?)")
    return problems


def manifest_key(task: str, level: str) -> str:
    """Where the card keeps the eval manifest checksum of ``task`` at ``level``."""
    return f"reasoning_gym/{task}/{level}-eval"


def generate(task: str, level: str = "L0", split: str = "train",
             config: Mapping[str, Any] | None = None) -> tuple[Problem, ...]:
    """The problems of ``task`` at ``level`` in ``split``, in manifest order. ``config``
    overrides fields of the generator's configuration (then no card checksum applies)."""
    return _generate(task, level, split, tuple(sorted((config or {}).items())))


def extract_answer(response: str) -> str | None:
    """The last ``\\boxed{}``'s content, else what follows the last "answer is" or "answer:"
    on its line (without a final full stop), else ``None``.

    >>> extract_answer("So the answer is 42."), extract_answer("\\\\boxed{7}"), extract_answer("hm")
    ('42', '7', None)
    """
    boxed = last_boxed(response)
    if boxed is not None:
        return boxed.strip()
    found = _ANSWER_IS.findall(response[-10_000:])
    if not found:
        return None
    answer = found[-1].splitlines()[0].strip().rstrip(".").strip()
    return answer or None


class ReasoningGymEnv(ProblemEnv):
    """A single-step env over a reasoning-gym task.

    Args:
        task: a reasoning-gym dataset name (e.g. ``chain_sum``, ``basic_arithmetic``).
        level: ``L0``, ``L1`` or ``L2`` (see the module docstring).
        split: ``train``, ``validation`` or ``eval``.
        config: fields of the generator's configuration to override.
        render_mode: ``"ansi"`` renders the question.
    """

    def __init__(self, task: str = "chain_sum", level: str = "L0", split: str = "train",
                 config: Mapping[str, Any] | None = None,
                 render_mode: str | None = None) -> None:
        self.task, self.level, self.split = task, level, split
        self.problems = generate(task, level, split, config)
        self.render_mode = render_mode
        self.observation_space = text_space(max(len(p.question) for p in self.problems))
        self.action_space = text_space(1 << 20)
        self._score = 0.0

    @classmethod
    def item_ids(cls, task: str = "chain_sum", level: str = "L0", split: str = "train",
                 config: Mapping[str, Any] | None = None, **_: Any) -> list[str]:
        """The problem ids of a slice, in play order (:mod:`derl_bench.envs.items`)."""
        return [p.problem_id for p in generate(task, level, split, config)]

    @classmethod
    def eval_sets(cls, task: str = "chain_sum", config: Mapping[str, Any] | None = None,
                  **_: Any) -> dict[str, dict[str, Any]]:
        """Each level's eval set of ``task`` as env kwargs (:mod:`derl_bench.envs.items`)."""
        extra = {"config": dict(config)} if config else {}
        return {level: {"split": "eval", "level": level, "task": task, **extra}
                for level in LEVELS}

    def _info(self) -> dict[str, Any]:
        return {**super()._info(), "task": self.task, "level": self.level,
                "problem_type": self.problem.kind}

    def grade(self, response: str) -> Grade:
        """Score the extracted answer with the generator's ``score_answer``; correct at 1."""
        from reasoning_gym.factory import get_score_answer_fn

        self._score = 0.0
        answer = extract_answer(response)
        if answer is not None:
            score = get_score_answer_fn(self.problem.kind)(answer, dict(self.problem.entry))
            self._score = float(max(0.0, min(1.0, score)))
        return Grade(self._score >= 1.0, answer)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._score = 0.0
        observation, reward, terminated, truncated, info = super().step(action)
        info["rg_score"] = self._score
        return observation, reward, terminated, truncated, info


__all__ = ["LEVELS", "SPLITS", "Problem", "ReasoningGymEnv", "bucket", "extract_answer",
           "generate", "generators", "manifest_key"]
