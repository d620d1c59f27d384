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
import re
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from derl_bench._version import __version__
from derl_bench.evaluation.families import FamilyAdapter, adapter_for
from derl_bench.evaluation.protocol import EvalSet, draw_rule
from derl_bench.evaluation.runner import EpisodeResult
from derl_bench.evaluation.schema import (
    COMPACT_CONSTRAINED,
    DEFAULT_POLICY_INTERFACE,
    RECIPE_PATH_PATTERN,
    RESULT_SCHEMA,
    SCHEMA_VERSION,
    WEIGHT_POLICIES,
    binomial_se,
    schema_errors,
)
from derl_bench.files import write_text_atomic

if TYPE_CHECKING:
    from derl_bench.reward import MetaReward
    from derl_bench.rollout.commands import CommandEpisode

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

    def mean_progress(rs: Sequence[EpisodeResult]) -> float | None:
        values = [r.goal_progress for r in rs if r.goal_progress is not None]
        return sum(values) / len(values) if len(values) == len(rs) else None

    extra: dict[str, Any] = {"metric": "strict"}
    progress = mean_progress(results)
    if progress is not None:  # agents: a secondary endpoint beside success
        values = [float(r.goal_progress or 0.0) for r in results]
        sd = (sum((v - progress) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else 0.0
        extra["goal_progress"] = {"mean": progress, "se": sd / n ** 0.5 if n > 1 else None}
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
                   "mean_score": mean_score(rs),
                   **({} if progress is None else {"goal_progress": mean_progress(rs)})}
            for name, rs in sorted(by_type.items())
        },
        "mean_steps": sum(r.steps for r in results) / n,
        **extra,
    }


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (recipes are hashed this way)."""
    from derl_bench.data.verify import sha256_file

    return sha256_file(Path(path))


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
    recipe: str | Path | Mapping[str, Any] | None = None,
    meta_reward: Mapping[str, str] | None = None,
    data_checksums: Mapping[str, str] | None = None,
    date: dt.date | None = None,
    protocol: str = "strict",
    checkpoint: str | None = None,
    policy_interface: str = DEFAULT_POLICY_INTERFACE,
    adapter: FamilyAdapter,
) -> dict[str, Any]:
    """A complete ``kind: run`` result record for ``results`` on ``eval_set``, which
    ``adapter`` made (its rules give the board, card version, step cap and data checksums).
    ``checkpoint`` says which weights were evaluated (e.g. "final", "best validation
    success"); without it the record says it was not stated, and a board rejects it.
    ``policy_interface`` (see :data:`~derl_bench.evaluation.schema.POLICY_INTERFACES`) is
    written only when it is not the default. ``recipe`` is what :func:`recipe_block` takes.

    A policy that loads weights names its model folder relative to the current folder
    (:func:`portable_policy`), and its setup carries the folder's digest
    (:func:`checkpoint_digest`), so the record names no folder of this machine and still
    pins the weights it scored."""
    summary = summarize(results, adapter.has_score, adapter.has_published)
    described = eval_set.describe()
    loads_weights = policy_spec is not None and policy_spec.startswith(WEIGHT_POLICIES)
    setup = run_setup(described, len(results), adapter.max_steps, checkpoint,
                      loads_weights=loads_weights,
                      checkpoint_sha256=checkpoint_digest(policy_spec) if loads_weights else None)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "run",
        **({} if protocol == "strict" else {"protocol": protocol}),
        **({} if policy_interface == DEFAULT_POLICY_INTERFACE
           else {"policy_interface": policy_interface}),
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
        "policy": portable_policy(policy_spec),
        "recipe": recipe_block(recipe, benchmark=adapter.benchmark) if recipe else None,
        "meta_reward": dict(meta_reward) if meta_reward else None,
        "seeds": {"base": base_seed, "rule": SEED_RULE},
        "hardware": hardware(),
        "date": (date or dt.datetime.now(dt.UTC).date()).isoformat(),
        "setup": setup,
        "results": {**summary, "wall_time_s": round(wall_time_s, 3)},
        "source": None,
    }


CHECKPOINT_NOT_STATED = ("not stated when the record was made (derl-bench evaluate "
                         "--checkpoint, or the checkpoint argument of evaluate)")


def run_setup(eval_set: Mapping[str, Any], episodes: int, step_cap: int,
              checkpoint: str | None, *, loads_weights: bool = False,
              checkpoint_sha256: str | None = None) -> dict[str, Any]:
    """The ``setup`` block of a run: one pass over ``eval_set`` (its ``eval_set`` block) with
    episodes capped at ``step_cap`` steps; for a policy that ``loads_weights``, also the
    digest of its model folder (``None``: not hashed).

    >>> run_setup({"manifest": "test", "manifest_count": 5, "selection": "all",
    ...            "sample_seed": None, "size": 5}, 5, 1, None)["unknown"]["checkpoint"][:10]
    'not stated'
    """
    setup: dict[str, Any] = {"step_cap": step_cap, "episodes": episodes,
                             "drawn": draw_rule(eval_set), "repeats": 1,
                             "checkpoint": checkpoint}
    if loads_weights:
        setup["checkpoint_sha256"] = checkpoint_sha256
    setup["unknown"] = {} if checkpoint else {"checkpoint": CHECKPOINT_NOT_STATED}
    return setup


def _model_path(spec: str) -> str:
    """The model a weight-loading ``policy`` spec names: after its prefix, up to a comma."""
    return spec.partition(":")[2].partition(",")[0]


def portable_policy(spec: str | None, start: str | Path | None = None) -> str | None:
    """``spec`` with the model folder of a policy that loads weights named relative to
    ``start`` (default: the current folder, where the command ran) where it was absolute or
    home-relative: a folder of this machine means nothing on another.

    >>> portable_policy("llm:/work/runs/x/model,temperature=0", start="/work")
    'llm:runs/x/model,temperature=0'
    >>> portable_policy("commands:runs/x/model,greedy"), portable_policy("random")
    ('commands:runs/x/model,greedy', 'random')
    >>> portable_policy("commands:/work/x/model,temperature=1,seed=0", start="/work")
    'commands:x/model,temperature=1,seed=0'
    """
    if spec is None or not spec.startswith(WEIGHT_POLICIES):
        return spec
    model = _model_path(spec)
    local = os.path.expanduser(model)
    if not os.path.isabs(local):
        return spec
    relative = Path(os.path.relpath(local, start if start is not None else Path.cwd()))
    prefix, _, rest = spec.partition(":")
    return f"{prefix}:{relative.as_posix()}{rest[len(model):]}"


def checkpoint_digest(spec: str | None) -> str | None:
    """The digest of the model folder a weight-loading ``policy`` spec names
    (:func:`~derl_bench.policies.model_files.model_digest`); ``None`` for another policy, a
    hub id or a folder that holds no model file."""
    if spec is None or not spec.startswith(WEIGHT_POLICIES):
        return None
    from derl_bench.policies.model_files import model_digest

    return model_digest(os.path.expanduser(_model_path(spec)))


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


def meta_reward_block(expression: str | MetaReward, adapter: FamilyAdapter) -> dict[str, str]:
    """The ``meta_reward`` block: the compiled expression's canonical form and hash, over the
    primitives of ``adapter``'s env (its family as resolved, not looked up again). A
    :class:`~derl_bench.reward.MetaReward` compiled over that env's primitives (as a run
    hands it down) is not compiled again; its text is where it was compiled for another env
    (``g1..g4`` name each family's own primitives)."""
    from derl_bench.reward import MetaReward, compile_reward, env_primitives

    if isinstance(expression, MetaReward) and expression.domain == adapter.env_id:
        compiled = expression
    else:
        text = expression.expr if isinstance(expression, MetaReward) else expression
        compiled = compile_reward(text, env_primitives(adapter.env_id, adapter.resolved))
    return {"expression": compiled.canonical, "hash": compiled.hash}


def recipe_digest(config: Mapping[str, Any]) -> str:
    """sha256 of a recipe's canonical JSON (sorted keys; values JSON cannot hold written as
    text): the ``sha256`` of an embedded recipe, and of a cited file's ``config``.

    >>> recipe_digest({"lr": 1e-4, "steps": 10}) == recipe_digest({"steps": 10, "lr": 1e-4})
    True
    """
    text = json.dumps(config, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


RECIPE_FOLDER = "baselines"
"""The repository's folder of recipes; a recipe may also lie in its board's evidence folder."""


def recipe_folders(benchmark: str | None) -> tuple[str, ...]:
    """The folders (relative to the repository's root) whose files a record of ``benchmark``
    may cite as its recipe: ``baselines`` and the board's evidence folder.

    >>> recipe_folders("alfworld")
    ('baselines', 'leaderboards/alfworld/evidence')
    """
    board = () if benchmark is None else (f"leaderboards/{benchmark}/evidence",)
    return (RECIPE_FOLDER, *board)


def recipe_path_problem(path: str, benchmark: str | None) -> str | None:
    """Why ``path`` cannot name the recipe file of a record of ``benchmark``, else None: it is
    relative to the repository's root, of plain parts (none hidden, no ``..``), and lies in
    one of :func:`recipe_folders`, which the repository keeps.

    >>> recipe_path_problem("baselines/gsm8k-outcome.yaml", "gsm8k") is None
    True
    >>> recipe_path_problem("runs/x/config.yaml", "gsm8k")[:40]
    "'runs/x/config.yaml' lies outside baseli"
    """
    if not re.fullmatch(RECIPE_PATH_PATTERN, path):
        return f"{path!r} is not a relative path of plain parts (no '/' first, no '..')"
    folders = recipe_folders(benchmark)
    if not any(path.startswith(f"{folder}/") for folder in folders):
        return (f"{path!r} lies outside {' and '.join(folders)}, the folders whose files the "
                "repository keeps as recipes")
    return None


RECIPE_BLOCK_KEYS = frozenset({"name", "sha256", "path", "config"})


def recipe_block(recipe: str | Path | Mapping[str, Any] | None,
                 name: str = "training config", *, benchmark: str | None = None,
                 repository: str | Path | None = None) -> dict[str, Any] | None:
    """The ``recipe`` block, which anyone holding the record and the repository can check: a
    ready block (``name``, ``sha256`` and ``path`` or ``config``) as it is; a config mapping
    embedded as ``config``, with ``name`` and its :func:`recipe_digest`; a recipe file under
    ``repository`` (default: the current folder) in one of :func:`recipe_folders`
    (``benchmark``'s board) cited by ``path`` with the sha256 of its bytes; any other recipe
    file embedded as the mapping it holds (YAML or JSON), named by the file's name.

    >>> recipe_block({"name": "x", "sha256": "0" * 64})["name"], recipe_block(None)
    ('x', None)
    >>> block = recipe_block({"lr": 1e-4, "steps": 10})
    >>> block["config"], block["sha256"] == recipe_digest({"steps": 10, "lr": 1e-4})
    ({'lr': 0.0001, 'steps': 10}, True)
    """
    if recipe is None:
        return None
    if isinstance(recipe, str | Path):
        return _recipe_file_block(Path(recipe), benchmark, repository)
    if {"name", "sha256"} <= set(recipe) <= RECIPE_BLOCK_KEYS:
        return dict(recipe)
    # as the record holds it: the digest is of what a reader of the record finds there
    config = json.loads(json.dumps(dict(recipe), ensure_ascii=False, default=str))
    return {"name": name, "sha256": recipe_digest(config), "config": config}


def _recipe_file_block(path: Path, benchmark: str | None,
                       repository: str | Path | None) -> dict[str, Any]:
    root = Path(repository if repository is not None else Path.cwd()).resolve()
    try:
        relative: str | None = path.resolve().relative_to(root).as_posix()
    except ValueError:
        relative = None
    if relative is not None and recipe_path_problem(relative, benchmark) is None:
        return {"name": path.name, "sha256": file_sha256(path), "path": relative}
    import yaml

    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"recipe {path} is not YAML or JSON: {err}") from None
    if not isinstance(values, dict):
        raise ValueError(f"recipe {path} holds no mapping: a recipe outside "
                         f"{' and '.join(recipe_folders(benchmark))} goes into the record, "
                         "and only a mapping of settings can")
    block = recipe_block(values, path.name)
    assert block is not None
    return block


def command_policy(model: str | Path, temperature: float | None = None, seed: int = 0) -> str:
    """A command policy's ``policy`` spec: its model folder, and how it chose: greedily, or
    one seeded draw per step at a temperature.

    >>> command_policy("runs/x/model"), command_policy("runs/x/model", 1.0, seed=3)
    ('commands:runs/x/model,greedy', 'commands:runs/x/model,temperature=1,seed=3')
    """
    if temperature is None:
        return f"commands:{model},greedy"
    return f"commands:{model},temperature={temperature:g},seed={seed}"


def _final_progress(episode: CommandEpisode) -> float | None:
    """The ``goal_progress`` primitive at the episode's last step (None where not emitted)."""
    if not episode.steps or "goal_progress" not in episode.steps[-1].primitives:
        return None
    return float(episode.steps[-1].primitives["goal_progress"])


def command_results(eval_set: EvalSet, episodes: Sequence[CommandEpisode],
                    base_seed: int = 0, *, adapter: FamilyAdapter) -> list[EpisodeResult]:
    """The episodes of a command-policy evaluation as the protocol's results: episode ``i``
    must have played the eval set's ``i``-th game (a full evaluation plays them all, a
    ``limit`` the first ones); anything else raises ``ValueError``. ``adapter``, which made
    ``eval_set``, names the task type of an episode that did not."""
    if len(episodes) > eval_set.size:
        raise ValueError(f"{len(episodes)} episodes, but the {eval_set.level} eval set has "
                         f"{eval_set.size} games")
    results = []
    for i, (episode, entry) in enumerate(zip(episodes, eval_set.entries, strict=False)):
        if episode.game_id != entry:
            raise ValueError(f"episode {i} played {episode.game_id!r}, but game {i} of the "
                             f"{eval_set.level} eval set is {entry!r}")
        results.append(EpisodeResult(
            index=i, entry=entry, seed=base_seed + i,
            task_type=episode.task_type or adapter.task_type(entry, {}),
            success=bool(episode.won), steps=episode.length, total_reward=float(episode.won),
            goal_progress=_final_progress(episode)))
    return results


def command_record(
    evaluation: Mapping[str, Any],
    episodes: Sequence[CommandEpisode],
    *,
    method: str,
    model: str,
    model_dir: str | Path,
    checkpoint: str,
    seed: int | None = None,
    meta_reward: str | Mapping[str, str] | None = None,
    recipe: str | Path | Mapping[str, Any] | None = None,
    level: str | None = None,
    policy_interface: str | None = None,
    env: str | FamilyAdapter,
    date: dt.date | None = None,
) -> dict[str, Any]:
    """The ``kind: run`` record of a command policy's evaluation:
    :func:`~derl_bench.evaluation.commands.evaluate_commands`'s result (``evaluation``) and
    the episodes it handed back (``episodes_out``), of the env ``env`` (its id, whose family
    is resolved here, once, or the :class:`~derl_bench.evaluation.families.FamilyAdapter`
    the caller resolved).

    ``method`` is the board's method name (``teacher-dagger``, ``grpo-outcome``, ``derl``);
    ``seed``, the training run's seed, is named in it (``derl (seed 2)``, filed as
    ``derl-s2-L0.json``). ``model`` names the model on the board, ``model_dir`` is the folder
    evaluated (recorded as the ``policy`` spec, relative to the current folder, with how it
    chose, greedy or the evaluation's temperature and seed, and the digest of its files),
    ``checkpoint`` which of the run's weights it holds, in words.
    ``meta_reward`` is the Meta-Reward expression the policy was trained with (or its
    ``{expression, hash}`` block; ``None`` for a policy trained without one),
    ``recipe`` the training recipe (see :func:`recipe_block`). ``level``, when given, must be
    the evaluation's. The record carries ``policy_interface`` (default: the one the evaluation
    played, which follows the model's view; else the compact state, constrained decoding) and
    the eval set, data checksums, versions and hardware of
    :func:`build_record`. Raises ``ValueError`` when the evaluation is not of the level's eval
    games in order, or the record would break the schema. A record of a ``limit``-ed
    evaluation is built but does not validate for a board (n is not the eval set's size).
    """
    adapter = adapter_for(env)
    env_id = adapter.env_id
    policy_interface = policy_interface or evaluation.get("policy_interface",
                                                          COMPACT_CONSTRAINED)
    if evaluation.get("split") != "eval":
        raise ValueError(f"a record is of the eval split; this evaluation played "
                         f"{evaluation.get('split')!r}")
    if level is not None and level != evaluation.get("level"):
        raise ValueError(f"level {level!r}, but the evaluation is of level "
                         f"{evaluation.get('level')!r}")
    if policy_interface not in adapter.policy_interfaces:
        raise ValueError(f"{env_id} offers no {policy_interface!r} policy interface")
    if not episodes:
        raise ValueError("no episodes: pass evaluate_commands(..., episodes_out=[...])'s list")
    won = sum(bool(e.won) for e in episodes)
    if (evaluation.get("games"), evaluation.get("won")) != (len(episodes), won):
        raise ValueError(f"the evaluation counts {evaluation.get('won')} of "
                         f"{evaluation.get('games')} games won, its episodes {won} of "
                         f"{len(episodes)}: not the episodes of this evaluation")
    if not checkpoint:
        raise ValueError("say which weights were evaluated (checkpoint)")
    eval_set = adapter.eval_set(str(evaluation["level"]))
    draws = int(evaluation.get("seed") or 0)  # a sampled evaluation's seed; 0 for greedy
    results = command_results(eval_set, episodes, draws, adapter=adapter)
    if isinstance(meta_reward, str):
        meta_block: Mapping[str, str] | None = meta_reward_block(meta_reward, adapter)
    else:
        meta_block = meta_reward
    record = build_record(
        eval_set, results, method=method if seed is None else f"{method} (seed {seed})",
        model=model, policy_spec=command_policy(model_dir, evaluation.get("temperature"),
                                                draws), base_seed=draws,
        wall_time_s=float(evaluation.get("seconds", 0.0)), recipe=recipe,
        meta_reward=meta_block, date=date, checkpoint=checkpoint,
        policy_interface=policy_interface, adapter=adapter)
    problems = schema_errors(record, RESULT_SCHEMA)
    if problems:
        raise ValueError("; ".join(problems))
    return record
