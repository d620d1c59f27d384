"""The proxy benchmark's methods, its budget (:class:`ProxyConfig`) and the CI-sized preset."""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from derl_bench.experiments.rescore import PICK_RULES
from derl_bench.meta.methods import CONTROLS_GROUP, methods

if TYPE_CHECKING:
    from derl_bench.evaluation.families import FamilyAdapter
    from derl_bench.family import Family

HAND_MADE: dict[str, str] = {
    "outcome": "outcome",
    "outcome + format": "outcome + format_boxed",
    "average": "(g1 + g2 + g3 + g4) / 4",
}
"""The hand-made baselines and their Meta-Rewards (each run by the ``fixed`` method)."""


def search_methods() -> tuple[str, ...]:
    """The methods of the registry (:mod:`derl_bench.meta.methods`) that search for a reward:
    those whose proposer does not learn first (the black-box searches), then those whose
    proposer learns (DERL's), then the controls, each in registry order.

    >>> search_methods()[:5]
    ('random', 'revolve', 'derl', 'derl-pop', 'derl-frozen')
    """
    found = [m for m in methods() if m.searches]
    return tuple(m.name for m in sorted(found, key=lambda m: (m.group == CONTROLS_GROUP,
                                                              m.learns)))


WARM_STARTED: dict[str, str] = {"outcome-pop": "outcome", "random-pop": "random"}
"""Baselines given DERL-pop's population warm start (every generation continues from the best
policy so far), and the method each is a variant of: the fair comparison for ``derl-pop``."""


def proxy_methods() -> tuple[str, ...]:
    """Every row the benchmark can run, in the order results list them: the hand-made rewards,
    the search methods (:func:`search_methods`), the warm-started baselines."""
    return (*HAND_MADE, *search_methods(), *WARM_STARTED)




PAPER_BUDGET = ("derl", "derl-frozen", "random", "revolve", "average")
"""The full benchmark's methods: the official code's 20 x 8 for DERL, its frozen control, the
two black-box searches and the best hand-made reward (by the reward landscape)."""


ENV_ID = "derl/Arithmetic-v0"
"""The env of the proxy benchmark and, by default, of the proposer check: the one place they
name it."""


LEVELS = ("L0", "L1", "L2")


@dataclass(frozen=True)
class BaseModelSpec:
    """The base policy: the tiny model, fine-tuned on the env's demonstrations (see its card).
    The defaults are Arithmetic's; a card with a ``base_policy`` block sets its own
    (:func:`base_spec_for`)."""

    steps: int = 1200
    format_dropout: float = 0.85
    learning_rate: float = 3e-3
    batch_size: int = 32
    seed: int = 0


def base_spec_for(family: Family) -> BaseModelSpec:
    """The base policy recipe of ``family``'s env: its card's ``base_policy`` block (whose
    mixture of demonstration modes the env itself draws from), else Arithmetic's defaults."""
    block = family.card.get("base_policy")
    if not block:
        return BaseModelSpec()
    return BaseModelSpec(steps=int(block["steps"]), format_dropout=0.0,
                         learning_rate=float(block["learning_rate"]),
                         batch_size=int(block["batch_size"]), seed=int(block["seed"]))


@dataclass
class ProxyConfig:
    """The benchmark's budget. The defaults are the full benchmark (see ``docs/proxy.md``)."""

    output: str = "runs/proxy"
    env_id: str = ENV_ID
    """The task: Arithmetic, or one of the reward-discovery tasks (docs/tasks.md)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    methods: list[str] = field(default_factory=lambda: list(PAPER_BUDGET))
    outer_steps: int = 20
    population: int = 8
    validation_episodes: int | None = None
    """``None``: the card's ``proxy.validation_episodes``, else 1,000."""
    eval_limit: int | None = None
    inner: dict[str, Any] = field(default_factory=lambda: {
        "env_id": ENV_ID, "steps": 20, "group_size": 8, "prompts_per_step": 8,
        "learning_rate": 3e-4, "kl_coef": 0.0, "max_new_tokens": 40, "micro_batch_size": 64,
        "save_every": 0, "keep_checkpoints": 1, "tensorboard": False,
    })
    base: BaseModelSpec | None = None
    """``None``: the env's own recipe (:func:`base_spec_for`)."""
    optimizer_sft_examples: int = 206
    optimizer_sft_steps: int = 150
    workers: int = 2
    optimizer_recipe: dict[str, Any] = field(default_factory=dict)
    """Further meta recipe fields for the Meta-Optimizer's methods (``derl``, ``derl-pop``,
    ``derl-frozen``), over the benchmark's: e.g. ``{"protocol": "derl-official"}``, or
    ``{"inner": {"reward_semantics": "derl"}}`` beside it to change only the semantics."""
    retrain_seeds: int = 3
    """The primary endpoint re-trains each method's picked reward on this many fresh seeds
    (0: skip it; see ``docs/tasks.md``)."""
    endpoint_from: int = 10
    """The primary endpoint averages the proposals' validation scores over generations
    ``endpoint_from`` to the last (see ``docs/proxy.md``)."""
    pick: str = "rescore"
    """How each method's final reward (the one the primary endpoint re-trains) is picked:
    ``"rescore"``, its ``pick_top`` best distinct rewards by validation trained again on
    ``rescore_seeds`` fresh seeds and the best fresh mean picked; or ``"best-run"``, its single
    best validation run (the rule of the boards made before this setting;
    :mod:`derl_bench.experiments.rescore`)."""
    pick_top: int = 3
    """How many of a method's best rewards the ``"rescore"`` pick re-scores."""
    rescore_seeds: int = 3
    """Fresh inner seeds each re-scored reward trains on: the pick's candidates, and the
    proposals of ``derl`` and ``derl-frozen`` in the mechanism's generations (a repeat counted
    at its reward's re-scored value). 0: nothing is re-scored (the pick must be
    ``"best-run"``)."""

    def __post_init__(self) -> None:
        known = proxy_methods()
        unknown = [m for m in self.methods if m not in known]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {', '.join(known)}")
        if not self.seeds or self.workers < 1:
            raise ValueError("at least one seed and one worker are required")
        if self.pick not in PICK_RULES:
            raise ValueError(f"pick must be one of {', '.join(PICK_RULES)}, not {self.pick!r}")
        if self.pick_top < 1 or self.rescore_seeds < 0:
            raise ValueError("pick_top must be at least 1 and rescore_seeds at least 0")
        if self.pick == "rescore" and self.rescore_seeds < 1:
            raise ValueError("pick 'rescore' needs rescore_seeds >= 1 (or pick 'best-run')")
        # The inner runs train on the benchmark's task, whatever the recipe's dict says.
        self.inner = {**self.inner, "env_id": self.env_id}
        if self.base is None:
            self.base = base_spec_for(self.family)
        if self.validation_episodes is None:
            proxy = self.family.card.get("proxy") or {}
            self.validation_episodes = int(proxy.get("validation_episodes", 1000))

    @functools.cached_property
    def family(self) -> Family:
        """The task's family, resolved on first use and read by every experiment on this
        config (its card's ``base_policy``, ``proxy``, ``planted_reward``, ``trap_modes``).
        Not a field: ``results.json`` keeps the env id, not the card."""
        from derl_bench.family import resolve_family

        return resolve_family(self.env_id)

    @property
    def adapter(self) -> FamilyAdapter:
        """The task's evaluation rules, made by its :attr:`family` (once per env id)."""
        from derl_bench.evaluation.families import resolve_adapter

        return resolve_adapter(self.env_id, self.family)

    @property
    def base_spec(self) -> BaseModelSpec:
        """The base policy's recipe (set by ``__post_init__``)."""
        assert self.base is not None
        return self.base

    @property
    def budget(self) -> int:
        """Inner runs per search method and seed."""
        return self.outer_steps * self.population


SMALL: dict[str, Any] = {"seeds": [0], "outer_steps": 1, "population": 2, "validation_episodes": 16,
         "retrain_seeds": 2, "pick_top": 2, "rescore_seeds": 1,
         "endpoint_from": 0,
         "eval_limit": 16, "optimizer_sft_examples": 32, "optimizer_sft_steps": 10,
         "inner": {"env_id": ENV_ID, "steps": 2, "group_size": 4, "prompts_per_step": 2,
                   "learning_rate": 3e-4, "kl_coef": 0.0, "max_new_tokens": 24,
                   "micro_batch_size": 64, "save_every": 0, "keep_checkpoints": 1,
                   "tensorboard": False}}
"""``--small``: the whole pipeline at a size CI runs in about a minute (numbers meaningless)."""


def small(config: ProxyConfig) -> ProxyConfig:
    """``config`` at the ``--small`` size."""
    shrunk = replace(config, **{**SMALL, "base": replace(config.base_spec, steps=30)})
    shrunk.family = config.family  # the same task: its family is handed on, not resolved again
    return shrunk


def config_json(config: ProxyConfig) -> dict[str, Any]:
    """``config`` as results.json keeps it."""
    return json.loads(json.dumps(asdict(config), default=str))


RERUN_FREE = ("methods", "seeds", "workers", "output")
"""Settings that may differ between runs whose rows are merged into one result: a board grows
by methods and by seeds, one (method, seed) run at a time."""


def slug(method: str) -> str:
    """A method's name as a file name: ``outcome + format`` -> ``outcome-format``."""
    return method.replace(" + ", "-").replace(" ", "-")


__all__ = ["ENV_ID", "HAND_MADE", "LEVELS", "PAPER_BUDGET", "RERUN_FREE",
           "SMALL", "WARM_STARTED", "BaseModelSpec", "ProxyConfig", "base_spec_for", "config_json",
           "proxy_methods", "search_methods", "slug", "small"]
