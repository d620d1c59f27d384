"""Where inner runs execute: as Ray tasks (a local cluster by default), or in this process.

A generation's inner runs are independent, so the loop hands them to an *executor* as
:class:`InnerJob` s and receives one :class:`JobOutcome` per job, in the order they finish.
Both executors retry a failed job ``retries`` times and then report it failed, with the error
of every attempt; the loop excludes it from the generation, it is never scored.

- :class:`RayExecutor` submits each job as a Ray task with the recipe's ``num_cpus`` and
  ``num_gpus``, keeping at most ``workers`` in flight. A task that raises and a worker process
  that dies (killed, out of memory) are both retried. The driver sends recipes and receives
  scores and checkpoint *paths*: the run directory must be on a filesystem every node sees.
- :class:`LocalExecutor` runs the jobs one after another in this process: what runs when Ray
  is not installed (``executor: local``). A job that raises is retried; a crash of the process
  itself ends the run, and ``derl-bench meta --resume`` continues it.

Jobs that start from the same model train as one population (:func:`inner_groups`, the
recipe's ``batch_inner``; :mod:`derl_bench.grpo.population`): one call of
:func:`run_batch` in this process, or one Ray task, and each job still gets its own
:class:`JobOutcome`. A batch that fails is not a verdict on any of its rewards: its jobs run
again as separate runs, each with its own retries. With several workers a batch is split into
as many populations as workers, so every worker has one.

    >>> executor = make_executor("local", retries=0)
    >>> executor.name, executor.dashboard_url
    ('local', None)
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from derl_bench.files import write_text_atomic
from derl_bench.meta.config import MetaConfig
from derl_bench.meta.inner import (
    InnerResult,
    InnerSpec,
    inner_config,
    train_and_score,
    train_and_score_population,
)
from derl_bench.reward import MetaReward

EXECUTORS = ("auto", "ray", "local")


class ExecutorError(RuntimeError):
    """The executor a recipe asks for cannot run here (Ray is not installed, say)."""


@dataclass(frozen=True)
class InnerJob:
    """One inner run: train ``reward`` into ``run_dir`` (from ``start_model`` when given) and
    score the policy on the validation set.

    ``reward`` is compiled once, by the loop; it crosses to a Ray worker pickled (a
    :class:`~derl_bench.reward.MetaReward` is plain data: its text, parsed tree, primitives
    and structure), so the worker trains on that very object and compiles nothing."""

    index: int
    reward: MetaReward
    run_dir: str
    start_model: str | None = None
    data_offset: int = 0
    seed: int | None = None

    @property
    def expr(self) -> str:
        """The reward's text, as the records and logs name it."""
        return self.reward.expr


@dataclass
class JobOutcome:
    """How a job ended: its result (``None`` when every attempt failed) and each failure."""

    job: InnerJob
    result: InnerResult | None
    errors: list[str] = field(default_factory=list)
    worker: str = ""
    """``host:pid`` of the process that produced the result."""
    seconds: float = 0.0


def ray_available() -> bool:
    """Whether the ``ray`` package (the ``[distributed]`` extra) is installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _mark_worker(run: Path) -> None:
    # Atomic, so whoever sees the marker (an operator, a test about to kill the worker) never
    # reads it empty or half written.
    write_text_atomic(run.parent / f"{run.name}.worker", _worker_name() + "\n")


def run_job(config: MetaConfig, job: InnerJob) -> tuple[InnerResult, str]:
    """Run ``job`` where this function is called; returns the result and ``host:pid``.

    The worker writes its ``host:pid`` beside the run directory first (``<run>.worker``), so
    an operator can find the process of a running inner run."""
    run = Path(job.run_dir)
    _mark_worker(run)
    result = train_and_score(config, job.reward, run, job.start_model, job.data_offset,
                             job.seed)
    return result, _worker_name()


def inner_groups(config: MetaConfig, jobs: Sequence[InnerJob], parts: int = 1,
                 ) -> list[list[InnerJob]]:
    """The units an executor runs, in job order: jobs that can train as one population
    (same start model and recipe, ``batch_inner`` not ``false``), split into at most
    ``parts`` populations of near-equal size, and every other job alone.

    Raises :class:`ExecutorError` when ``batch_inner`` is ``true`` and the recipe cannot
    train populations."""
    from derl_bench.grpo.population import population_key, population_support

    if config.batch_inner == "false" or len(jobs) < 2:
        return [[job] for job in jobs]
    by_key: dict[tuple, list[InnerJob]] = {}
    reasons: dict[tuple, str | None] = {}
    for job in jobs:
        inner = inner_config(config, job.expr, Path(job.run_dir), job.start_model,
                             job.data_offset, job.seed)
        key = population_key(inner)
        if key not in reasons:
            reasons[key] = population_support(inner, config.family)
            if reasons[key] is not None and config.batch_inner == "true":
                raise ExecutorError(f"batch_inner: true, but the inner runs cannot train as "
                                    f"a population: {reasons[key]}")
        by_key.setdefault(key if reasons[key] is None else ("alone", job.index), []).append(job)
    units = []
    for members in by_key.values():
        count = max(1, min(parts, len(members)))
        size, extra = divmod(len(members), count)
        start = 0
        for i in range(count):
            end = start + size + (i < extra)
            units.append(members[start:end])
            start = end
    return sorted(units, key=lambda unit: unit[0].index)


def run_batch(config: MetaConfig, jobs: Sequence[InnerJob]) -> tuple[list[InnerResult], str]:
    """Run ``jobs`` as one population where this function is called; returns each job's
    result and ``host:pid`` (written beside every run directory first, as :func:`run_job`)."""
    for job in jobs:
        _mark_worker(Path(job.run_dir))
    results = train_and_score_population(config, [
        InnerSpec(job.reward, Path(job.run_dir), job.start_model, job.data_offset, job.seed)
        for job in jobs])
    return results, _worker_name()


def _apply(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _log_failure(job: InnerJob, text: str) -> None:
    run = Path(job.run_dir)
    run.parent.mkdir(parents=True, exist_ok=True)
    with open(run.parent / f"{run.name}.error.log", "a", encoding="utf-8") as fh:
        fh.write(text.rstrip() + "\n\n")


class Executor(Protocol):
    """Where a generation's inner runs train: :class:`LocalExecutor` or :class:`RayExecutor`."""

    name: str
    dashboard_url: str | None

    def run(self, config: MetaConfig, jobs: Iterable[InnerJob],
            on_start: Callable[[InnerJob], None] | None = None) -> Iterator[JobOutcome]:
        """Train ``jobs``, yielding each outcome as it ends; ``on_start`` is told when each
        starts."""
        ...

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` where the inner runs run (the final evaluation)."""
        ...


class LocalExecutor:
    """Inner runs one after another in this process (see the module docstring)."""

    name = "local"
    dashboard_url: str | None = None

    def __init__(self, retries: int = 1) -> None:
        self.retries = retries

    def run(self, config: MetaConfig, jobs: Iterable[InnerJob],
            on_start: Callable[[InnerJob], None] | None = None) -> Iterator[JobOutcome]:
        """Run ``jobs`` in order, those of a population together; ``on_start`` is told when
        each starts."""
        for unit in inner_groups(config, list(jobs)):
            if on_start is not None:
                for job in unit:
                    on_start(job)
            if len(unit) > 1:
                started = time.perf_counter()
                try:
                    results, worker = run_batch(config, unit)
                except Exception:  # the jobs are retried as separate runs below
                    for job in unit:
                        _log_failure(job, "as one population with jobs "
                                     f"{[j.index for j in unit]}:\n{traceback.format_exc()}")
                else:
                    seconds = round(time.perf_counter() - started, 2)
                    for job, result in zip(unit, results, strict=True):
                        yield JobOutcome(job, result, [], worker, seconds)
                    continue
            for job in unit:
                yield self._run_alone(config, job)

    def _run_alone(self, config: MetaConfig, job: InnerJob) -> JobOutcome:
        started = time.perf_counter()
        errors: list[str] = []
        for _ in range(self.retries + 1):
            try:
                result, worker = run_job(config, job)
            except Exception as err:  # any failure of an inner run is retried, then excluded
                errors.append(f"{type(err).__name__}: {err}")
                _log_failure(job, traceback.format_exc())
                continue
            return JobOutcome(job, result, errors, worker, round(time.perf_counter() - started, 2))
        return JobOutcome(job, None, errors, "", round(time.perf_counter() - started, 2))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` here (a headline evaluation)."""
        return fn(*args)


def _ray_error_text(err: BaseException) -> str:
    """One line for a failed Ray task: the task's own exception, or how its worker died."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    first = str(err).strip().splitlines()
    return f"{type(err).__name__}: {first[0] if first else ''}"


class RayExecutor:
    """Inner runs as Ray tasks (see the module docstring).

    Args:
        address: ``None`` starts a local Ray instance (or joins the one this process already
            started); ``"auto"`` joins the cluster this machine belongs to; ``ray://host:10001``
            connects a driver to a remote cluster.
        workers: most inner runs in flight at once (``None``: as many as the cluster's
            resources fit).
        num_cpus, num_gpus: resources of each inner run.
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None,
                 num_cpus: float = 1.0, num_gpus: float = 0.0, retries: int = 1) -> None:
        import ray

        self.ray = ray
        self.retries = retries
        self.workers = workers
        self.options = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_retries": 0}
        context = None
        if not ray.is_initialized():
            # Workers need the data root and thread settings the driver was given.
            env_vars = {k: v for k, v in os.environ.items() if k.startswith("DERL_BENCH_")}
            context = ray.init(address=address, runtime_env={"env_vars": env_vars} if env_vars
                               else None, log_to_driver=False, configure_logging=False)
        url = getattr(context, "dashboard_url", None) if context is not None else None
        self.dashboard_url: str | None = f"http://{url}" if url else None
        self._train = ray.remote(run_job)
        self._train_batch = ray.remote(run_batch)
        self._call = ray.remote(_apply)

    def run(self, config: MetaConfig, jobs: Iterable[InnerJob],
            on_start: Callable[[InnerJob], None] | None = None) -> Iterator[JobOutcome]:
        """Submit ``jobs`` (at most ``workers`` tasks at once; a population is one task) and
        yield each outcome as it ends."""
        ray = self.ray
        limit = self.workers or self._slots()
        pending = deque(inner_groups(config, list(jobs), parts=limit))
        config_ref = ray.put(config)
        in_flight: dict[Any, list[InnerJob]] = {}
        errors_of: dict[int, list[str]] = {}
        started_of: dict[int, float] = {}
        while pending or in_flight:
            while pending and len(in_flight) < limit:
                unit = pending.popleft()
                for job in unit:
                    if job.index not in started_of:
                        started_of[job.index] = time.perf_counter()
                        if on_start is not None:
                            on_start(job)
                ref: Any  # one job's result, or a population's list of them
                if len(unit) == 1:
                    ref = self._train.options(**self.options).remote(config_ref, unit[0])
                else:
                    ref = self._train_batch.options(**self.options).remote(config_ref, unit)
                in_flight[ref] = unit
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            unit = in_flight.pop(ready[0])
            try:
                value = ray.get(ready[0])
            except ray.exceptions.RayError as err:  # the task raised, or its worker died
                if len(unit) > 1:  # no verdict on any reward: run them separately
                    for job in unit:
                        _log_failure(job, f"as one population with jobs "
                                     f"{[j.index for j in unit]}:\n{err}")
                    pending.extendleft([job] for job in reversed(unit))
                    continue
                job = unit[0]
                errors = errors_of.setdefault(job.index, [])
                errors.append(_ray_error_text(err))
                _log_failure(job, str(err))
                if len(errors) <= self.retries:
                    pending.appendleft(unit)
                    continue
                yield JobOutcome(job, None, errors, "",
                                 round(time.perf_counter() - started_of[job.index], 2))
                continue
            results, worker = value if len(unit) > 1 else ([value[0]], value[1])
            for job, result in zip(unit, results, strict=True):
                yield JobOutcome(job, result, errors_of.get(job.index, []), worker,
                                 round(time.perf_counter() - started_of[job.index], 2))

    def _slots(self) -> int:
        """Tasks the cluster's CPUs (or GPUs) fit at once."""
        resources = self.ray.cluster_resources()
        fits = [resources.get(name, 0.0) / need for name, need in
                (("CPU", self.options["num_cpus"]), ("GPU", self.options["num_gpus"])) if need]
        return max(1, int(min(fits))) if fits else 1

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` as a Ray task with one inner run's resources (a headline evaluation)."""
        return self.ray.get(self._call.options(**self.options).remote(fn, *args))


def make_executor(kind: str = "auto", *, address: str | None = None, workers: int | None = None,
                  num_cpus: float = 1.0, num_gpus: float = 0.0,
                  retries: int = 1) -> Executor:
    """The executor ``kind`` names: ``ray``, ``local``, or ``auto`` (Ray when installed)."""
    if kind not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")
    if kind == "auto":
        kind = "ray" if ray_available() else "local"
    if kind == "ray":
        if not ray_available():
            raise ExecutorError("executor: ray needs the ray package: pip install "
                               "'derl-bench[distributed]' (or executor: local)")
        return RayExecutor(address, workers, num_cpus, num_gpus, retries)
    return LocalExecutor(retries)


def executor_for(config: MetaConfig) -> Executor:
    """The executor ``config`` asks for."""
    return make_executor(config.executor, address=config.ray_address, workers=config.workers,
                         num_cpus=config.num_cpus, num_gpus=config.num_gpus,
                         retries=config.retries)


__all__ = ["EXECUTORS", "Executor", "ExecutorError", "InnerJob", "JobOutcome", "LocalExecutor",
           "RayExecutor", "executor_for", "inner_groups", "make_executor", "ray_available",
           "run_batch", "run_job"]
