"""Per-family evaluation rules: eval sets, episode selection, success and the reference plans.

============  =====  ==========================================  =========================
env           level  eval set (manifest, in manifest order)      success
============  =====  ==========================================  =========================
GSM8K-v0      L0     ``test`` (1319 problems)                    correct final answer
MATH-v0       L0     ``math500`` (500 problems)                  correct final answer
ALFWorld-v0   L0     ``L0-eval`` = valid_seen (140 games)        ``won`` within 30 steps
ALFWorld-v0   L1     ``L1-eval`` = valid_unseen (134 games)      ``won`` within 30 steps
ALFWorld-v0   L2     ``L2-eval`` = valid_unseen types 5-6 (38)   ``won`` within 30 steps
ScienceWorld  L0-L2  ``L<n>-eval``, a fixed sample of 100 pairs  score 100 within 30 steps
============  =====  ==========================================  =========================

The math envs have one level, their test set (``eval_split`` on the card). ScienceWorld's eval
sets hold 1661, 1684 and 549 (task, variation) pairs; the protocol runs a fixed-seed sample of
each (:mod:`derl_bench.families.scienceworld.adapter`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from derl_bench.cards import CardError
from derl_bench.envs.items import eval_splits, split_items
from derl_bench.evaluation.protocol import (
    EvalSet,
    LevelSpec,
    ManifestRef,
    ProtocolError,
)
from derl_bench.evaluation.schema import PROMPT_FREE_TEXT
from derl_bench.family import (
    Family,
    FamilySpec,
    UnknownFamilyError,
    family_specs,
    resolve_family,
)


def success_of(info: Mapping[str, Any], spec: FamilySpec) -> bool:
    """Whether a step's primitives say the episode succeeded (the card's success primitive)."""
    primitives = info.get("primitives")
    if not isinstance(primitives, Mapping) or spec.success_primitive not in primitives:
        raise KeyError(f"the step's info has no {spec.success_primitive!r} primitive: evaluate "
                       f"an env made by gymnasium.make, which adds the {spec.name} observers")
    return float(primitives[spec.success_primitive]) >= 1.0


class FamilyAdapter:
    """How the evaluator drives one env id. Subclasses fill in the family's rules; what the
    card declares (step cap, card version, leaderboard name) comes from its :attr:`spec`."""

    has_score: bool = False
    has_published: bool = False
    """Records also report the published metric (ScienceWorld: RLVMR's rule)."""
    policy_interfaces: tuple[str, ...] = (PROMPT_FREE_TEXT,)
    """The policy interfaces a record of this env may name (``policy_interface``)."""

    def __init__(self, env_id: str, family: Family) -> None:
        self.env_id = env_id
        self.resolved = family
        """The :class:`~derl_bench.family.Family` this adapter's card belongs to."""
        self.spec: FamilySpec = family.spec
        self.card: Mapping[str, Any] = family.card

    @property
    def family(self) -> str:
        return self.spec.name

    @property
    def max_steps(self) -> int:
        """The protocol's step cap: the card's default."""
        return self.spec.max_steps

    @property
    def benchmark(self) -> str:
        """The leaderboard a record of this env id belongs to: ``derl/ALFWorld-v0`` ->
        ``alfworld``."""
        return self.spec.env(self.env_id).benchmark

    def levels(self) -> dict[str, LevelSpec]:
        """The env's eval set per level."""
        raise NotImplementedError

    def level(self, level: str) -> LevelSpec:
        levels = self.levels()
        if level not in levels:
            raise ProtocolError(f"{self.env_id} has no level {level!r}; "
                                f"levels: {', '.join(levels)}")
        return levels[level]

    def eval_set(self, level: str, protocol: str = "strict", seed: int = 0) -> EvalSet:
        """Read the level's manifest (checksum-verified) and select its episodes.

        ``protocol="rlvmr"`` gives RLVMR's validation episodes where the family defines them
        (:meth:`rlvmr_eval_set`); ``seed`` is then RLVMR's ``env.seed``.
        """
        if protocol == "rlvmr":
            return self.rlvmr_eval_set(level, seed)
        if protocol != "strict":
            raise ProtocolError(f"unknown protocol {protocol!r}; choose 'strict' or 'rlvmr'")
        spec = self.level(level)
        return EvalSet(self.env_id, level, spec, tuple(spec.select(spec.manifest.load())))

    def rlvmr_eval_set(self, level: str, seed: int) -> EvalSet:
        raise ProtocolError(f"{self.env_id} has no rlvmr protocol")

    def reset_options(self, env: gym.Env, entry: str) -> dict[str, Any]:
        """The ``options`` that make ``env.reset`` start episode ``entry``."""
        raise NotImplementedError

    def task_type(self, entry: str, info: Mapping[str, Any]) -> str:
        return "all"

    def task_types(self, level: str) -> frozenset[str]:
        """The task types of the episodes of ``level``'s eval set: what a record's
        ``per_task_type`` may name. Read from the level's manifest (the card's, or the
        generated split), never from the data."""
        return frozenset(self.task_type(entry, {}) for entry in self.level(level).manifest.load())

    def outcome(self, env: gym.Env, reward: float, terminated: bool,
                info: Mapping[str, Any]) -> tuple[bool, float | None]:
        """``(success, score)`` of a finished episode (score ``None`` where the env has none).

        Success is the last step's value of the card's success primitive, the one training
        counts too (:func:`derl_bench.grpo.trainer.success_rate`)."""
        return success_of(info, self.spec), None

    def published(self, info: Mapping[str, Any]) -> bool | None:
        """The published metric of a finished episode, where it differs from ``success``."""
        return None

    def valid_actions(self, env: gym.Env, info: Mapping[str, Any]) -> list[str] | None:
        return None

    def available_actions(self, env: gym.Env) -> str:
        """RLVMR's action text for the prompt (ScienceWorld only)."""
        raise ProtocolError(f"{self.env_id} has no RLVMR action text")

    def oracle_plan(self, env: gym.Env, info: Mapping[str, Any]) -> list[str]:
        raise NotImplementedError

    def data_checksums(self, eval_set: EvalSet) -> dict[str, str]:
        """sha256 of the data files the eval set reads, keyed by their path in the data root."""
        return {}


class LevelsAdapter(FamilyAdapter):
    """The generic adapter, the default of a card that names no ``evaluation`` hook: each level
    is the split the card's ``levels:`` maps it to (or the env class's ``eval_sets``), checked
    against that split's ``count`` and ``manifest_sha256`` under the card's ``splits:``. The env
    lists the split's items as ``problems`` (each with a ``problem_id``) and plays item ``i`` on
    ``reset(options={"index": i})``; an item's task type is its id up to the first ``:``.

    ``derl/Arithmetic-v0`` is evaluated this way, and so is any single-step family that
    generates its splits (nothing to download: the data is the manifest)."""

    def levels(self) -> dict[str, LevelSpec]:
        splits = self.card.get("splits") or {}
        out = {}
        for level, kwargs in eval_splits(self.resolved, self.env_id).items():
            split = kwargs["split"]
            if split not in splits:
                raise ProtocolError(f"the {self.spec.name} card has no split {split!r} "
                                    f"(level {level})")
            spec = splits[split]
            manifest = ManifestRef(split, str(spec["manifest_sha256"]), int(spec["count"]),
                                   functools.partial(split_items, self.resolved, self.env_id,
                                                     split))
            out[level] = LevelSpec(manifest, dict(kwargs))
        return out

    def reset_options(self, env: gym.Env, entry: str) -> dict[str, Any]:
        return {"index": _problem_index(env.unwrapped, entry)}

    def task_type(self, entry: str, info: Mapping[str, Any]) -> str:
        kind, sep, _ = entry.partition(":")
        return kind if sep else "all"

    def oracle_plan(self, env: gym.Env, info: Mapping[str, Any]) -> list[str]:
        return [str(info["reference_solution"])]

    def data_checksums(self, eval_set: EvalSet) -> dict[str, str]:
        # Generated, not read: the data is the split's manifest, checked on generation.
        from derl_bench.cards import sha256_lines

        split = eval_set.spec.env_kwargs["split"]
        return {f"{self.spec.name}/{split}": sha256_lines(split_items(self.resolved, self.env_id,
                                                                        split))}


def _problem_index(env: Any, problem_id: str) -> int:
    index = getattr(env, "_eval_problem_index", None)
    if index is None:
        index = {p.problem_id: i for i, p in enumerate(env.problems)}
        env._eval_problem_index = index
    if problem_id not in index:
        raise ProtocolError(f"problem {problem_id!r} is not in split {env.split!r}")
    return index[problem_id]


def resolve_adapter(env_id: str, family: Family) -> FamilyAdapter:
    """The evaluation rules for ``env_id``: the adapter its card's ``evaluation`` hook names
    (:class:`LevelsAdapter`, which reads the card's ``levels:``, where it names none), made
    once per env id by ``family`` (the env id's :class:`~derl_bench.family.Family`, resolved
    where the command started; :func:`derl_bench.family.reload` forgets them). A
    :class:`ProtocolError` names a broken ``evaluation`` hook."""
    if env_id not in family.adapters:  # made once per id, kept by the family
        try:
            cls = (family.spec.part("evaluation") if family.spec.has_part("evaluation")
                   else LevelsAdapter)
        except CardError as err:
            raise ProtocolError(str(err)) from None
        if not (isinstance(cls, type) and hasattr(cls, "eval_set")):
            raise ProtocolError(f"the evaluation hook of the {family.name!r} card is not a "
                                "FamilyAdapter class")
        family.adapters[env_id] = cls(env_id, family)
    return family.adapters[env_id]


def adapter_for(env: str | FamilyAdapter) -> FamilyAdapter:
    """The evaluation rules for ``env``: an env id, whose family is resolved here (where a
    command or a Python entry point starts from an env id; :func:`resolve_adapter`), or the
    adapter its caller resolved, as it is. What an entry calls takes the adapter, or its
    :attr:`FamilyAdapter.resolved` family. A :class:`ProtocolError` names an env id no card
    defines.

    >>> adapter_for("derl/GSM8K-v0") is adapter_for(adapter_for("derl/GSM8K-v0"))
    True
    """
    if isinstance(env, FamilyAdapter):
        return env
    try:
        family = resolve_family(env)
    except UnknownFamilyError:
        raise ProtocolError(f"{env!r} is not a derl-bench env id") from None
    return resolve_adapter(env, family)


def evaluated_env_ids() -> list[str]:
    """Every env id that has an evaluation protocol (every card's: its own adapter's or
    :class:`LevelsAdapter`'s), in card order."""
    return [env_id for spec in family_specs().values() for env_id in spec.env_ids]
