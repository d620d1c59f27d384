"""One dataclass holds everything a GRPO run needs; YAML recipes fill it.

A recipe is a flat YAML mapping of :class:`TrainConfig` fields::

    name: gsm8k-outcome
    env_id: derl/GSM8K-v0
    meta_reward: outcome
    reward_semantics: derl
    model: tiny
    group_size: 4
    steps: 3

``load_config("recipe.yaml", ["steps=10", "learning_rate=1e-5"])`` applies ``key=value``
overrides (values parsed as YAML) and rejects unknown keys or wrongly typed values with a
clear error.
"""

from __future__ import annotations

import types
import typing
from dataclasses import InitVar, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from derl_bench.family import Family
from derl_bench.reward.meta_reward import MetaReward, compile_reward
from derl_bench.reward.primitives import env_primitives
from derl_bench.reward.semantics import SEMANTICS
from derl_bench.settings import (
    COUNT,
    DEFAULT_ENV_ID,
    GROUP_TEMPERATURE,
    LEARNING_RATE,
    MAX_GRAD_NORM,
    POSITIVE,
    SEED,
    TOP_P,
    Rule,
    at_least,
    number_at_least,
    refuse,
)

TINY_MODEL = "tiny"
"""``model: tiny`` builds the tiny random model in code (under the run's output directory)."""


class ConfigError(ValueError):
    """A recipe or override is not a valid :class:`TrainConfig`."""


@dataclass
class TrainConfig:
    """A GRPO run: model, env, Meta-Reward, group sizes and optimisation settings."""

    name: str = "grpo"
    """Run name; the default output directory is ``runs/<name>``."""
    env_id: str = DEFAULT_ENV_ID
    level: str | None = None
    """Agent envs: ``L0`` (seen), ``L1`` (unseen variants) or ``L2`` (held-out tasks)."""
    split: str = "train"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    meta_reward: str = "outcome"
    """The Meta-Reward expression the policy is trained on."""
    reward_semantics: str = "derl"
    """How ``meta_reward`` is evaluated: ``derl`` (the language's own rules) or
    ``derl-official`` (the released DERL code's: ``g1..g4`` as ``1e-6``/``1 + 1e-6``, a
    division by zero zeroes the reward, no clipping; see ``derl_bench.reward.semantics``)."""
    model: str = TINY_MODEL
    """A HF hub name, a local path, or ``tiny``."""
    trainer: str = "compact"
    """``compact`` (every env) or ``trl`` (TRL's GRPOTrainer, :mod:`derl_bench.grpo.trl`:
    single-step math, or agents); :mod:`derl_bench.grpo.dispatch` chooses by it."""
    backend: str = "transformers"
    """Generation backend: ``transformers`` or ``vllm`` (GPU)."""
    device: str = "cpu"
    dtype: str | None = None
    lora: dict[str, Any] | None = None
    """Train a LoRA adapter instead of every weight: ``{r, alpha, dropout, target_modules}``
    (defaults 16, 32, 0.0 and all seven projections; see
    :class:`~derl_bench.policies.lora.LoraSpec`). The KL reference is then the frozen base
    (the adapter switched off) and checkpoints hold the adapter only."""

    group_size: int = 4
    """G: samples per problem (math) or episodes per game/variation (agents)."""
    prompts_per_step: int = 2
    """Problems or games per step; a step trains on ``prompts_per_step * group_size`` episodes."""
    steps: int = 10
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    kl_coef: float = 0.01
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    scale_by_std: bool = True
    aggregation: str = "token"
    updates_per_batch: int = 1
    micro_batch_size: int = 16
    logprob_chunk: int = 1024
    """Completion tokens whose vocabulary-wide logits the update holds at once: log-probs are
    computed from the hidden states this many positions at a time, so a micro-batch's whole
    ``[rows, tokens, vocabulary]`` logits never exist (see ``docs/gpu.md``)."""
    recompute_activations: bool = False
    """Keep only each decoder layer's input for the backward pass and run the layer again
    there: about a third more update FLOPs for a fraction of the activations' memory (the lean
    path; see ``docs/gpu.md``)."""
    max_grad_norm: float = 1.0
    num_threads: int | None = None
    """torch intra-op threads; empty picks them from the model size and free cores
    (:mod:`derl_bench.policies.threads`)."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    history_window: int = 2
    max_episode_steps: int = 30
    """Agents: actions per episode before truncation."""
    env_actors: bool = False
    """Agents: keep each env of a step's groups in its own Ray actor, so a turn's steps run in
    parallel (needs Ray; see ``derl_bench.rollout.remote`` and ``docs/distributed.md``)."""
    seed: int = 0
    data_offset: int = 0
    """Start the run's problem/game sequence this many steps in: a warm-started run continues
    through the training data where the run it starts from stopped, instead of repeating it."""

    output_dir: str | None = None
    save_every: int = 1
    """Save a checkpoint every this many steps (and always after the last one)."""
    keep_checkpoints: int = 2
    save_optimizer_state: bool = True
    """``False``: checkpoints keep the weights, step and RNG states but not AdamW's moments
    (twice the weights: 2 GB for a 0.5B model in bfloat16), for a run read only for its
    weights, like a meta loop's inner run; such a checkpoint cannot resume."""
    tensorboard: bool = True
    progress: bool = True
    resolved: InitVar[Family | None] = None
    """``env_id``'s family where the caller has resolved it (a meta run's inner runs), for the
    level check; not a recipe field."""

    def __post_init__(self, resolved: Family | None = None) -> None:
        open_unit = Rule(lambda v: POSITIVE.test(v) and v < 1, "in (0, 1)")
        rules = {
            "group_size": at_least(2), "prompts_per_step": COUNT, "steps": at_least(0),
            "data_offset": at_least(0), "learning_rate": LEARNING_RATE,
            "weight_decay": number_at_least(0), "kl_coef": number_at_least(0),
            "clip_eps": open_unit, "max_grad_norm": MAX_GRAD_NORM,
            "max_new_tokens": COUNT, "temperature": GROUP_TEMPERATURE, "top_p": TOP_P,
            "history_window": at_least(0), "max_episode_steps": COUNT,
            "updates_per_batch": COUNT, "micro_batch_size": COUNT, "logprob_chunk": COUNT,
            "save_every": at_least(0), "keep_checkpoints": COUNT, "seed": SEED,
        }
        if self.num_threads is not None:
            rules["num_threads"] = COUNT
        if self.clip_eps_high is not None:
            rules["clip_eps_high"] = POSITIVE
        refuse(((name, getattr(self, name), rule) for name, rule in rules.items()), ConfigError)
        from derl_bench.policies.backends import BACKENDS
        from derl_bench.policies.devices import device_problem, dtype_problem

        if self.trainer == "commands":
            raise ConfigError("trainer: commands trains a command policy; its recipe is read "
                              "by `derl-bench train` (derl_bench.grpo.commands), not as an "
                              "LLM recipe")
        for name, allowed in (("trainer", ("compact", "trl")),
                              ("aggregation", ("token", "sequence")),
                              ("backend", BACKENDS),
                              ("reward_semantics", SEMANTICS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for problem in (device_problem(self.device), dtype_problem(self.dtype)):
            if problem:
                raise ConfigError(problem)
        from derl_bench.envs.items import env_settings_problem
        from derl_bench.family import find_family

        # only a level is checked against the card: a config without one looks nothing up
        family = None if self.level is None else (resolved or find_family(self.env_id))
        problem = env_settings_problem(family, self.env_id, self.level, self.env_kwargs)
        if problem:
            raise ConfigError(problem)

        if self.lora is not None:
            from derl_bench.policies.lora import LoraSpec

            try:
                self.lora = LoraSpec.from_dict(self.lora).to_dict()
            except ValueError as err:
                raise ConfigError(str(err)) from None
            if self.backend == "vllm":
                raise ConfigError("lora: the vllm backend cannot sample from an adapter that "
                                  "is trained in the same process; use backend: transformers")

    def check_machine(self) -> None:
        """Refuse (:class:`ConfigError`) what this machine lacks for the run: a CUDA device
        without CUDA, the vllm backend without vllm or with a model whose shape the installed
        vllm cannot run. Not among the checks every config gets: a recipe may be written on
        one machine to run on another (a Ray cluster's GPUs)."""
        from derl_bench.policies.backends import backend_missing
        from derl_bench.policies.devices import device_missing
        from derl_bench.policies.tiny import TinyModelSpec

        model = TinyModelSpec() if self.model == TINY_MODEL else self.model
        for problem in (device_missing(self.device), backend_missing(self.backend, model)):
            if problem:
                raise ConfigError(problem)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir or Path("runs") / self.name)

    def env_make_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``gymnasium.make(env_id, ...)``."""
        kwargs: dict[str, Any] = {"split": self.split, **self.env_kwargs}
        if self.level is not None:
            kwargs["level"] = self.level
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _matches(value: Any, annotation: Any) -> bool:
    """Whether a YAML value fits a field's annotation (ints are accepted as floats)."""
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if origin is not None:
        return isinstance(value, origin)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation)


def _float_from_text(value: Any, annotation: Any) -> Any:
    """YAML 1.1 reads ``1e-5`` (no dot) as a string; accept it where a float is expected."""
    if isinstance(value, str) and _matches(1.0, annotation) and not _matches(value, annotation):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def fields_from_dict(cls: type, values: dict[str, Any], what: str = "recipe") -> Any:
    """Build the dataclass ``cls`` from ``values``, rejecting unknown keys and wrongly typed
    values (:class:`ConfigError`); a value its own checks refuse is a ``ConfigError`` too."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown {what} keys: {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(known))})")
    values = {k: _float_from_text(v, hints[k]) for k, v in values.items()}
    for key, value in values.items():
        if not _matches(value, hints[key]):
            raise ConfigError(f"{key}: expected {hints[key]}, got {value!r}")
    values = {k: float(v) if _matches(1.0, hints[k]) and isinstance(v, int) and
              not _matches(1, hints[k]) else v for k, v in values.items()}
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:  # a missing field, or a value its checks refuse
        raise ConfigError(str(err)) from None


def config_from_dict(values: dict[str, Any]) -> TrainConfig:
    """Build a :class:`TrainConfig`, rejecting unknown keys and wrongly typed values."""
    return fields_from_dict(TrainConfig, values)


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping that sets one key twice (lines counted from 1)."""

    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(f"line {line}: {key!r} is set twice (first on line {first_line})")
        self.key, self.line, self.first_line = key, line, first_line


class _RecipeLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a mapping may not set a key twice: PyYAML keeps the
    last value without a word, so a recipe would run a setting other than the one its reader
    saw first."""


def _unique_mapping(loader: _RecipeLoader, node: yaml.MappingNode, deep: bool = False,
                    ) -> dict[Any, Any]:
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base`` may be overridden
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            if key in first:
                raise DuplicateKeyError(key, key_node.start_mark.line + 1, first[key] + 1)
        except TypeError:  # an unhashable key: construct_mapping says so itself
            continue
        first[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep)


_RecipeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(text: str) -> Any:
    """Parse recipe text (a file or an override's value): safe YAML that refuses a mapping
    setting one key twice (:class:`DuplicateKeyError`).

    >>> load_yaml("steps: 2\\nseed: 1")
    {'steps': 2, 'seed': 1}
    >>> load_yaml("steps: 2\\nsteps: 3")
    Traceback (most recent call last):
    ...
    derl_bench.grpo.config.DuplicateKeyError: line 2: 'steps' is set twice (first on line 1)
    """
    return yaml.load(text, Loader=_RecipeLoader)  # noqa: S506 - a SafeLoader subclass


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["steps=5", "level=L1"]`` -> ``{"steps": 5, "level": "L1"}`` (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not KEY=VALUE")
        try:
            out[key.strip()] = load_yaml(raw) if raw.strip() else None
        except yaml.YAMLError as err:
            raise ConfigError(f"override {item!r}: {err}") from None
    return out


def read_recipe(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML recipe file, with ``name`` defaulting to the file's stem. Every
    recipe (``train``, ``meta``) is read here, so each is held to the same rules: valid YAML,
    a mapping, not empty, no key set twice."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe {path} does not exist")
    try:
        values = load_yaml(path.read_text())
    except DuplicateKeyError as err:
        raise ConfigError(f"recipe {path}, line {err.line}: {err.key!r} is set twice (first "
                          f"on line {err.first_line}); a recipe sets each field once") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"recipe {path} is not valid YAML: {err}") from None
    if values is None:  # an empty file would otherwise run every default without a word
        raise ConfigError(f"recipe {path} is empty; a recipe sets at least its env and "
                          "Meta-Reward (see baselines/)")
    if not isinstance(values, dict):
        raise ConfigError(f"recipe {path} must be a mapping of config fields")
    values.setdefault("name", path.stem)
    return values


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML recipe and apply ``key=value`` overrides."""
    values = read_recipe(path)
    values.update(parse_overrides(overrides or []))
    return config_from_dict(values)


def replace(config: TrainConfig, **changes: Any) -> TrainConfig:
    """A copy of ``config`` with ``changes`` (validated like a recipe)."""
    return config_from_dict({**asdict(config), **changes})


def compile_run_reward(config: TrainConfig, family: Family,
                       domain: str | None = None) -> MetaReward:
    """``config.meta_reward`` compiled under ``config.reward_semantics``, against the
    primitives ``config.env_id`` declares (its ``family``'s card, resolved by the caller; or
    those of ``domain``, a family, for an env that is not a derl id). Where a run starts (the
    ``train`` command, :func:`~derl_bench.grpo.dispatch.run_training`, a meta loop's inner
    runs) it is compiled once, and the :class:`~derl_bench.reward.MetaReward` is handed down
    to the trainer as it is."""
    source = domain or env_primitives(config.env_id, family)
    return compile_reward(config.meta_reward, source, semantics=config.reward_semantics)


__all__ = ["TINY_MODEL", "ConfigError", "DuplicateKeyError", "TrainConfig",
           "compile_run_reward", "config_from_dict", "fields_from_dict", "load_config", "load_yaml",
           "parse_overrides", "read_recipe", "replace"]
