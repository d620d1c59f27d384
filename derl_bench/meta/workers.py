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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from derl_bench.meta.config import MetaConfig
from derl_bench.meta.inner import InnerResult, train_and_score

EXECUTORS = ("auto", "ray", "local")


class ExecutorError(RuntimeError):
    """The executor a recipe asks for cannot run here (Ray is not installed, say)."""


@dataclass(frozen=True)
class InnerJob:
    """One inner run: train ``expr`` into ``run_dir`` (from ``start_model`` when given) and
    score the policy on the validation set."""

    index: int
    expr: str
    run_dir: str
    start_model: str | None = None
    data_offset: int = 0
    seed: int | None = None


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


def run_job(config: MetaConfig, job: InnerJob) -> tuple[InnerResult, str]:
    """Run ``job`` where this function is called; returns the result and ``host:pid``.

    The worker writes its ``host:pid`` beside the run directory first (``<run>.worker``), so
    an operator can find the process of a running inner run."""
    run = Path(job.run_dir)
    run.parent.mkdir(parents=True, exist_ok=True)
    (run.parent / f"{run.name}.worker").write_text(_worker_name() + "\n")
    result = train_and_score(config, job.expr, run, job.start_model, job.data_offset, job.seed)
    return result, _worker_name()


def _apply(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _log_failure(job: InnerJob, text: str) -> None:
    run = Path(job.run_dir)
    run.parent.mkdir(parents=True, exist_ok=True)
    with open(run.parent / f"{run.name}.error.log", "a", encoding="utf-8") as fh:
        fh.write(text.rstrip() + "\n\n")


class LocalExecutor:
    """Inner runs one after another in this process (see the module docstring)."""

    name = "local"
    dashboard_url: str | None = None

    def __init__(self, retries: int = 1) -> None:
        self.retries = retries

    def run(self, config: MetaConfig, jobs: Iterable[InnerJob],
            on_start: Callable[[InnerJob], None] | None = None) -> Iterator[JobOutcome]:
        """Run ``jobs`` in order; ``on_start`` is told when each starts."""
        for job in jobs:
            if on_start is not None:
                on_start(job)
            started = time.perf_counter()
            errors: list[str] = []
            for _ in range(self.retries + 1):
                try:
                    result, worker = run_job(config, job)
                except Exception as err:  # any failure of an inner run is retried, then excluded
                    errors.append(f"{type(err).__name__}: {err}")
                    _log_failure(job, traceback.format_exc())
                    continue
                yield JobOutcome(job, result, errors, worker,
                                 round(time.perf_counter() - started, 2))
                break
            else:
                yield JobOutcome(job, None, errors, "", round(time.perf_counter() - started, 2))

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
        self._call = ray.remote(_apply)

    def run(self, config: MetaConfig, jobs: Iterable[InnerJob],
            on_start: Callable[[InnerJob], None] | None = None) -> Iterator[JobOutcome]:
        """Submit ``jobs`` (at most ``workers`` at once) and yield each outcome as it ends."""
        ray = self.ray
        pending = deque(jobs)
        config_ref = ray.put(config)
        limit = self.workers or max(1, len(pending))
        in_flight: dict[Any, InnerJob] = {}
        errors_of: dict[int, list[str]] = {}
        started_of: dict[int, float] = {}
        while pending or in_flight:
            while pending and len(in_flight) < limit:
                job = pending.popleft()
                if job.index not in started_of:
                    started_of[job.index] = time.perf_counter()
                    if on_start is not None:
                        on_start(job)
                ref = self._train.options(**self.options).remote(config_ref, job)
                in_flight[ref] = job
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            job = in_flight.pop(ready[0])
            errors, started = errors_of.setdefault(job.index, []), started_of[job.index]
            try:
                result, worker = ray.get(ready[0])
            except ray.exceptions.RayError as err:  # the task raised, or its worker died
                errors.append(_ray_error_text(err))
                _log_failure(job, str(err))
                if len(errors) <= self.retries:
                    pending.appendleft(job)
                    continue
                yield JobOutcome(job, None, errors, "", round(time.perf_counter() - started, 2))
                continue
            yield JobOutcome(job, result, errors, worker, round(time.perf_counter() - started, 2))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` as a Ray task with one inner run's resources (a headline evaluation)."""
        return self.ray.get(self._call.options(**self.options).remote(fn, *args))


def make_executor(kind: str = "auto", *, address: str | None = None, workers: int | None = None,
                  num_cpus: float = 1.0, num_gpus: float = 0.0,
                  retries: int = 1) -> LocalExecutor | RayExecutor:
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


def executor_for(config: MetaConfig) -> LocalExecutor | RayExecutor:
    """The executor ``config`` asks for."""
    return make_executor(config.executor, address=config.ray_address, workers=config.workers,
                         num_cpus=config.num_cpus, num_gpus=config.num_gpus,
                         retries=config.retries)


__all__ = ["EXECUTORS", "ExecutorError", "InnerJob", "JobOutcome", "LocalExecutor", "RayExecutor",
           "executor_for", "make_executor", "ray_available", "run_job"]
