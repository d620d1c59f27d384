"""Build result records (see :mod:`derl_bench.evaluation.schema`) from episode results.

    >>> summarize([])["n"] is None
    True
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from derl_bench._version import __version__
from derl_bench.evaluation.families import adapter_for
from derl_bench.evaluation.protocol import EvalSet, draw_rule
from derl_bench.evaluation.runner import EpisodeResult
from derl_bench.evaluation.schema import SCHEMA_VERSION, binomial_se
from derl_bench.files import write_text_atomic

SEED_RULE = "episode i of the eval set uses seed base + i"
_PACKAGES = ("gymnasium", "alfworld", "textworld", "scienceworld", "math-verify", "torch",
             "transformers")


def package_versions() -> dict[str, str | None]:
    """Versions of derl-bench, Python and every library that can move a score."""
    versions: dict[str, str | None] = {"derl-bench": __version__,
                                       "python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name() -> str | None:
    torch = sys.modules.get("torch")  # only report a GPU the run could have used
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return None


def hardware() -> dict[str, Any]:
    """Where the run happened: OS, CPU model and count, GPU (if torch saw one)."""
    return {"platform": platform.platform(), "cpu": _cpu_name(),
            "cpu_count": os.cpu_count() or 1, "gpu": _gpu_name()}


def _rate(successes: int, n: int) -> dict[str, float]:
    mean = successes / n
    return {"mean": mean, "se": binomial_se(mean, n)}


def summarize(results: Sequence[EpisodeResult], has_score: bool = False,
              has_published: bool = False) -> dict[str, Any]:
    """The ``results`` block (without wall time): n, success rate ± SE, per task type; with
    ``has_published`` also the published metric (``results.published``)."""
    n = len(results)
    if n == 0:
        return {"n": None, "successes": None, "success_rate": {"mean": 0.0, "se": None},
                "mean_score": None, "per_task_type": {}, "mean_steps": None, "metric": "strict"}
    successes = sum(r.success for r in results)
    by_type: dict[str, list[EpisodeResult]] = {}
    for r in results:
        by_type.setdefault(r.task_type or "all", []).append(r)

    def mean_score(rs: Sequence[EpisodeResult]) -> float | None:
        scores = [r.score for r in rs if r.score is not None]
        return sum(scores) / len(scores) if has_score and scores else None

    extra: dict[str, Any] = {"metric": "strict"}
    if has_published:
        published = sum(bool(r.published) for r in results)
        extra["published"] = {"successes": published, "success_rate": _rate(published, n)}
    return {
        "n": n,
        "successes": successes,
        "success_rate": _rate(successes, n),
        "mean_score": mean_score(results),
        "per_task_type": {
            name: {"n": len(rs), "successes": sum(r.success for r in rs),
                   "success_rate": _rate(sum(r.success for r in rs), len(rs)),
                   "mean_score": mean_score(rs)}
            for name, rs in sorted(by_type.items())
        },
        "mean_steps": sum(r.steps for r in results) / n,
        **extra,
    }


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (recipes are hashed this way)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build_record(
    eval_set: EvalSet,
    results: Sequence[EpisodeResult],
    *,
    method: str,
    model: str,
    policy_spec: str | None,
    wall_time_s: float,
    base_seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    recipe: Mapping[str, str] | None = None,
    meta_reward: Mapping[str, str] | None = None,
    data_checksums: Mapping[str, str] | None = None,
    date: dt.date | None = None,
    protocol: str = "strict",
    checkpoint: str | None = None,
) -> dict[str, Any]:
    """A complete ``kind: run`` result record for ``results`` on ``eval_set``. ``checkpoint``
    says which weights were evaluated (e.g. "final", "best validation success"); without it
    the record says it was not stated, and a board rejects it."""
    adapter = adapter_for(eval_set.env_id)
    summary = summarize(results, adapter.has_score, adapter.has_published)
    described = eval_set.describe()
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "run",
        **({} if protocol == "strict" else {"protocol": protocol}),
        "benchmark": adapter.benchmark,
        "env": {"id": eval_set.env_id,
                "card_version": adapter.spec.card_version,
                "kwargs": {**eval_set.spec.env_kwargs, **(env_kwargs or {})}},
        "level": eval_set.level,
        "eval_set": described,
        "data_checksums": dict(data_checksums if data_checksums is not None
                               else adapter.data_checksums(eval_set)),
        "versions": package_versions(),
        "method": method,
        "model": model,
        "policy": policy_spec,
        "recipe": dict(recipe) if recipe else None,
        "meta_reward": dict(meta_reward) if meta_reward else None,
        "seeds": {"base": base_seed, "rule": SEED_RULE},
        "hardware": hardware(),
        "date": (date or dt.datetime.now(dt.UTC).date()).isoformat(),
        "setup": run_setup(described, len(results), adapter.max_steps, checkpoint),
        "results": {**summary, "wall_time_s": round(wall_time_s, 3)},
        "source": None,
    }


CHECKPOINT_NOT_STATED = ("not stated when the record was made (derl-bench evaluate "
                         "--checkpoint, or the checkpoint argument of evaluate)")


def run_setup(eval_set: Mapping[str, Any], episodes: int, step_cap: int,
              checkpoint: str | None) -> dict[str, Any]:
    """The ``setup`` block of a run: one pass over ``eval_set`` (its ``eval_set`` block) with
    episodes capped at ``step_cap`` steps.

    >>> run_setup({"manifest": "test", "manifest_count": 5, "selection": "all",
    ...            "sample_seed": None, "size": 5}, 5, 1, None)["unknown"]["checkpoint"][:10]
    'not stated'
    """
    return {"step_cap": step_cap, "episodes": episodes, "drawn": draw_rule(eval_set),
            "repeats": 1, "checkpoint": checkpoint,
            "unknown": {} if checkpoint else {"checkpoint": CHECKPOINT_NOT_STATED}}


RUN_HERE_FILE = "run-here.txt"
"""In a leaderboards folder: the digests of the ``run`` records the project made itself; any
other ``run`` record on a board was submitted."""


def record_digest(record: Mapping[str, Any]) -> str:
    """sha256 of a record's canonical JSON (sorted keys): the same for any formatting of the
    file, different after any edit of a value.

    >>> record_digest({"b": 1, "a": [1, 2]}) == record_digest({"a": [1, 2], "b": 1})
    True
    """
    text = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_run_here(boards: str | Path) -> dict[str, str]:
    """Digest -> file (``<benchmark>/<name>.json``) of the records listed as run here."""
    path = Path(boards) / RUN_HERE_FILE
    if not path.is_file():
        return {}
    listed = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.strip().partition("  ")
        if digest and not digest.startswith("#"):
            listed[digest] = name
    return listed


def mark_run_here(boards: str | Path, files: Sequence[str | Path]) -> Path:
    """List ``files`` (records under ``boards``) as run here, replacing what was listed for the
    same file names; returns the list's path. Lines: ``<sha256>  <benchmark>/<file>``."""
    boards = Path(boards)
    listed = {name: digest for digest, name in read_run_here(boards).items()}
    for file in files:
        path = Path(file)
        listed[f"{path.parent.name}/{path.name}"] = record_digest(json.loads(path.read_text()))
    lines = ["# Result records the project ran itself (derl-bench leaderboard run-here)."]
    lines += [f"{digest}  {name}" for name, digest in sorted(listed.items())]
    target = boards / RUN_HERE_FILE
    write_text_atomic(target, "\n".join(lines) + "\n")
    return target


def meta_reward_block(expression: str, env_id: str) -> dict[str, str]:
    """The ``meta_reward`` block: the compiled expression's canonical form and hash."""
    from derl_bench.reward import compile_reward

    compiled = compile_reward(expression, env=env_id)
    return {"expression": compiled.canonical, "hash": compiled.hash}
