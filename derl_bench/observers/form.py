"""Form detectors: a general library of signals about how a text response looks.

A reward designer's library holds many such detectors (does the response use a code block,
a list, a link, a question back to the user, ...), and on any one task most of them say
nothing: the task's answers never have that form. ``derl/DigitsBalance-v0`` puts this library
beside its two informative primitives, so that a reward built at random rarely holds them, as
with a real library (docs/tasks.md). Each detector reads the response text alone:

    >>> values = FormDetectors().detect("1. Compute: 3 + 4 = 7.\\n2. \\\\boxed{7}")
    >>> values["line_count"], values["box_count"], values["has_equals"], values["has_list"]
    (2.0, 1.0, 1.0, 0.0)
    >>> values["starts_with_box"], values["ends_with_period"], values["word_count"]
    (0.0, 0.0, 1.0)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import gymnasium as gym

from derl_bench.observers.base import Observer, Transition

MAX_CHARS = 100_000
"""Longer responses are read up to here: every detector stays linear and bounded."""


def _has(pattern: str) -> Callable[[str], float]:
    compiled = re.compile(pattern)
    return lambda text: float(compiled.search(text) is not None)


DETECTORS: dict[str, Callable[[str], float]] = {
    "box_count": lambda text: float(text.count("\\boxed{")),
    "line_count": lambda text: float(len(text.splitlines()) or 1),
    # Letter runs that are not LaTeX commands: "\boxed" is markup, not a word.
    "word_count": lambda text: float(len(re.findall(r"(?<![\\A-Za-z])[A-Za-z]{2,}", text))),
    "has_code": _has(r"```"),
    "has_think": _has(r"<think>"),
    "has_equals": _has(r"="),
    "has_decimal": _has(r"\d\.\d"),
    "has_negative": _has(r"(?<![\w)])-\d"),
    "has_percent": _has(r"%"),
    "has_question_mark": _has(r"\?"),
    "has_bold": _has(r"\*\*"),
    "has_list": _has(r"(?m)^\s*[-*] "),
    "has_url": _has(r"https?://"),
    "non_ascii": _has(r"[^\x00-\x7f]"),
    "has_uppercase": _has(r"[A-Z]"),
    "ends_with_period": lambda text: float(text.rstrip().endswith(".")),
    "starts_with_box": lambda text: float(text.lstrip().startswith("\\boxed{")),
    "has_latex": _has(r"\\[A-Za-z]+"),
    "has_parens": _has(r"[()]"),
    "has_comma": _has(r","),
}
"""Name -> detector. Counts (``box_count``, ``line_count``, ``word_count``) are in [0, inf),
the rest 0 or 1."""


class FormDetectors(Observer):
    """Every detector of :data:`DETECTORS`, in its order."""

    names = tuple(DETECTORS)

    def detect(self, response: str) -> dict[str, float]:
        """Each detector's value on ``response``."""
        text = response[:MAX_CHARS]
        return {name: detector(text) for name, detector in DETECTORS.items()}

    def observe(self, env: gym.Env, t: Transition) -> Mapping[str, float]:
        return self.detect(t.action)


__all__ = ["DETECTORS", "FormDetectors", "MAX_CHARS"]
