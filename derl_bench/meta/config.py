"""One dataclass configures a reward-discovery run; YAML recipes fill it.

    name: derl-gsm8k
    method: derl            # derl | derl-pop | derl-frozen | random | revolve | fixed
    protocol: derl          # derl | derl-official (the released code's choices, PROTOCOLS)
    outer_steps: 2
    population: 3
    inner:                  # TrainConfig fields shared by every inner GRPO run
      env_id: derl/GSM8K-v0
      model: tiny
      steps: 2
    optimizer:              # OptimizerConfig fields: the Meta-Optimizer (derl, derl-pop, ...)
      max_new_tokens: 24    # or flat, as optimizer_max_new_tokens: 24
"""

from __future__ import annotations

from dataclasses import InitVar, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from derl_bench.family import Family, find_family
from derl_bench.grpo.config import (
    ConfigError,
    TrainConfig,
    config_from_dict,
    parse_overrides,
    read_recipe,
)
from derl_bench.meta.methods import Method, method_named, methods, registry
from derl_bench.meta.optimizer_config import OptimizerConfig
from derl_bench.settings import COUNT, SEED, TEMPERATURE, refuse

PROTOCOLS: dict[str, dict[str, Any]] = {
    "derl": {},
    # The released DERL code (sitaocheng/DERL, commit e9f0ff9); each value's source is in
    # docs/meta-loop.md, "The derl-official protocol".
    "derl-official": {
        "outer_steps": 20,                          # grpo_coordinator.py:28
        "population": 8,                            # grpo_coordinator.py:29
        "optimizer.decoder": "whitelist",           # constrained_rollout.py:66-118, :236
        "optimizer.temperature": 0.7,               # constrained_rollout.py:229
        "optimizer.max_new_tokens": 128,            # constrained_rollout.py:232
        "invalid_score": -1.0,                      # expression_check.py:57-61
        "optimizer.invalid": "drop",                # ray_trainer.py:955-960
        "constant_rewards": "train",                # every valid formula is trained
        "optimizer.learning_rate": 1e-6,            # run_qwen2_5_05b_instr_math_meta_rl.sh:35
        "optimizer.kl_coef": 0.001,                 # :39-41, low_var_kl = k3
        "optimizer.epochs": 4,                      # :43
        "optimizer.reference_reset": True,          # :34, the iteration's model
        "optimizer.advantage": "raw",               # ray_trainer.py:1034, core_algos.py:206-208
        "optimizer.cold_start": "paper",            # dataset/cold_start_training_data.json
        "warm_start_from": "previous",              # grpo_coordinator_population.py:322-371
        "inner.reward_semantics": "derl-official",  # verl/utils/reward_score/__init__.py:36-48
    },
}
"""Each protocol's values for the recipe fields it sets (``inner.X`` is the inner recipe's
field ``X``, ``optimizer.X`` the Meta-Optimizer's); a field the recipe sets itself keeps the
recipe's value. A method adds values of its own for a protocol
(:attr:`~derl_bench.meta.methods.base.Method.protocol_values`), and names the protocols it runs
under: ``derl-official`` the Meta-Optimizer's methods only (the released code has DERL and
DERL-pop; the frozen control is DERL at learning rate 0)."""
PROTOCOL_NOTES = {"derl-official": "it reproduces the released DERL code"}
"""Why a protocol runs only some methods, where one does."""
BATCH_INNER = ("auto", "true", "false")
PLACEMENT_FIELDS = ("executor", "ray_address", "workers", "num_cpus", "num_gpus", "batch_inner",
                    "progress")
"""Fields that say where and how visibly a run executes, not what it computes: a resumed run
may change them (move to a cluster, say)."""


@dataclass
class MetaConfig:
    """A reward-discovery run: the search method, its budget and the inner GRPO recipe."""

    name: str = "derl"
    method: str = "derl"
    """A method of the registry (:mod:`derl_bench.meta.methods`): ``derl`` (an LLM
    Meta-Optimizer trained by GRPO on validation scores), ``derl-pop`` (the same, every inner
    run warm-started from the best policy so far), ``derl-frozen`` (the control that isolates
    learning: DERL's cold-started Meta-Optimizer and sampler with learning rate 0), ``random``
    (random search), ``revolve`` (island evolution), ``fixed`` (the hand-made ``reward`` at the
    same budget: one inner run per candidate slot, each with its own seed) or one from outside
    the package."""
    protocol: str = "derl"
    """``derl`` (derl-bench's settings) or ``derl-official`` (the released DERL code's
    choices, :data:`PROTOCOLS`, for the math families and the DERL methods). A protocol fills
    the fields a recipe leaves unset when the recipe is read (:func:`meta_config_from_dict`);
    a field the recipe sets keeps its value."""
    reward: str | None = None
    """``fixed``: the hand-made Meta-Reward."""
    warm_start: bool = False
    """Start every inner run after the first generation from the best policy so far, as
    ``derl-pop`` always does: gives a baseline (``fixed``, ``random``, ``revolve``) the same
    population warm start, so it can be compared with ``derl-pop`` at an equal budget."""
    inner: TrainConfig = field(default_factory=TrainConfig)
    """The recipe of every inner run (``meta_reward`` is set per candidate); a mapping of
    TrainConfig fields is accepted and checked. Its ``seed`` defaults to the run's ``seed``."""
    outer_steps: int = 2
    """Generations: each proposes ``population`` Meta-Rewards and trains one policy per reward."""
    population: int = 3
    """Meta-Rewards per generation (the Meta-Optimizer's GRPO group size)."""
    warm_start_from: str = "best"
    """Warm starts (``derl-pop``, ``warm_start``) continue from the ``best`` policy so far, or
    from the best of the ``previous`` generation only (the official DERL-pop); with no scored
    candidate there, from the recipe's model."""
    validation_split: str | None = None
    """Split the inner policies are scored on (default ``validation``: every env has one that
    inner training never sees and that shares nothing with the eval sets)."""
    validation_episodes: int = 16
    """Size of the fixed validation set: the first items of the validation split, each once."""
    validation_seed: int = 10_000
    validation_temperature: float = 0.0
    """Sampling temperature of validation; 0 decodes greedily (deterministic)."""
    retries: int = 1
    """Times a failed inner run (exception, out of memory, env crash) is retried before its
    candidate is excluded from the generation's group (never scored as a bad reward)."""
    eval_levels: list[str] | None = None
    """Levels the best policy is evaluated on at the end of the run (the headline score), each
    one the inner env's card lists; ``None``: every one of them, ``[]``: none."""
    eval_limit: int | None = None
    """Evaluate on the first this-many episodes of each eval set (``None``: all of them)."""
    seed: int = 0

    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """The Meta-Optimizer's settings (``derl``, ``derl-pop``, ``derl-frozen``); a mapping of
    :class:`OptimizerConfig` fields is accepted and checked. A recipe may also give them flat,
    as ``optimizer_<field>`` (:func:`meta_config_from_dict`)."""
    invalid_score: float = 0.0
    constant_rewards: str = "skip"
    """A reward constant on the probe set trains nothing: ``skip`` scores it ``invalid_score``
    without training; ``train`` trains it (once per starting policy, as all such rewards
    train alike) and scores its policy, as the official code does with every valid formula."""

    inner_seeds: str = "slot"
    """The seed each inner run trains with. ``slot``: the seed of its place in the search,
    :func:`~derl_bench.meta.search.slot_seed` of the run's seed and the candidate's number
    (``generation * population + index``), so every method run with one seed trains its k-th
    candidate with the same inner seed (common random numbers: a hand-made reward's k-th run
    and a search method's k-th proposal see the same data order and sampling noise). ``run``:
    every candidate with the inner recipe's seed, so candidates differ only in their reward.
    Under either, a proposal that repeats one already trained (same behaviour, same start) is
    not trained again and keeps its first run's score; only ``fixed``, whose point is fresh
    seeds for one reward, trains every slot. With ``model: tiny`` the seed also builds the
    initial weights, so under ``slot`` every candidate starts from its own initialisation and
    none train as one population (``batch_inner``); give a model path, or ``run``, to batch."""

    islands: int = 2
    """``revolve``: number of islands; each keeps ``population`` members."""
    migrate_every: int = 2
    crossover_rate: float = 0.5
    max_depth: int = 3
    """``random``/``revolve``: deepest expression tree drawn from the grammar."""

    executor: str = "auto"
    """Where inner runs execute: ``ray`` (Ray tasks), ``local`` (one after another in this
    process) or ``auto`` (Ray when it is installed); see :mod:`derl_bench.meta.workers`."""
    ray_address: str | None = None
    """``None``: a local Ray instance; ``auto``: this machine's cluster; ``ray://host:10001``."""
    workers: int | None = None
    """Most inner runs in flight at once (``None``: as many as the resources fit)."""
    num_cpus: float = 1.0
    """CPUs Ray reserves for each inner run (and each headline evaluation)."""
    num_gpus: float = 0.0
    """GPUs Ray reserves for each inner run; set ``inner.device: cuda`` beside it."""

    batch_inner: str = "auto"
    """Train a generation's inner runs that share a start model as one stacked model
    (:mod:`derl_bench.grpo.population`): ``auto`` when the inner recipe allows it (single-step
    env, Qwen2/Llama-shaped model, compact trainer, transformers backend), ``true`` (an error
    when it does not), ``false`` (always separate runs). Each candidate's result is what its
    separate run gives, up to float rounding."""

    inner_commands: dict[str, Any] | None = None
    """Train a command policy (:mod:`derl_bench.grpo.commands`) in every inner run instead of
    an LLM, on an inner env whose card has a ``commands`` hook (ALFWorld's): the fields of its
    recipe (:class:`~derl_bench.grpo.commands.CommandGRPOConfig`: ``steps``,
    ``games_per_step``, ``group_size``, ``learning_rate``, ...). Each run starts from
    ``inner.model`` (a teacher-taught base, ``derl-bench model agent-base``) on ``inner.level``
    with the candidate's reward and inner seed, and scores greedy success on the first
    ``validation_episodes`` games of the level's validation split. ``None``: the LLM recipe
    ``inner``."""

    output_dir: str | None = None
    progress: bool = True
    resolved: InitVar[Family | None] = None
    """The inner env's family where the caller has resolved it (a benchmark that builds many
    recipes for one env); not a recipe field. Without it the config resolves it here, once."""

    def __post_init__(self, resolved: Family | None = None) -> None:
        if isinstance(self.batch_inner, bool):  # YAML reads a bare true/false as a bool
            self.batch_inner = "true" if self.batch_inner else "false"
        if self.batch_inner not in BATCH_INNER:
            raise ConfigError(f"batch_inner must be one of {BATCH_INNER}, got {self.batch_inner!r}")
        method = method_named(self.method)
        if self.retries < 0:
            raise ConfigError(f"retries must be >= 0, got {self.retries!r}")
        for name in ("outer_steps", "population", "validation_episodes", "islands"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.executor not in ("auto", "ray", "local"):
            raise ConfigError(f"executor must be auto, ray or local, got {self.executor!r}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"workers must be at least 1, got {self.workers!r}")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ConfigError("num_cpus and num_gpus must be >= 0")
        for name, allowed in (("protocol", tuple(PROTOCOLS)),
                              ("constant_rewards", ("skip", "train")),
                              ("inner_seeds", ("slot", "run")),
                              ("warm_start_from", ("best", "previous"))):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got "
                                  f"{getattr(self, name)!r}")
        if self.protocol not in method.protocols:
            under = [m.name for m in methods() if self.protocol in m.protocols]
            why = PROTOCOL_NOTES.get(self.protocol)
            raise ConfigError(f"protocol {self.protocol} runs the methods {', '.join(under)}, "
                              f"not {self.method!r}" + (f" ({why})" if why else ""))
        if self.population < method.min_population:
            raise ConfigError(f"{self.method} needs population >= {method.min_population}: "
                              f"{method.population_why}")
        refuse([("seed", self.seed, SEED), ("validation_seed", self.validation_seed, SEED),
                ("validation_temperature", self.validation_temperature, TEMPERATURE),
                *([("eval_limit", self.eval_limit, COUNT)] if self.eval_limit is not None
                  else [])], ConfigError)
        if isinstance(self.inner, dict):
            try:
                self.inner = config_from_dict({"seed": self.seed, **self.inner})
            except ConfigError as err:
                raise ConfigError(f"inner: {err}") from None
        elif not isinstance(self.inner, TrainConfig):
            raise ConfigError("inner must be a mapping of TrainConfig fields")
        # once for the checks below and the whole run (:attr:`family`); an env without a card
        # has no card to check against
        family = resolved if resolved is not None else find_family(self.inner.env_id)
        self._family = family
        # the method's own refusals may read the inner recipe (a control reads its task's card)
        problem = method.check(self) if method.check is not None else None
        if problem:
            raise ConfigError(problem)
        if self.inner.trainer == "trl" and family is not None and family.multi_turn:
            # validation plays the inner policy with the paper's prompt and action parser,
            # while TRL's agents speak tool calls: scored there, they would measure nothing
            raise ConfigError(f"inner.trainer: trl trains tool-calling agents, which the inner "
                              f"runs' validation of {self.inner.env_id} cannot score; use "
                              "trainer: compact, or `derl-bench train` for a TRL agent run")
        if self.inner_commands is not None:
            self._check_inner_commands(family)
        if isinstance(self.optimizer, dict):
            unknown = sorted(set(self.optimizer) - {f.name for f in fields(OptimizerConfig)})
            if unknown:
                raise ConfigError(f"unknown optimizer fields: {', '.join(unknown)}")
            self.optimizer = OptimizerConfig(**self.optimizer)
        elif not isinstance(self.optimizer, OptimizerConfig):
            raise ConfigError("optimizer must be a mapping of OptimizerConfig fields")
        self.eval_levels = self._eval_levels(family)
        if self.optimizer.decoder == "whitelist" or self.protocol == "derl-official":
            from derl_bench.reward import MetaRewardError, UnknownDomainError, env_primitives
            from derl_bench.reward.semantics import official_primitives

            try:
                if family is None:  # no card: no primitives, no g1..g4
                    raise UnknownDomainError(f"{self.inner.env_id!r} is not a derl-bench env id")
                official_primitives(env_primitives(self.inner.env_id, family))
            except MetaRewardError as err:
                raise ConfigError(f"{self.inner.env_id}: the official prompt and protocol "
                                  f"write formulas over g1..g4: {err}") from None

    def _check_inner_commands(self, family: Family | None) -> None:
        from derl_bench.grpo.commands import CommandGRPOConfig

        if not isinstance(self.inner_commands, dict):
            raise ConfigError("inner_commands must be a mapping of the command policy's "
                              "GRPO recipe fields")
        # The run sets these per candidate or takes them from `inner`.
        set_by_run = {"model", "output_dir", "meta_reward", "seed", "level", "env_id",
                      "validation_games", "data_root"}
        allowed = {f.name for f in fields(CommandGRPOConfig)} - set_by_run
        unknown = sorted(set(self.inner_commands) - allowed)
        if unknown:
            raise ConfigError(f"inner_commands: unknown or run-set fields {', '.join(unknown)}"
                              f" (allowed: {', '.join(sorted(allowed))})")
        # a command policy reads the state tracker of the card's ``commands`` hook
        if family is None or not family.spec.has_part("commands"):
            raise ConfigError(f"inner_commands trains a command policy, which needs the inner "
                              f"env's card to have a 'commands' hook; the card of "
                              f"{self.inner.env_id} has none")
        if self.batch_inner == "true":
            raise ConfigError("inner_commands: command-policy runs do not train as one "
                              "population (batch_inner must be auto or false)")
        if self.validation_split not in (None, "validation"):
            raise ConfigError("inner_commands scores on the level's validation split; "
                              "validation_split cannot be changed")
        try:  # its numbers, checked where the command policy's recipe is defined
            CommandGRPOConfig(model=self.inner.model, output_dir=str(self.run_dir),
                              env_id=self.inner.env_id, **self.inner_commands)
        except ValueError as err:
            raise ConfigError(f"inner_commands: {err}") from None

    def _eval_levels(self, family: Family | None) -> list[str]:
        """The recipe's ``eval_levels``, every one checked against the inner env's card, that
        of ``family`` (all of the card's levels when the recipe gives none; none for an env
        without a card: ``family`` None)."""
        from derl_bench.envs.items import eval_splits, level_problems

        env_id, kwargs = self.inner.env_id, self.inner.env_kwargs
        if self.eval_levels is None:  # an env without a card has no eval sets
            return [] if family is None else list(eval_splits(family, env_id, **kwargs))
        levels = self.eval_levels
        if not isinstance(levels, list) or not all(isinstance(lv, str) for lv in levels):
            raise ConfigError(f"eval_levels must be a list of levels, e.g. [L0, L1], got "
                              f"{levels!r}")
        problem = level_problems(family, env_id, levels, **kwargs)
        if problem:
            raise ConfigError(f"eval_levels: {problem}")
        return list(levels)

    def check_machine(self) -> None:
        """Refuse (:class:`ConfigError`) what this machine lacks for the run: the
        Meta-Optimizer runs here, on the inner runs' device; the inner runs too, unless they go
        to a Ray cluster elsewhere (``ray_address``), whose machines check their own."""
        from derl_bench.policies.devices import device_missing

        if self.executor == "local" or self.ray_address is None:
            try:
                self.inner.check_machine()
            except ConfigError as err:
                raise ConfigError(f"inner: {err}") from None
        elif self.search_method.learns:
            problem = device_missing(self.inner.device)
            if problem:
                raise ConfigError(f"the Meta-Optimizer runs here, on inner.device: {problem}")

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir or Path("runs") / self.name)

    @property
    def family(self) -> Family:
        """The inner env's family, resolved once where the config was made and handed down
        to every stage of the run (it travels with the config into worker processes).
        Raises :class:`~derl_bench.family.UnknownFamilyError` for an env id no card defines,
        which a meta run cannot train."""
        if self._family is None:
            from derl_bench.family import UnknownFamilyError

            raise UnknownFamilyError(f"{self.inner.env_id!r} is not a derl-bench env id: a "
                                     "meta run trains on an env a card defines")
        return self._family

    @property
    def search_method(self) -> Method:
        """The recipe's method (:mod:`derl_bench.meta.methods`)."""
        return method_named(self.method)

    @property
    def warm_starts(self) -> bool:
        """Whether inner runs continue from the best policy so far (a method that warm-starts,
        ``derl-pop``, or ``warm_start``)."""
        return self.search_method.warm_starts or self.warm_start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SECTIONS = ("inner", "optimizer")
"""The recipe fields that are mappings of their own dataclass's fields; ``SECTION.X`` names
field ``X`` of one in overrides and :data:`PROTOCOLS`."""
FLAT_OPTIMIZER = "optimizer_"
"""The prefix of the Meta-Optimizer's fields written flat (``optimizer_learning_rate``)."""


def nest_flat_keys(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a recipe's fields) with every flat ``optimizer_X`` moved into its
    ``optimizer`` mapping; a field given both ways is refused.

        >>> nest_flat_keys({"population": 2, "optimizer_learning_rate": 0.1,
        ...                 "optimizer": {"epochs": 2}})
        {'population': 2, 'optimizer': {'epochs': 2, 'learning_rate': 0.1}}
    """
    flat = {k[len(FLAT_OPTIMIZER):]: v for k, v in values.items()
            if k.startswith(FLAT_OPTIMIZER)}
    if not flat:
        return values
    section = values.get("optimizer", {})
    if not isinstance(section, dict):
        raise ConfigError("optimizer must be a mapping of OptimizerConfig fields")
    twice = sorted(set(flat) & set(section))
    if twice:
        raise ConfigError(f"optimizer fields given both flat and nested: {', '.join(twice)}")
    nested = {k: v for k, v in values.items() if not k.startswith(FLAT_OPTIMIZER)}
    nested["optimizer"] = {**section, **flat}
    return nested


def apply_protocol(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a recipe's fields) with its ``protocol``'s values (:data:`PROTOCOLS`) for
    every field it does not set itself; an explicit field wins over the protocol.

        >>> apply_protocol({"protocol": "derl-official", "method": "derl-pop",
        ...                 "optimizer": {"learning_rate": 1e-3}})["optimizer"]["learning_rate"]
        0.001
        >>> v = apply_protocol({"protocol": "derl-official", "method": "derl-pop"})
        >>> v["outer_steps"], v["optimizer"]["temperature"], v["inner"]["reward_semantics"]
        (50, 0.7, 'derl-official')
    """
    protocol = values.get("protocol", "derl")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    method = registry().get(values.get("method", "derl"))
    preset = {**PROTOCOLS[protocol],
              **(method.protocol_values.get(protocol, {}) if method is not None else {})}
    filled = {**values}
    for key, value in preset.items():
        section, dot, name = key.partition(".")
        if dot:
            mapping = filled.get(section, {})
            if isinstance(mapping, dict):
                filled[section] = {name: value, **mapping}
        else:
            filled.setdefault(key, value)
    return filled


def meta_config_from_dict(values: dict[str, Any], family: Family | None = None) -> MetaConfig:
    """A MetaConfig from a recipe's fields: flat ``optimizer_X`` fields are nested
    (:func:`nest_flat_keys`), unknown keys are refused and the recipe's ``protocol`` fills what
    the recipe leaves unset (:func:`apply_protocol`). ``family``: the inner env's, where the
    caller has resolved it."""
    values = nest_flat_keys(values)
    known = {f.name for f in fields(MetaConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown meta recipe keys: {', '.join(unknown)}")
    for section in SECTIONS:
        if not isinstance(values.get(section, {}), dict):
            raise ConfigError(f"{section} must be a mapping of its fields")
    return MetaConfig(**apply_protocol(values), resolved=family)


def load_meta_config(path: str | Path, overrides: list[str] | None = None) -> MetaConfig:
    """Read a YAML meta recipe; ``key=value`` overrides (``inner.steps=3`` and
    ``optimizer.epochs=2`` reach inside)."""
    values = nest_flat_keys(read_recipe(path))
    for key, value in parse_overrides(overrides or []).items():
        if key.startswith(FLAT_OPTIMIZER):  # an override wins over the recipe, flat or not
            key = "optimizer." + key[len(FLAT_OPTIMIZER):]
        section, dot, name = key.partition(".")
        if dot and section in SECTIONS:
            mapping = values.setdefault(section, {})
            if not isinstance(mapping, dict):
                raise ConfigError(f"{section} must be a mapping of its fields")
            mapping[name] = value
        else:
            values[key] = value
    return meta_config_from_dict(values)
