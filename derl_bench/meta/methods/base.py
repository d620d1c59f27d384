"""What a reward-discovery method is: one :class:`Method` object, exported by one module.

A method says how it proposes Meta-Rewards each generation (its ``proposer``, built from the
run's recipe), which recipe fields it reads and what it refuses, whether its proposer learns
from the scores (the Meta-Optimizer) and whether inner runs are warm-started, the protocols it
runs under, and how the boards group the records it writes. The meta loop, the command line,
the experiments and the leaderboards read these facts from the method; none of them names a
method. :mod:`derl_bench.meta.methods` holds the registry.

A method's functions receive the run's recipe, a :class:`~derl_bench.meta.config.MetaConfig`
(typed loosely here: the recipe is checked against the registry, which sits below it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from derl_bench.meta.search import Proposer

SEARCHED_GROUP = "RL, searched reward"
"""The board group of the methods that search for a reward."""
HAND_MADE_GROUP = "RL, hand-made reward"
"""The board group of rows trained on a hand-made reward (``fixed``, GRPO on an outcome)."""

CONTROLS_GROUP = "Controls: searchers known better or worse"
"""The board group of the control searchers (``control-...``): searchers better or worse than
random search by construction, which show whether a board can tell searchers apart."""

ProposerFactory = Callable[[Any, str, bool], Proposer]
"""``proposer(recipe, env_id, cold_start)``: the proposer of a run of ``recipe`` (a
:class:`~derl_bench.meta.config.MetaConfig`), proposing rewards over exactly the primitives
``env_id`` emits; ``cold_start=False`` skips a model's cold-start fine-tuning (a resumed run
loads its weights instead). ``recipe.family`` is ``env_id``'s resolved family: a proposer
reads the card and the primitives from it (``env_primitives(env_id, recipe.family)``) rather
than looking the id up again."""
Check = Callable[[Any], "str | None"]
"""``check(recipe)``: what is wrong with ``recipe`` for this method, or ``None``; the
recipe's ``family`` is resolved before it runs."""


def method_head(method: str) -> str:
    """The first word of a method name as a board reads it: lower case, up to a space, hyphen,
    comma, semicolon or parenthesis.

    >>> method_head("derl-pop (seed 1)"), method_head("GRPO, outcome reward")
    ('derl', 'grpo')
    """
    return re.split(r"[ ,;(-]", method.strip().lower(), maxsplit=1)[0]


@dataclass(frozen=True)
class Method:
    """One reward-discovery method (``derl-bench meta --method NAME``)."""

    name: str
    """What a recipe's ``method`` says."""
    summary: str
    """One line: what it does."""
    proposer: ProposerFactory
    """How it proposes each generation's rewards (:data:`ProposerFactory`)."""
    learns: bool = False
    """Its proposer is a model trained by the scores
    (:class:`~derl_bench.meta.search.LearningProposer`: ``observe`` takes the validity of each
    proposal, ``save`` writes the model at the end), that runs on the inner runs' device."""
    warm_starts: bool = False
    """Every inner run after the first generation starts from the best policy so far (any
    method does with the recipe's ``warm_start``)."""
    searches: bool = True
    """It searches for a reward; ``False``: it trains a given one (``fixed``)."""
    min_population: int = 1
    """The smallest ``population`` it runs with, and why (:attr:`population_why`)."""
    population_why: str = ""
    settings: tuple[str, ...] = ()
    """The recipe fields it reads beyond the budget (``population``, ``outer_steps``, ``seed``)
    and the inner recipe."""
    check: Check | None = None
    """What else it refuses in a recipe (:data:`Check`)."""
    protocols: tuple[str, ...] = ("derl",)
    """The protocols (:data:`~derl_bench.meta.config.PROTOCOLS`) it runs under."""
    protocol_values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Values a protocol sets for this method only, over the protocol's own, by protocol."""
    group: str = SEARCHED_GROUP
    """The method group the boards file its rows under."""
    label: str = ""
    """The method name its result records carry (default: :attr:`name`); a board files every
    row whose method's first word is the label's (:func:`method_head`) in :attr:`group`."""

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip():
            raise ValueError(f"a method needs a name without surrounding spaces, got "
                             f"{self.name!r}")
        if self.min_population < 1:
            raise ValueError(f"method {self.name}: min_population must be at least 1")
        if not self.label:
            object.__setattr__(self, "label", self.name)

    @property
    def head(self) -> str:
        """The first word of its label, by which boards group its rows."""
        return method_head(self.label)
