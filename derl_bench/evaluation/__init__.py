"""The evaluation protocol: run a policy on a level's eval set and write a result record.

    >>> record, _ = evaluate("derl/Arithmetic-v0", "L0", "random", limit=5)
    >>> record["results"]["n"], record["results"]["success_rate"]
    (5, {'mean': 0.0, 'se': 0.0})

See ``docs/evaluation.md`` for the protocol per env and level and the record schema.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from derl_bench.evaluation.families import (
    FamilyAdapter,
    adapter_for,
    evaluated_env_ids,
    resolve_adapter,
)
from derl_bench.evaluation.hacking import hacking_flag, metric_rates
from derl_bench.evaluation.policies import (
    CallablePolicy,
    OraclePolicy,
    Policy,
    PolicyError,
    RandomPolicy,
    load_policy,
)
from derl_bench.evaluation.protocol import EvalSet, LevelSpec, ProtocolError, sample_entries
from derl_bench.evaluation.record import build_record, command_record, summarize
from derl_bench.evaluation.runner import EpisodeResult, run_episodes
from derl_bench.evaluation.schema import REPORTED_NOTE, RESULT_SCHEMA, SCHEMA_VERSION, schema_errors
from derl_bench.files import write_json_atomic


def check_settings(*, base_seed: int = 0, max_new_tokens: int = 512, device: str = "cpu",
                   dtype: str | None = None, loads_model: bool = True) -> None:
    """Refuse (:class:`ProtocolError`) settings :func:`evaluate` cannot run with, before any
    work: a negative seed, no new tokens, a device or dtype no model loads on, or, when
    ``loads_model`` (an ``llm:`` policy), a device this machine lacks."""
    from derl_bench.policies.devices import device_missing, device_problem, dtype_problem
    from derl_bench.settings import COUNT, SEED, problems

    found = problems([("seed", base_seed, SEED._replace(why="episode i is seeded seed + i")),
                      ("max_new_tokens", max_new_tokens, COUNT)])
    found += [p for p in (device_problem(device), dtype_problem(dtype)) if p]
    missing = device_missing(device) if loads_model and not found else None
    if missing:
        found.append(missing)
    if found:
        raise ProtocolError("; ".join(found))


def evaluate(
    env: str | FamilyAdapter,
    level: str,
    policy: str | Policy,
    *,
    num_envs: int = 1,
    limit: int | None = None,
    base_seed: int = 0,
    method: str | None = None,
    model: str | None = None,
    recipe: str | Path | Mapping[str, Any] | None = None,
    meta_reward: Mapping[str, str] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    keep_trajectories: bool = False,
    max_new_tokens: int = 512,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    protocol: str = "strict",
    checkpoint: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
) -> tuple[dict[str, Any], list[EpisodeResult]]:
    """Evaluate ``policy`` (a spec or a :class:`Policy`) on ``env`` at ``level``: an env id,
    whose family is resolved here, once, or the :class:`FamilyAdapter` its caller resolved
    (:func:`adapter_for`); an env id no card defines raises :class:`ProtocolError`.

    Returns the result record and the per-episode results (in eval-set order).
    ``max_new_tokens`` caps each response of an ``llm:`` policy, which loads on ``device``
    in ``dtype`` (default float32). ``protocol="rlvmr"``
    reproduces RLVMR's validation (:mod:`derl_bench.evaluation.rlvmr`): its episode draws
    (seeded by ``base_seed``, RLVMR's ``env.seed``), tick limit, prompt, temperature and
    action parsing; such a record documents a reproduction and is not a board entry.
    ``checkpoint`` says which weights were evaluated (the built-in scripted policies say it
    themselves); a board requires it. ``recipe`` is the training recipe (a file, a config
    mapping or a ready block: :func:`~derl_bench.evaluation.record.recipe_block`). Data that
    differs from the data catalogue's checksums is refused first, with a
    :class:`~derl_bench.data.verify.DataChecksumError` naming the file; a data file that does
    not parse raises a :class:`~derl_bench.data.read.DataFileError` naming it.
    """
    from derl_bench.data.verify import check_data

    check_settings(base_seed=base_seed, max_new_tokens=max_new_tokens, device=device,
                   dtype=dtype, loads_model=isinstance(policy, str) and policy.startswith("llm:"))
    adapter = adapter_for(env)
    eval_set = adapter.eval_set(level, protocol=protocol, seed=base_seed)
    # The checksums the record lists are of the data the run reads: held against the data
    # catalogue before a policy loads or an episode runs, and computed once for both.
    data_checksums = adapter.data_checksums(eval_set)
    check_data(data_checksums)
    spec = policy if isinstance(policy, str) else None
    agent = (load_policy(policy, adapter, max_new_tokens=max_new_tokens, protocol=protocol,
                         device=device, dtype=dtype)
             if isinstance(policy, str) else policy)
    start = time.perf_counter()
    results = run_episodes(eval_set, agent, env_kwargs=env_kwargs, num_envs=num_envs,
                           limit=limit, base_seed=base_seed,
                           keep_trajectories=keep_trajectories, on_episode=on_episode,
                           adapter=adapter)
    wall = time.perf_counter() - start
    record = build_record(eval_set, results, method=method or agent.method,
                          model=model or agent.model, policy_spec=spec, wall_time_s=wall,
                          base_seed=base_seed, env_kwargs=env_kwargs, recipe=recipe,
                          meta_reward=meta_reward, data_checksums=data_checksums,
                          protocol=protocol, checkpoint=checkpoint or agent.checkpoint,
                          adapter=adapter)
    return record, results


__all__ = [
    "REPORTED_NOTE",
    "RESULT_SCHEMA",
    "SCHEMA_VERSION",
    "CallablePolicy",
    "EpisodeResult",
    "EvalSet",
    "FamilyAdapter",
    "LevelSpec",
    "OraclePolicy",
    "Policy",
    "PolicyError",
    "ProtocolError",
    "RandomPolicy",
    "adapter_for",
    "build_record",
    "check_settings",
    "command_record",
    "evaluate",
    "evaluated_env_ids",
    "hacking_flag",
    "load_policy",
    "metric_rates",
    "resolve_adapter",
    "run_episodes",
    "sample_entries",
    "schema_errors",
    "summarize",
    "write_json_atomic",
]
