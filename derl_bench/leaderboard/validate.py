"""Check leaderboard submissions: pure JSON reading, nothing in a file is ever executed.

A submission is rejected, with every reason found, when:

- it is not a regular file (a symlink, a FIFO, a device: checked with ``lstat`` before it is
  opened, so no entry can hang or exhaust the validator), or it is over 1 MB;
- it is not strict JSON (malformed, duplicate keys, NaN/Infinity, not UTF-8);
- it breaks the schema (:data:`~derl_bench.evaluation.schema.RESULT_SCHEMA`);
- any string in it looks like code (script tags, shell substitution, Python dunders, ...);
- its env, level or benchmark is unknown, or it sits in another benchmark's folder;
- on a board, its file name does not name its level (``...-L1.json``), its method (as a
  lowercase slug, ``GRPO, average reward`` -> ``grpo-average-reward``) or the seed that its
  method names (``derl (seed 2)`` -> ``derl-s2-L1.json``); or it repeats another file's record;
- among the files checked together (a leaderboards folder), it is a second ``run`` record of
  the same benchmark, policy interface, method, model, seed and level (the board would show
  both); a ``reported`` record that names no seed is exempt, as sources may report the same
  method and model, and one that names a seed is a duplicate only of another from the same
  source;
- its env kwargs differ from the protocol's (another split, another step cap);
- its eval-set block (manifest name, sha256, count, selection, size, episodes checksum) differs
  from the current protocol's;
- a data checksum names a file the benchmark does not know or differs from the recorded one
  (the data catalogue's checksums, and the card's ``data_checksums``), or a ``run`` record
  lists none;
- a ``run`` record's n is not the eval-set size, its successes disagree with its rate, its SE
  disagrees with n, or its per-task-type breakdown does not add up;
- its per-task-type breakdown names a task type that the level's eval set does not have;
- its ``meta_reward`` expression does not compile against its env's primitives (the reward
  compiler parses it; nothing is evaluated), or its hash is not the expression's;
- a ScienceWorld ``run`` record lacks the published metric next to the strict one, or says its
  ``success_rate`` counts anything but strict success;
- a ``reported`` record lacks its citation and the "reported, not reproduced here" note, or
  claims a standard error;
- its ``setup`` leaves a field null without saying why (or says why of a field it gives); a
  ``run`` record leaves any null, or its step cap, episode count, draw rule or repeats differ
  from the protocol's one pass over its eval set;
- its date is not a real date or lies in the future;
- it was run under another protocol than the strict one (``protocol: rlvmr``);
- it names a policy interface its env does not offer (``policy_interface``: the compact,
  constrained interface exists for ALFWorld only);
- its policy names a folder of the machine that made it (an absolute or home-relative path);
  a ``run`` of a policy that loads weights (``llm:``, ``commands:``) does not state the digest
  of its model folder (``setup.checkpoint_sha256``, null where its files were not hashed), or
  another record states one;
- its recipe cannot be checked: neither embedded (``config``, whose canonical JSON its sha256
  hashes) nor cited (``path``, a file under ``baselines/`` or the board's evidence folder that
  the repository holds and whose bytes, or ``config`` object, its sha256 hashes).

    >>> problems_in_text('{"a": 1, "a": 2}')
    ["malformed JSON: duplicate key 'a'"]
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from derl_bench.evaluation.families import FamilyAdapter, adapter_for, evaluated_env_ids
from derl_bench.evaluation.protocol import ProtocolError, draw_rule
from derl_bench.evaluation.record import RUN_HERE_FILE, recipe_digest, recipe_path_problem
from derl_bench.evaluation.schema import (
    COMMAND_INTERFACES,
    REPORTED_NOTE,
    RESULT_SCHEMA,
    SETUP_FIELDS,
    WEIGHT_POLICIES,
    binomial_se,
    policy_interface,
    schema_errors,
)
from derl_bench.family import Family, board_folder, family_specs, resolve_family

MAX_BYTES = 1 << 20
SE_TOLERANCE = 1e-6
"""Absolute slack between a record's SE and sqrt(p(1-p)/n) (JSON floats round-trip exactly)."""

CODE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
        ("HTML/script tag", r"<\s*/?\s*(script|iframe|object|embed|img|svg|style|link|meta)\b"),
        ("javascript: URL", r"javascript\s*:"),
        ("HTML event handler", r"\bon[a-z]+\s*="),
        ("Python dunder", r"__[A-Za-z]+__"),
        ("Python import", r"(^|[\s;])(import\s+[A-Za-z_]|from\s+[A-Za-z_.]+\s+import\b)"),
        ("call of eval/exec/compile/open/system", r"\b(eval|exec|compile|open|system|popen|"
                                                  r"getattr|globals|locals)\s*\("),
        ("lambda", r"\blambda\b"),
        ("os/subprocess call", r"\b(os|subprocess|shutil|sys)\s*\.\s*[A-Za-z_]+"),
        ("shell substitution", r"\$\(|`|\$\{"),
        ("shell pipeline", r"(\|\s*(sh|bash|python)\b|;\s*(rm|curl|wget)\b|&&\s*\w)"),
        ("pickle/marshal payload", r"\b(pickle|marshal|cPickle)\b"),
        ("template injection", r"\{\{.*\}\}|\{%.*%\}"),
    )
)


class SubmissionError(ValueError):
    """Raised by :func:`load_submission` with every reason a file is rejected."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Report:
    """The outcome for one file: its problems (empty when valid) and the parsed record."""

    path: Path
    problems: list[str] = field(default_factory=list)
    record: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_strict(text: str) -> Any:
    """``json.loads`` that also rejects duplicate keys and NaN/Infinity."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def _strings(value: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{path} key", str(key)
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def code_problems(record: Any) -> list[str]:
    """One problem per string (or key) that looks like code."""
    problems = []
    for path, text in _strings(record):
        for name, pattern in CODE_PATTERNS:
            if pattern.search(text):
                problems.append(f"{path}: embedded code string ({name}) rejected")
                break
    return problems


def _close(a: float, b: float, tol: float = SE_TOLERANCE) -> bool:
    return math.isclose(a, b, rel_tol=0.0, abs_tol=tol)


def _rate_problems(block: Mapping[str, Any], n: int, successes: int, where: str) -> list[str]:
    problems = []
    mean, se = block["mean"], block["se"]
    if successes > n:
        problems.append(f"{where}: {successes} successes out of n={n}")
    if not _close(mean, successes / n, 1e-9):
        problems.append(f"{where}: mean {mean} != successes/n = {successes}/{n}")
    expected = binomial_se(mean, n)
    if se is None:
        problems.append(f"{where}: a run record needs a standard error")
    elif not _close(se, expected):
        problems.append(f"{where}: SE {se} does not agree with n={n} "
                        f"(sqrt(p(1-p)/n) = {expected:.6g})")
    return problems


def _run_problems(record: Mapping[str, Any], size: int, adapter: FamilyAdapter) -> list[str]:
    res = record["results"]
    problems = []
    for name in ("n", "successes", "mean_steps", "wall_time_s"):
        if res[name] is None:
            problems.append(f"$.results.{name}: required for a run record")
    for name in ("seeds", "hardware", "policy"):
        if record[name] is None:
            problems.append(f"$.{name}: required for a run record")
    if record["source"] is not None:
        problems.append("$.source: only reported records cite a source")
    if problems:
        return problems
    n, successes = res["n"], res["successes"]
    if n < size:
        problems.append(f"$.results.n: n={n} is too small: the eval set has {size} episodes")
    elif n > size:
        problems.append(f"$.results.n: n={n} is larger than the eval set ({size} episodes)")
    problems += _rate_problems(res["success_rate"], n, successes, "$.results.success_rate")
    types = res["per_task_type"]
    if not types:
        problems.append("$.results.per_task_type: empty")
    else:
        for name, block in types.items():
            problems += _rate_problems(block["success_rate"], block["n"], block["successes"],
                                       f"$.results.per_task_type.{name}.success_rate")
        if sum(b["n"] for b in types.values()) != n:
            problems.append("$.results.per_task_type: the task types' n do not add up to n")
        if sum(b["successes"] for b in types.values()) != successes:
            problems.append("$.results.per_task_type: the successes do not add up")
    problems += _published_problems(res, n, adapter.has_published)
    if res["mean_steps"] > adapter.max_steps:
        problems.append(f"$.results.mean_steps: {res['mean_steps']} exceeds the "
                        f"{adapter.max_steps}-step cap")
    if adapter.has_score and res["mean_score"] is None:
        problems.append("$.results.mean_score: this env has a score; record its mean")
    return problems


def _published_problems(res: Mapping[str, Any], n: int, has_published: bool) -> list[str]:
    """A run counts strict success; where the env has a published metric it reports that too."""
    if res.get("metric", "strict") != "strict":
        return ["$.results.metric: a run record's success_rate counts strict success"]
    block = res.get("published")
    if not has_published:
        return [] if block is None else ["$.results.published: this env has no published metric"]
    if block is None:
        return ["$.results.published: this env has a published metric; record it"]
    return _rate_problems(block["success_rate"], n, block["successes"],
                          "$.results.published.success_rate")


_SETUP_HINTS = {"checkpoint": " (which weights were evaluated: derl-bench evaluate --checkpoint)"}


def _setup_problems(record: Mapping[str, Any], adapter: FamilyAdapter) -> list[str]:
    """The setup says what it knows, says why for what it does not, and a run's setup is the
    protocol's: one pass over its eval set, capped at the env's step cap."""
    setup = record["setup"]
    unknown = setup["unknown"]
    problems = []
    for name in SETUP_FIELDS:
        if setup[name] is None and name not in unknown:
            problems.append(f"$.setup.{name}: null without a reason in $.setup.unknown")
        elif setup[name] is not None and name in unknown:
            problems.append(f"$.setup.unknown.{name}: given a reason, but the value is known")
    if record["kind"] != "run":
        return problems
    problems = [p for p in problems if "without a reason" not in p]
    for name in SETUP_FIELDS:
        if setup[name] is None:
            problems.append(f"$.setup.{name}: a run record states it"
                            f"{_SETUP_HINTS.get(name, '')}")
    expected = {"step_cap": adapter.max_steps, "episodes": record["results"]["n"],
                "drawn": draw_rule(record["eval_set"]), "repeats": 1}
    for name, want in expected.items():
        if setup[name] is not None and setup[name] != want:
            problems.append(f"$.setup.{name}: {setup[name]!r} differs from the protocol's "
                            f"{want!r}")
    return problems


def _reported_problems(record: Mapping[str, Any], adapter: FamilyAdapter) -> list[str]:
    problems = []
    results = record["results"]
    if "published" in results:
        problems.append("$.results.published: a reported record gives one rate, labelled by "
                        "$.results.metric")
    if results.get("metric") == "published" and not adapter.has_published:
        problems.append("$.results.metric: this env has no published metric")
    source = record["source"]
    if source is None:
        problems.append("$.source: a reported record must cite its source")
    elif REPORTED_NOTE not in source["note"]:
        problems.append(f"$.source.note: must say {REPORTED_NOTE!r}")
    if record["results"]["success_rate"]["se"] is not None:
        problems.append("$.results.success_rate.se: the source reports no SE; leave it null")
    return problems


def _eval_set_problems(record: Mapping[str, Any],
                       adapter: FamilyAdapter | None) -> tuple[list[str], int]:
    env_id = record["env"]["id"]
    if adapter is None:
        return [f"$.env.id: unknown env {env_id!r}"], 0
    problems = []
    if record["benchmark"] != adapter.benchmark:
        problems.append(f"$.benchmark: {record['benchmark']!r} does not match env {env_id} "
                        f"(expected {adapter.benchmark!r})")
    card_version = adapter.spec.card_version
    if record["env"]["card_version"] > card_version:
        problems.append(f"$.env.card_version: {record['env']['card_version']} is newer than "
                        f"the card ({card_version})")
    try:
        spec = adapter.level(record["level"])
        # reported numbers come from the authors' full eval split, never from our sample
        expected = spec.describe() if record["kind"] == "run" else spec.describe_full()
    except ProtocolError as exc:
        return [*problems, f"$.level: {exc}"], 0
    if record["env"]["kwargs"] != spec.env_kwargs:
        problems.append(f"$.env.kwargs: {record['env']['kwargs']} differ from the protocol's "
                        f"{spec.env_kwargs} (the protocol fixes the env's settings)")
    given = record["eval_set"]
    names = {"manifest_sha256": "hash", "episodes_sha256": "hash"}
    for key, want in expected.items():
        if given.get(key) != want:
            what = names.get(key, "value")
            problems.append(f"$.eval_set.{key}: {what} {given.get(key)!r} does not match the "
                            f"current manifest ({want!r})")
    return problems, int(expected["size"])


def _interface_problems(record: Mapping[str, Any], adapter: FamilyAdapter | None) -> list[str]:
    """The record's policy interface is one its env offers, and the one its policy has: a
    ``commands:`` policy decodes constrained to the admissible commands, and says so (a record
    without the field would be read as a free-text prompt row); no other policy does."""
    env_id, interface = record["env"]["id"], policy_interface(record)
    problems = []
    policy = record.get("policy")
    if isinstance(policy, str):
        commands = policy.startswith("commands:")
        if commands and record.get("policy_interface") not in COMMAND_INTERFACES:
            problems.append(f"$.policy_interface: the policy {policy.split(',')[0]!r} is a "
                            f"command policy; its record must state a command policy's "
                            f"policy_interface ({', '.join(map(repr, COMMAND_INTERFACES))})")
        if not commands and interface in COMMAND_INTERFACES:
            problems.append(f"$.policy_interface: {interface!r} is the interface of "
                            f"a command policy (commands:...), not of {policy.split(',')[0]!r}")
    if adapter is not None and interface not in adapter.policy_interfaces:
        # (no adapter: reported by the eval-set check)
        problems.append(f"$.policy_interface: {env_id} offers no {interface!r} interface "
                        f"(it offers {', '.join(adapter.policy_interfaces)})")
    return problems


_MACHINE_PATH = re.compile(r"^(/|~|[A-Za-z]:[/\\])")
"""An absolute or home-relative path: a folder of the machine that wrote it."""


def _policy_path_problems(record: Mapping[str, Any]) -> list[str]:
    """The policy spec names no folder of the machine that made the record (its model, or a
    path in an option): elsewhere the path means nothing, and says where one machine kept its
    runs."""
    policy = record.get("policy")
    if not isinstance(policy, str):
        return []
    head, *options = policy.split(",")
    values = [head.partition(":")[2] or head, *(o.partition("=")[2] for o in options)]
    return [f"$.policy: {value!r} is a path on the machine that made the record (absolute or "
            f"home-relative); name the model folder relative to the folder the command ran in "
            f"(runs/...), as derl-bench evaluate records it"
            for value in values if _MACHINE_PATH.match(value)]


def _checkpoint_digest_problems(record: Mapping[str, Any]) -> list[str]:
    """A run of a policy that loads weights says which bytes it scored (the digest of its
    model folder, or null where they were not hashed); no other record has a digest."""
    policy = record.get("policy")
    loads = isinstance(policy, str) and policy.startswith(WEIGHT_POLICIES)
    given = "checkpoint_sha256" in record["setup"]
    if loads and record["kind"] == "run" and not given:
        return ["$.setup.checkpoint_sha256: a run of a policy that loads weights states the "
                "digest of its model folder (null where its files were not hashed)"]
    if given and not loads:
        return ["$.setup.checkpoint_sha256: only a policy that loads weights "
                f"({', '.join(WEIGHT_POLICIES)}) has a model folder to hash"]
    return []


def _recipe_problems(record: Mapping[str, Any], repository: Path | None) -> list[str]:
    """The recipe's sha256 can be checked: the recipe is embedded (``config``, whose canonical
    JSON it hashes) or cited (``path``, a file the repository keeps under ``baselines/`` or the
    board's evidence folder, whose bytes, or whose ``config`` object, it hashes). Without a
    ``repository`` (a file checked off a board) a cited file is not looked for."""
    block = record["recipe"]
    if block is None:
        return []
    path, config, sha256 = block.get("path"), block.get("config"), block["sha256"]
    if (path is None) == (config is None):
        return ["$.recipe: cite the recipe file the repository holds (path) or embed the recipe "
                "(config), one of the two: a bare sha256 names a recipe nobody can check"
                if path is None else "$.recipe: give path or config, not both"]
    if config is not None:
        digest = recipe_digest(config)
        return [] if digest == sha256 else [
            f"$.recipe.sha256: {sha256!r} is not the hash of the embedded config (its "
            f"canonical JSON hashes to {digest!r})"]
    problem = recipe_path_problem(path, record["benchmark"])
    if problem is not None:
        return [f"$.recipe.path: {problem}"]
    if repository is None:
        return []
    file = repository / path
    root = repository.resolve()
    if file.exists() and not file.resolve().is_relative_to(root):
        return [f"$.recipe.path: {path} leads out of the repository ({root})"]
    data, why = read_regular_file(file)
    if data is None:
        return [f"$.recipe.path: {path} is not a file the repository holds ({why})"]
    if hashlib.sha256(data).hexdigest() == sha256:
        return []
    try:
        held = json.loads(data)
    except ValueError:
        held = None
    if isinstance(held, dict) and isinstance(held.get("config"), dict) and recipe_digest(
            held["config"]) == sha256:
        return []
    return [f"$.recipe.sha256: {sha256!r} is the hash neither of {path} nor of its config"]


def known_data_checksums(family: str | Family) -> dict[str, frozenset[str]]:
    """Data path -> the sha256 values accepted for it: every checksum the data catalogue records
    (:mod:`derl_bench.data.sources`, the cards' ``data_checksums`` included: checksums over a
    selection of files, such as an eval set's games), plus the manifest
    checksum of each generated split (``<family>/<split>``).

    ``family`` is a resolved :class:`~derl_bench.family.Family`, or a family's name."""
    from derl_bench.data.verify import catalogue

    family = resolve_family(family)
    known = {path: set(expected.sha256) for path, expected in catalogue().items()}
    card = family.card
    # A family that generates its problems (derl/Arithmetic-v0) reads no files: the data of a
    # split is its generated manifest, checksummed on the card.
    for split, spec in (card.get("splits") or {}).items():
        if isinstance(spec, Mapping) and spec.get("manifest_sha256"):
            known.setdefault(f"{family.name}/{split}", set()).add(str(spec["manifest_sha256"]))
    return {path: frozenset(digests) for path, digests in known.items() if digests}


def _data_checksum_problems(record: Mapping[str, Any], adapter: FamilyAdapter) -> list[str]:
    given = record["data_checksums"]
    if record["kind"] == "run" and not given:
        return ["$.data_checksums: a run record must list the checksums of the data it read"]
    known = _known_checksums(adapter)
    problems = []
    for path, digest in given.items():
        if path not in known:
            problems.append(f"$.data_checksums.{path}: not a data file this benchmark knows")
        elif digest not in known[path]:
            problems.append(f"$.data_checksums.{path}: sha256 {digest!r} does not match the "
                            f"recorded {' or '.join(sorted(known[path]))}")
    return problems


def _meta_reward_problems(record: Mapping[str, Any]) -> list[str]:
    """The Meta-Reward a record names is one its env can compute: it compiles against the
    primitives the env's family declares, and its hash is the compiled expression's."""
    block = record["meta_reward"]
    if block is None:
        return []
    from derl_bench.reward import MetaRewardError, compile_reward

    env_id = record["env"]["id"]
    try:
        compiled = compile_reward(block["expression"], env=env_id)
    except MetaRewardError as exc:
        # the compiler's message goes on to draw the expression with a caret under the fault
        return [f"$.meta_reward.expression: does not compile against the primitives of "
                f"{env_id}: {str(exc).splitlines()[0]}"]
    if block["hash"] != compiled.hash:
        return [f"$.meta_reward.hash: {block['hash']!r} is not the hash of the expression "
                f"({compiled.hash!r})"]
    return []


# Keyed by the adapter: a family resolved again after a reload makes new ones, so what was
# read from the old cards is never handed out for the new.
@functools.cache
def _known_checksums(adapter: FamilyAdapter) -> dict[str, frozenset[str]]:
    return known_data_checksums(adapter.resolved)


@functools.cache
def _level_task_types(adapter: FamilyAdapter, level: str) -> frozenset[str]:
    return adapter.task_types(level)


def _task_type_problems(record: Mapping[str, Any], adapter: FamilyAdapter) -> list[str]:
    """The per-task-type breakdown names only task types of the level's eval set."""
    known = _level_task_types(adapter, record["level"])
    return [f"$.results.per_task_type.{name}: not a task type of {record['env']['id']} at "
            f"{record['level']} (it has {', '.join(sorted(known))})"
            for name in record["results"]["per_task_type"] if name not in known]


def _date_problems(text: str) -> list[str]:
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        return [f"$.date: {text!r} is not a calendar date"]
    if day > dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1):
        return [f"$.date: {text} lies in the future"]
    return []


def name_problems(path: Path, record: Mapping[str, Any]) -> list[str]:
    """Whether a board file's name says what its record holds: level, method and seed."""
    if path.suffix != ".json":
        return [f"file name {path.name!r} ends in {path.suffix!r}: a record's file ends in "
                f"'.json' (lower case), or it is read on one disk and skipped on another"]
    stem = path.name.removesuffix(".json")
    method = record["method"]
    seed = _SEED.search(method)
    method_slug = _slug(method[: seed.start()] if seed else method)
    ending = f"-s{seed.group(1)}-{record['level']}" if seed else f"-{record['level']}"
    problems = []
    if not stem.endswith(ending):
        problems.append(f"file name {path.name!r} does not end in {ending + '.json'!r}, "
                        f"but its record is level {record['level']}"
                        + (f" of seed {seed.group(1)}" if seed else ""))
    if method_slug and f"-{method_slug}-" not in f"-{_slug(stem)}-":
        problems.append(f"file name {path.name!r} does not name its record's method "
                        f"{method!r} (as {method_slug!r})")
    return problems


_SEED = re.compile(r"\s*\(seed (\d+)\)\s*$")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def _record_adapter(env_id: str) -> FamilyAdapter | None:
    """The evaluation rules of a record's env id; ``None`` for an id with no evaluation
    protocol, which the eval-set check reports."""
    if env_id not in evaluated_env_ids():
        return None
    return adapter_for(env_id)


def record_problems(record: Any, path: Path | None = None,
                    repository: Path | None = None) -> list[str]:
    """Every reason ``record`` (parsed JSON) is not a valid submission; with ``path`` (a file on
    a board, ``<board>/<benchmark>/<name>.json``) also whether its folder and name fit it; with
    ``repository`` (the folder holding ``baselines/`` and ``leaderboards/``) also whether the
    recipe file it cites is there and hashes to its sha256."""
    problems = schema_errors(record, RESULT_SCHEMA)
    problems += code_problems(record)
    if problems:
        return problems
    adapter = _record_adapter(record["env"]["id"])
    problems += _date_problems(record["date"])
    if record.get("protocol", "strict") != "strict":
        problems.append(f"$.protocol: a {record['protocol']} record reproduces another "
                        "protocol; boards rank the strict protocol")
    eval_problems, size = _eval_set_problems(record, adapter)
    problems += eval_problems
    problems += _interface_problems(record, adapter)
    problems += _policy_path_problems(record)
    problems += _checkpoint_digest_problems(record)
    problems += _recipe_problems(record, repository)
    if path is not None:
        if path.parent.name != record["benchmark"]:
            problems.append(f"file is in folder {path.parent.name!r}, but its benchmark is "
                            f"{record['benchmark']!r}")
        problems += name_problems(path, record)
    if size and adapter is not None:
        problems += _setup_problems(record, adapter)
        problems += _data_checksum_problems(record, adapter)
        problems += _task_type_problems(record, adapter)
        problems += _meta_reward_problems(record)
        if record["kind"] == "run":
            problems += _run_problems(record, size, adapter)
        else:
            problems += _reported_problems(record, adapter)
    return problems


def problems_in_text(text: str, path: Path | None = None,
                     repository: Path | None = None) -> list[str]:
    """Parse ``text`` strictly and return every problem (empty: valid)."""
    try:
        record = parse_strict(text)
    except (ValueError, RecursionError) as exc:
        return [f"malformed JSON: {exc}"]
    return record_problems(record, path, repository)


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def read_regular_file(path: Path, limit: int = MAX_BYTES) -> tuple[bytes | None, str]:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes, else a problem.

    The entry is checked with ``lstat`` before it is opened, and opened without following a
    link or blocking, so a symlink to a device, a FIFO or a huge file is refused rather than
    read: a submission cannot hang or exhaust whoever validates it.
    """
    try:
        info = os.lstat(path)
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
        return None, f"{path.name} is {kind}; only regular files are read"
    if info.st_size > limit:
        return None, f"file is {info.st_size} bytes; the limit is {limit}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # swapped since the lstat
            return None, f"{path.name} is not a regular file; only regular files are read"
        data = fh.read(limit + 1)
    if len(data) > limit:
        return None, f"file is over {limit} bytes; the limit is {limit}"
    return data, ""


def _on_board(path: Path) -> bool:
    return path.parent.parent.name == "leaderboards"


def board_titles() -> dict[str, str]:
    """Every board the cards define, by its folder (the benchmark): its title.

    >>> board_titles()["gsm8k"], board_titles()["arithmetic"]
    ('GSM8K', 'Arithmetic')
    """
    return {entry.benchmark: spec.board(entry.benchmark).title
            for spec in family_specs().values() for entry in spec.ids.values()}


def records_benchmark(folder: Path) -> str | None:
    """The benchmark that the result records in ``folder`` (its ``*.json`` files, read as the
    validator reads them) name; None when it holds none."""
    for path in json_entries(folder):
        data, _ = read_regular_file(path)
        try:
            record = json.loads(data) if data is not None else None
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("benchmark"), str):
            return record["benchmark"]
    return None


def _in_leaderboards(folder: Path) -> bool:
    """Whether ``folder`` sits in a leaderboards folder, whose every subfolder is a board's: one
    named ``leaderboards`` (as :func:`validate_file` tells a board's file), or one holding the
    list of records run here beside a board folder (as ``leaderboard validate --dir`` reads)."""
    parent = folder.parent
    return _on_board(folder / "record.json") or ((parent / RUN_HERE_FILE).is_file() and any(
        (parent / name).is_dir() for name in board_titles()))


def records_folder_problem(folder: Path, env_id: str) -> str | None:
    """Why result records of ``env_id`` may not be written into ``folder``, else None; by the
    rule :func:`record_problems` checks on a board (a record's file sits in its benchmark's
    board folder), so that what is refused here is what ``leaderboard validate`` would
    refuse later: another benchmark's board folder, by its name or by the records it holds,
    or a folder in a leaderboards folder (:func:`_in_leaderboards`) named for no benchmark.

        >>> records_folder_problem(Path("boards/arithmetic"), "derl/Arithmetic-v0") is None
        True
        >>> records_folder_problem(Path("boards/gsm8k"), "derl/Arithmetic-v0").split("; ")[0]
        "records for derl/Arithmetic-v0 do not belong in the GSM8K board's folder boards/gsm8k"
    """
    ours = board_folder(env_id)
    theirs = folder.name if folder.name in board_titles() else records_benchmark(folder)
    home = folder.parent / ours
    if theirs is not None and theirs != ours:
        title = board_titles().get(theirs, theirs)
        return (f"records for {env_id} do not belong in the {title} board's folder {folder}; "
                f"write them into {home}, or a new folder")
    if folder.name != ours and _in_leaderboards(folder):
        return (f"records for {env_id} on a board go into its folder {home}, not {folder}: "
                "`leaderboard validate` refuses a record outside its benchmark's folder")
    return None


def validate_file(path: str | Path, board: bool | None = None,
                  repository: str | Path | None = None) -> Report:
    """Read and check one submission file.

    ``board`` says whether the file sits on a board (``<board>/<benchmark>/<name>.json``), so
    that its folder and name must fit its record; by default, when its folder's parent is
    named ``leaderboards``. ``repository`` is where a cited recipe file is looked for; by
    default, for a file on a board, the folder that holds its leaderboards folder, and for
    any other file nowhere (the citation's form is still checked).
    """
    path = Path(path)
    report = Report(path)
    data, problem = read_regular_file(path)
    if data is None:
        report.problems.append(problem)
        return report
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        report.problems.append(f"malformed JSON: not UTF-8 ({exc.reason})")
        return report
    in_board = _on_board(path) if board is None else board
    if repository is None and in_board:
        repository = path.absolute().parent.parent.parent
    report.problems = problems_in_text(text, path if in_board else None,
                                       None if repository is None else Path(repository))
    if report.ok:
        report.record = parse_strict(text)
    return report


def entry_key(record: Mapping[str, Any]) -> tuple[str, ...] | None:
    """What one board entry is: benchmark, policy interface, method and model (as their
    slugs, so that spelling variants meet), the seed the method names, and level; for a
    reported record also its source. ``None`` for a reported record that names no seed: sources
    may well report the same method and model, and each keeps its row.

    >>> entry_key({"kind": "run", "benchmark": "gsm8k", "method": "GRPO, outcome (seed 0)",
    ...            "model": "Qwen2.5-3B", "level": "L0", "source": None})
    ('gsm8k', 'prompt-free-text', 'grpo-outcome', 'qwen2.5-3b', '0', 'L0', '')
    """
    method = record["method"]
    seed = _SEED.search(method)
    if record["kind"] != "run" and seed is None:
        return None
    source = record["source"] or {}
    return (record["benchmark"], policy_interface(record),
            _slug(method[: seed.start()] if seed else method), _slug(record["model"]),
            seed.group(1) if seed else "", record["level"],
            "" if record["kind"] == "run" else f"{source.get('citation')} {source.get('table')}")


def validate_files(paths: Iterable[Path], board: bool | None = None,
                   repository: str | Path | None = None) -> list[Report]:
    """Check several files as :func:`validate_file` does; a record that another file already
    holds (the same JSON, whatever its layout) is a duplicate and rejected, and so is a second
    record of one board entry (:func:`entry_key`): the same method, model, seed and level."""
    reports = [validate_file(path, board, repository) for path in paths]
    seen: dict[str, Path] = {}
    entries: dict[tuple[str, ...], Path] = {}
    for report in reports:
        if report.record is None:
            continue
        canonical = json.dumps(report.record, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        key = entry_key(report.record)
        if digest in seen:
            report.problems.append(f"duplicate of {seen[digest]}: the same record twice")
            report.record = None
        elif key is not None and key in entries:
            record = report.record
            seed = _SEED.search(record["method"])
            report.problems.append(
                f"duplicate entry: {entries[key]} and {report.path} are both "
                f"{record['kind']} records of method {record['method']!r}, model "
                f"{record['model']!r}, {f'seed {seed.group(1)}, ' if seed else ''}level "
                f"{record['level']}; a board keeps one record per method, model, seed and "
                "level (remove one, or name the seed in the method: 'derl (seed 2)')")
            report.record = None
        else:
            seen[digest] = report.path
            if key is not None:
                entries[key] = report.path
    return reports


def validate_board(root: str | Path) -> list[Report]:
    """Check every submission under the leaderboards folder ``root``: each file sits on a board,
    so its board folder and name must fit its record, whatever ``root`` is called."""
    return validate_files(submission_files(root), board=True)


def json_entries(folder: Path) -> list[Path]:
    """The entries of ``folder`` named like JSON files, whatever the case of the ending
    (``x.JSON`` too, so that it is reported rather than skipped on a case-sensitive disk),
    hidden ones left out as a glob leaves them, sorted."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir()
                  if p.suffix.lower() == ".json" and not p.name.startswith("."))


def submission_files(root: str | Path) -> list[Path]:
    """Every entry named like a submission under ``root`` (``<root>/<benchmark>/*.json``, any
    case of ``.json``), sorted; entries that are not regular files are listed too, so that
    they are reported."""
    return sorted(path for board in Path(root).glob("*") for path in json_entries(board))


def load_submission(path: str | Path) -> dict[str, Any]:
    """Return a valid record, or raise :class:`SubmissionError` with every problem."""
    report = validate_file(path)
    if not report.ok or report.record is None:
        raise SubmissionError(report.problems)
    return report.record
