"""The ``<think>…</think><action>…</action>`` answer format of LLM agents.

Agents trained with verl-agent, RLVMR and DERL answer every turn with their reasoning in
``<think>`` tags and one command in ``<action>`` tags. :func:`parse_think_action` extracts the
command exactly as verl-agent's ALFWorld projection does, so scores are comparable:

- the whole response is lower-cased first;
- the action is the text between the first ``<action>`` and the first ``</action>``, stripped;
- without both action tags the "action" is the response's last 30 characters (lower-cased),
  which the env then rejects as inadmissible in almost every case;
- the format is valid only when the action tags were found, the response contains both
  ``<think>`` and ``</think>`` (case-sensitive, as upstream) and no CJK ideographs.

One deliberate difference: a ``</action>`` that comes *before* the first ``<action>`` counts as
missing tags (upstream would extract an empty action and call the format valid).
:func:`parse_verl_agent` is the projection exactly as verl-agent writes it, per family (each
card's ``verl_agent_projection``: ScienceWorld keeps case and falls back to the last 20
characters), for the ``rlvmr`` protocol.

    >>> parse_think_action("<think>the mug is in the sink</think>"
    ...                    "<action>Go to Sinkbasin 1</action>")
    ('go to sinkbasin 1', True)
    >>> parse_think_action("<action>look</action>")
    ('look', False)
    >>> parse_think_action("I would open the fridge")
    ('i would open the fridge', False)

:class:`ThinkActionWrapper` applies the parser in front of any text env: the inner env receives
the plain command, ``info["primitives"]["format_valid"]`` says whether the format was valid and
``info["raw_response"]`` keeps the response as the agent wrote it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, SupportsFloat

import gymnasium as gym

from derl_bench.envs.spaces import as_text
from derl_bench.family import Family
from derl_bench.observers.base import PrimitiveError

ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
FALLBACK_CHARS = 30
"""Without action tags, verl-agent keeps this many trailing characters as the action."""

_CJK = re.compile(r"[\u4e00-\u9fff]")

Parser = Callable[[str], tuple[str, bool]]
"""An action parser: one response -> ``(command, format_valid)``."""


def parse_think_action(text: str) -> tuple[str, bool]:
    """Return ``(action, format_valid)`` for one LLM response (see the module docstring)."""
    lowered = text.lower()
    start = lowered.find(ACTION_OPEN)
    end = lowered.find(ACTION_CLOSE, start + len(ACTION_OPEN)) if start >= 0 else -1
    if start < 0 or end < 0:
        return lowered[-FALLBACK_CHARS:], False
    action = lowered[start + len(ACTION_OPEN) : end].strip()
    has_think = THINK_OPEN in text and THINK_CLOSE in text
    return action, has_think and not _CJK.search(text)


def whole_response(text: str) -> tuple[str, bool]:
    """The action parser of a single-step family: the whole response is the action.

    >>> whole_response("The answer is 4.")
    ('The answer is 4.', True)
    """
    return text, True


def action_parser_for(family: Family) -> Callable[[str], tuple[str, bool]]:
    """The action parser ``family`` plays with: its card's ``action_parser`` hook, or, where
    the card names none, :func:`parse_think_action` for a multi-turn family and
    :func:`whole_response` for a single-step one. Training, serving and evaluation all ask here.

    >>> from derl_bench.family import resolve_family
    >>> parse = action_parser_for(resolve_family("derl/ALFWorld-v0"))
    >>> parse("<think>t</think><action>Look</action>")
    ('look', True)
    """
    if family.action_parser is not None:
        return family.action_parser
    return parse_think_action if family.multi_turn else whole_response


def parse_verl_agent(text: str, keep_case: bool = False,
                     fallback_chars: int = FALLBACK_CHARS) -> tuple[str, bool]:
    """``(action, format_valid)`` exactly as verl-agent's projections compute them.

    A family's card says which projection is its own (``verl_agent_projection``: ``keep_case``,
    ``fallback_chars``; :func:`verl_agent_parser` binds it). Transcribed from
    RLVMR/code/agent_system/environments/env_package/alfworld/projection.py
    (``alfworld_projection``: lower-cased, 30-character fallback) and
    .../sciworld/projection.py (``sciworld_projection``: case kept, 20-character fallback),
    zzjweb/digitalhuman. Both slice between the first ``<action>`` and the first
    ``</action>`` wherever they are, so a closing tag before the opening one gives ``''``:

        >>> parse_verl_agent("</action><think>x</think><action>look</action>", True, 20)
        ('', True)
        >>> parse_verl_agent("<think>t</think><action>Focus on Door</action>", True, 20)
        ('Focus on Door', True)
    """
    work = text if keep_case else text.lower()
    start, end = work.find(ACTION_OPEN), work.find(ACTION_CLOSE)
    if start == -1 or end == -1:
        return work[-int(fallback_chars):], False
    action = work[start + len(ACTION_OPEN) : end].strip()
    valid = text.find(THINK_OPEN) != -1 and text.find(THINK_CLOSE) != -1
    return action, valid and not _CJK.search(text)


def verl_agent_parser(projection: Mapping[str, Any] | None) -> Parser:
    """verl-agent's projection as a card states it (its ``verl_agent_projection``), as a parser.

    >>> verl_agent_parser({"keep_case": True, "fallback_chars": 20})("Go <action>Look</action>")
    ('Look', False)
    """
    projection = projection or {}
    return functools.partial(parse_verl_agent,
                             keep_case=bool(projection.get("keep_case", False)),
                             fallback_chars=int(projection.get("fallback_chars", FALLBACK_CHARS)))


class ThinkActionWrapper(gym.Wrapper):
    """Let an env that takes plain commands take whole ``<think>…<action>…`` responses.

    ``step(response)`` parses the response, steps the inner env with the extracted command and
    adds ``format_valid`` (1.0 or 0.0) to ``info["primitives"]`` (0.0 on reset) and the
    response to ``info["raw_response"]``. Put it outside
    :class:`~derl_bench.observers.ObserveWrapper` (as ``gymnasium.make`` returns it) so that the
    other observers see the plain command::

        >>> class Echo(gym.Env):
        ...     def reset(self, *, seed=None, options=None):
        ...         return "", {"primitives": {"success": 0.0}}
        ...     def step(self, action):
        ...         return f"you said {action}", 0.0, False, False, {"primitives": {"success": 0.0}}
        >>> env = ThinkActionWrapper(Echo())
        >>> obs, info = env.reset()
        >>> info["primitives"]
        {'success': 0.0, 'format_valid': 0.0}
        >>> obs, r, term, trunc, info = env.step("<think>…</think><action>Look</action>")
        >>> obs, info["primitives"]["format_valid"], info["action"]
        ('you said look', 1.0, 'look')
    """

    primitive_names: tuple[str, ...] = ("format_valid",)

    def __init__(self, env: gym.Env, parser: Parser = parse_think_action) -> None:
        """``parser`` is the family's action parser, as its card names it (``action_parser``;
        :func:`verl_agent_parser` for the rlvmr protocol)."""
        super().__init__(env)
        if not callable(parser):
            raise ValueError(f"parser must be a function text -> (command, format_valid), "
                             f"got {parser!r}")
        self.parser = parser

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, _with_primitive(info, 0.0)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        response = as_text(action)
        command, valid = self.parser(response)
        obs, reward, terminated, truncated, info = self.env.step(command)
        info = _with_primitive(info, float(valid))
        info["raw_response"] = response
        info["action"] = command
        return obs, reward, terminated, truncated, info


def _with_primitive(info: dict[str, Any], format_valid: float) -> dict[str, Any]:
    info = dict(info)
    primitives = dict(info.get("primitives", {}))
    if "format_valid" in primitives:
        raise PrimitiveError("primitive names emitted twice: ['format_valid']")
    primitives["format_valid"] = format_valid
    info["primitives"] = primitives
    return info
