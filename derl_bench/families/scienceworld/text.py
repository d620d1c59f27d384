r"""What the simulator's text means, and what text may be sent to it.

    >>> location_in("You move to the kitchen.")
    'kitchen'
    >>> parse_goal_progress("Sequential Subgoals:\n0\ttrue\tfocus\n1\tfalse\theat\n")
    (1, 2)
    >>> clean_action("open\x00door")
    'open door'
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from derl_bench.envs.spaces import as_text

NO_MATCH = "No known action matches that input."
"""The simulator's answer to input its parser cannot match to an action."""
_LOCATION_PATTERNS = (
    re.compile(r"^This (?:room|outside location|location) is called the (.+?)\.", re.MULTILINE),
    re.compile(r"^You move to the (.+?)\.", re.MULTILINE),
    re.compile(r"^You teleport to the (.+?)\.", re.MULTILINE),
)
_SUBGOAL_LINE = re.compile(r"^\d+\t(true|false)\t", re.MULTILINE)


def clean_action(action: Any) -> str:
    """Make any action safe to send: text, valid UTF-8, control characters as spaces."""
    text = as_text(action).encode("utf-8", errors="replace").decode("utf-8")  # surrogates -> '?'
    if text.isprintable():
        return text
    return "".join(" " if unicodedata.category(c) in ("Cc", "Cs") else c for c in text)


def parse_goal_progress(text: str) -> tuple[int, int]:
    """``(done, total)`` over the task's sequential subgoals in ``getGoalProgressStr`` output.

    The simulator lists the subgoals the task requires in order ("Sequential Subgoals"), then
    unordered and optional ones (alternative heaters, say), which are not counted.
    """
    start = text.find("Sequential Subgoals")
    if start < 0:
        return 0, 0
    end = text.find("Unordered and Optional Subgoals", start)
    states = _SUBGOAL_LINE.findall(text[start : end if end >= 0 else len(text)])
    return sum(s == "true" for s in states), len(states)


def location_in(observation: str) -> str | None:
    """The room an observation says the agent is in (after a look, move or teleport)."""
    for pattern in _LOCATION_PATTERNS:
        match = pattern.search(observation)
        if match:
            return match.group(1)
    return None
