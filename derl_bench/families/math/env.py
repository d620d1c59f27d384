"""Single-step math envs: ``derl/GSM8K-v0`` and ``derl/MATH-v0``.

Each is a :class:`~derl_bench.envs.problem.ProblemEnv`: the observation is a problem; the action
is the model's whole response; the episode ends after that one step with reward 1.0 for a
correct final answer and 0.0 otherwise.

With GSM8K in the data root (``derl-bench data download gsm8k``)::

    import gymnasium as gym
    env = gym.make("derl_bench:derl/GSM8K-v0", split="test")
    problem, info = env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step("... so the answer is 18.")
    info["reference_answer"], reward, terminated        # ('18', 1.0, True)

Splits (see ``envs/math.md``): ``train``, ``validation`` (a fixed slice of the upstream train
file, disjoint from ``train``) and ``test``; MATH also has ``math500``.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derl_bench.cards import load_card
from derl_bench.data.read import damaged, numbered_jsonl, read_json
from derl_bench.data.root import dataset_dir
from derl_bench.envs.problem import ProblemEnv
from derl_bench.envs.spaces import text_space
from derl_bench.grading import (
    Grade,
    MathVerifier,
    grade_gsm8k,
    grade_math,
    gsm8k_reference,
    last_boxed,
)


@dataclass(frozen=True)
class Problem:
    """One math problem with its reference answer and full reference solution."""

    problem_id: str
    question: str
    answer: str
    solution: str
    subject: str = ""
    level: str = ""


def upstream_data(dataset: str, upstream_split: str) -> str:
    """The file or folder, under the dataset's folder, that an upstream split is read from."""
    if dataset == "gsm8k":
        return f"{upstream_split}.jsonl"
    return "math500_test.jsonl" if upstream_split == "math500" else f"MATH/{upstream_split}"


def _row(path: Path, row: Any, fields: tuple[str, ...], line: int | None = None) -> Any:
    # A row that parses but lacks what a problem needs is as damaged as one that does not.
    if not isinstance(row, dict) or any(not isinstance(row.get(f), str) for f in fields):
        raise damaged(path, f"not a problem (needs the text fields {', '.join(fields)})", line)
    return row


def _gsm8k_problems(root: Path, upstream_split: str) -> list[Problem]:
    path = root / upstream_data("gsm8k", upstream_split)
    rows = [_row(path, row, ("question", "answer"), line) for line, row in numbered_jsonl(path)]
    return [
        Problem(f"{upstream_split}/{i}", row["question"], gsm8k_reference(row["answer"]),
                row["answer"])
        for i, row in enumerate(rows)
    ]


def _math_problem(problem_id: str, row: dict[str, Any]) -> Problem:
    answer = row.get("answer") or last_boxed(row["solution"]) or ""
    level = row.get("level", "")
    return Problem(problem_id, row["problem"], answer, row["solution"],
                   subject=row.get("subject") or row.get("type", ""),
                   level=f"Level {level}" if isinstance(level, int) else str(level))


def _math_problems(root: Path, upstream_split: str) -> list[Problem]:
    path = root / upstream_data("math", upstream_split)
    if upstream_split == "math500":
        rows = [_row(path, row, ("unique_id", "problem", "solution"), line)
                for line, row in numbered_jsonl(path)]
        return [_math_problem(row["unique_id"], row) for row in rows]
    files = sorted(path.glob("*/*.json"), key=lambda p: (p.parent.name, int(p.stem)))
    return [_math_problem(f"{upstream_split}/{file.parent.name}/{file.name}",
                          _row(file, read_json(file), ("problem", "solution")))
            for file in files]


def _validation_ids(problems: list[Problem], size: int) -> set[str]:
    # Chosen by hash, not by position, so the slice is spread over the file and stable
    # under any reordering of it.
    ranked = sorted(problems, key=lambda p: hashlib.sha256(p.problem_id.encode()).hexdigest())
    return {p.problem_id for p in ranked[:size]}


@functools.lru_cache(maxsize=16)
def load_problems(dataset: str, split: str, root: str | None = None) -> tuple[Problem, ...]:
    """Problems of ``dataset`` (``gsm8k`` or ``math``) and ``split``, in a stable order."""
    spec = load_card("math")["datasets"][dataset]
    if split not in spec["splits"]:
        raise ValueError(f"{dataset} has no split {split!r}; choose from {sorted(spec['splits'])}")
    split_spec = spec["splits"][split]
    folder = dataset_dir(dataset, Path(root) if root else None)
    reader = _gsm8k_problems if dataset == "gsm8k" else _math_problems
    problems = reader(folder, split_spec["upstream"])
    if "validation_slice" in split_spec or "minus_validation" in split_spec:
        held_out = _validation_ids(problems, int(spec["validation_size"]))
        keep = "validation_slice" in split_spec
        problems = [p for p in problems if (p.problem_id in held_out) == keep]
    if len(problems) != split_spec["count"]:
        raise ValueError(f"{dataset}/{split}: {len(problems)} problems, "
                         f"card says {split_spec['count']}")
    return tuple(problems)


class MathEnv(ProblemEnv):
    """A single-step env over GSM8K or MATH problems.

    Args:
        dataset: ``"gsm8k"`` or ``"math"``.
        split: ``train``, ``validation``, ``test`` (and ``math500`` for MATH).
        data_root: data root to read from (default: ``$DERL_BENCH_DATA``).
        grader_timeout: seconds math-verify may spend on one answer before it counts as wrong.
    """

    def __init__(
        self,
        dataset: str = "gsm8k",
        split: str = "train",
        data_root: str | None = None,
        grader_timeout: float = 5.0,
        render_mode: str | None = None,
    ) -> None:
        if dataset not in ("gsm8k", "math"):
            raise ValueError(f"dataset must be 'gsm8k' or 'math', not {dataset!r}")
        self.dataset = dataset
        self.split = split
        self.hash_answer_solutions = dataset == "gsm8k"
        """Whether a reference solution ends in a ``#### answer`` line (GSM8K's format)."""
        self.problems = load_problems(dataset, split, data_root)
        self.render_mode = render_mode
        self.observation_space = text_space(max(len(p.question) for p in self.problems))
        self.action_space = text_space(1 << 20)
        self._verifier = MathVerifier(grader_timeout) if dataset == "math" else None
        self._index: int | None = None
        self._done = True

    @property
    def problem(self) -> Problem:
        """The current problem (after :meth:`reset`)."""
        return super().problem

    @classmethod
    def item_ids(cls, dataset: str = "gsm8k", split: str = "train", data_root: str | None = None,
                 **_: Any) -> list[str]:
        """The problem ids of a split, in play order (:mod:`derl_bench.envs.items`)."""
        return [p.problem_id for p in load_problems(dataset, split, data_root)]

    @classmethod
    def data_files(cls, dataset: str = "gsm8k", split: str = "train", **_: Any) -> list[str]:
        """What a split reads from the data root, as the data catalogue names it
        (:mod:`derl_bench.envs.items`); nothing for a split the dataset lacks."""
        splits = load_card("math")["datasets"].get(dataset, {}).get("splits", {})
        if split not in splits:
            return []
        return [f"{dataset}/{upstream_data(dataset, splits[split]['upstream'])}"]

    @classmethod
    def eval_sets(cls, dataset: str = "gsm8k", **_: Any) -> dict[str, dict[str, Any]]:
        """Each level's eval set: the dataset's ``levels`` on the card, else its ``eval_split``
        as the one level L0 (:mod:`derl_bench.envs.items`)."""
        spec = load_card("math")["datasets"][dataset]
        levels = spec.get("levels") or {"L0": spec["eval_split"]}
        return {str(level): {"split": str(split)} for level, split in levels.items()}

    def grade(self, response: str) -> Grade:
        """Grade ``response`` against the current problem's reference answer."""
        if self.dataset == "gsm8k":
            return grade_gsm8k(response, self.problem.answer)
        return grade_math(response, self.problem.answer, self._verifier)

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.close()
        super().close()

