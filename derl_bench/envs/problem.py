"""The single-step env every single-step family builds on: :class:`ProblemEnv`.

The observation is a problem; the action is the model's whole response; the episode ends after
that one step with reward 1.0 for a correct answer and 0.0 otherwise. Each single-step family
subclasses it with its own problems and its own grading.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from derl_bench.envs.options import reset_options
from derl_bench.envs.spaces import as_text
from derl_bench.grading import Grade


class ProblemEnv(gym.Env[str, str]):
    """A single-step env over a tuple of problems: ``reset`` picks one (by seed, or by
    ``options={"index": i}``), ``step`` grades the whole response with :meth:`grade`.

    Subclasses set ``problems`` (each with ``problem_id``, ``question``, ``answer`` and
    ``solution``), ``split`` and the spaces, and implement :meth:`grade`; :meth:`_info` may
    add fields.
    """

    metadata = {"render_modes": ["ansi"]}
    max_steps = 1
    problems: tuple[Any, ...]
    split: str
    render_mode: str | None = None
    _index: int | None = None
    _done: bool = True

    @property
    def problem(self) -> Any:
        """The current problem (after :meth:`reset`)."""
        if self._index is None:
            raise gym.error.ResetNeeded("call reset() before reading the problem")
        return self.problems[self._index]

    def _info(self) -> dict[str, Any]:
        p = self.problem
        return {
            "problem_id": p.problem_id,
            "split": self.split,
            "reference_answer": p.answer,
            "reference_solution": p.solution,
            "index": self._index,
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = reset_options(options, ("index",))
        if "index" in options:
            index = int(options["index"])
            if not 0 <= index < len(self.problems):
                raise IndexError(f"index {index} out of range for {len(self.problems)} problems")
        else:
            index = int(self.np_random.integers(len(self.problems)))
        self._index = index
        self._done = False
        return self.problem.question, self._info()

    def grade(self, response: str) -> Grade:
        """Grade ``response`` against the current problem's reference answer."""
        raise NotImplementedError

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise gym.error.ResetNeeded("the episode is over; call reset() first")
        response = as_text(action)
        try:
            grade = self.grade(response)
        except Exception:  # a grader bug must never crash a training run: count it wrong
            grade = Grade(False, None)
        self._done = True
        info = self._info()
        info.update(
            extracted_answer=grade.extracted,
            correct=grade.correct,
            grading_timed_out=grade.timed_out,
            response=response,
        )
        return "", float(grade.correct), True, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi" and self._index is not None:
            return self.problem.question
        return None
