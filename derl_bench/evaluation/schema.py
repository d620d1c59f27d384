"""The result record: a versioned JSON document that says what was run and what came out.

The schema below is JSON Schema (draft 2020-12 keywords), kept as data so it can be printed
(``derl-bench leaderboard schema``) and checked without executing anything from a record.
:func:`schema_errors` implements the subset of keywords the schema uses; rules that JSON Schema
cannot say (the SE agrees with n, hashes match the manifests) live in
:mod:`derl_bench.leaderboard.validate`.

    >>> schema_errors({"schema_version": "0"}, RESULT_SCHEMA)[:1]
    ["$: missing required field 'kind'"]
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION = "derl-bench-result/1"
REPORTED_NOTE = "reported, not reproduced here"

PROMPT_FREE_TEXT = "prompt-free-text"
COMPACT_CONSTRAINED = "compact-constrained"
COMPACT_TRIED_CONSTRAINED = "compact-tried-constrained"
COMMAND_INTERFACES = (COMPACT_CONSTRAINED, COMPACT_TRIED_CONSTRAINED)
"""The interfaces of command policies (``commands:...``): a view of the game a family's
``commands`` hook offers, decoding constrained to the admissible commands."""
POLICY_INTERFACES: dict[str, str] = {
    PROMPT_FREE_TEXT: "the family's prompt (the papers' ReAct-style prompt for the agent envs), "
                      "the action generated as free text and parsed from it",
    COMPACT_CONSTRAINED: "a compact text state of the game instead of the prompt, decoding "
                         "constrained to the admissible commands (the policy cannot send an "
                         "invalid command)",
    COMPACT_TRIED_CONSTRAINED: "the compact text state plus the commands already tried in the "
                               "same situation, decoding constrained to the admissible "
                               "commands",
}
"""What a policy reads and how its action is produced (a record's ``policy_interface``).
Numbers of different interfaces are not comparable: a board shows each apart."""
DEFAULT_POLICY_INTERFACE = PROMPT_FREE_TEXT
"""The interface of a record without the field: every published number and every run of
``derl-bench evaluate --policy`` (scripted baselines included)."""


def policy_interface(record: Mapping[str, Any]) -> str:
    """A record's policy interface; absent means :data:`DEFAULT_POLICY_INTERFACE`.

    >>> policy_interface({}), policy_interface({"policy_interface": "compact-constrained"})
    ('prompt-free-text', 'compact-constrained')
    """
    return str(record.get("policy_interface", DEFAULT_POLICY_INTERFACE))


_HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
RECIPE_PATH_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$"
"""A recipe's ``path``: relative, of plain parts, none hidden or ``..``."""
_NAME = {"type": "string", "minLength": 1, "maxLength": 120,
         "pattern": r"^[A-Za-z0-9][A-Za-z0-9 _.,:;+/()\[\]%=@#'-]*$"}
_TEXT = {"type": "string", "maxLength": 2000}
_RATE = {"type": "number", "minimum": 0, "maximum": 1}
_RATE_OR_NULL = {"type": ["number", "null"], "minimum": 0, "maximum": 1}
_COUNT = {"type": "integer", "minimum": 0}
_VERSION = {"type": ["string", "null"], "maxLength": 64, "pattern": r"^[A-Za-z0-9.+_-]*$"}

WEIGHT_POLICIES = ("llm:", "commands:")
"""How a ``policy`` spec that loads a model's weights begins: the spec names the model (a
folder or a hub id) after the prefix, up to the first comma."""

SETUP_FIELDS = ("step_cap", "episodes", "drawn", "repeats", "checkpoint")
"""What a reader needs to compare a number with another: the step cap, how many eval episodes
and how they were drawn, how many repeats the number averages, and which checkpoint was
evaluated. (The model is the record's ``model``, the metric ``results.metric``.)"""

_SETUP = {
    "type": "object",
    "additionalProperties": False,
    "required": [*SETUP_FIELDS, "unknown"],
    "properties": {
        "step_cap": {"type": ["integer", "null"], "minimum": 1},
        "episodes": {"type": ["integer", "null"], "minimum": 1},
        "drawn": {"type": ["string", "null"], "minLength": 1, "maxLength": 300},
        "repeats": {"type": ["integer", "null"], "minimum": 1},
        "checkpoint": {"type": ["string", "null"], "minLength": 1, "maxLength": 300},
        # a policy that loads weights (WEIGHT_POLICIES): the digest of its model folder
        # (derl_bench.policies.model_files.model_digest); null where the files were not
        # hashed, a reason docs/evaluation.md gives once rather than every record
        "checkpoint_sha256": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"},
        # why a field is null: only a reported record may leave one unknown
        "unknown": {"type": "object", "maxProperties": len(SETUP_FIELDS),
                    "propertyNames": {"enum": list(SETUP_FIELDS)},
                    "additionalProperties": {"type": "string", "minLength": 1,
                                             "maxLength": 500}},
    },
}

_SUCCESS_RATE = {
    "type": "object",
    "required": ["mean", "se"],
    "additionalProperties": False,
    "properties": {"mean": _RATE, "se": _RATE_OR_NULL},
}

RESULT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://derl-bench/schemas/result-record-1.json",
    "title": "derl-bench result record",
    "type": "object",
    "additionalProperties": False,
    "required": ["schema_version", "kind", "benchmark", "env", "level", "eval_set",
                 "data_checksums", "versions", "method", "model", "policy", "recipe",
                 "meta_reward", "seeds", "hardware", "date", "setup", "results", "source"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "kind": {"enum": ["run", "reported"]},
        # absent for the strict protocol, which is what a board ranks
        "protocol": {"enum": ["strict", "rlvmr"]},
        # absent for the prompt-free-text interface (the papers' and every older record's)
        "policy_interface": {"enum": list(POLICY_INTERFACES)},
        "benchmark": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,40}$"},
        "env": {
            "type": "object",
            "additionalProperties": False,
            "required": ["id", "card_version", "kwargs"],
            "properties": {
                "id": {"type": "string", "pattern": r"^derl/[A-Za-z0-9]+-v[0-9]+$"},
                "card_version": {"type": "integer", "minimum": 1},
                "kwargs": {"type": "object", "maxProperties": 32},
            },
        },
        "level": {"enum": ["L0", "L1", "L2"]},
        "eval_set": {
            "type": "object",
            "additionalProperties": False,
            "required": ["manifest", "manifest_sha256", "manifest_count", "selection",
                         "sample_seed", "size", "episodes_sha256"],
            "properties": {
                "manifest": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]{1,64}$"},
                "manifest_sha256": _HEX64,
                "manifest_count": {"type": "integer", "minimum": 1},
                "selection": {"enum": ["all", "sample", "draws"]},
                "sample_seed": {"type": ["integer", "null"], "minimum": 0},
                "size": {"type": "integer", "minimum": 1},
                "episodes_sha256": _HEX64,
            },
        },
        "data_checksums": {
            "type": "object",
            "maxProperties": 16,
            "propertyNames": {"pattern": r"^[A-Za-z0-9_./:-]{1,200}$"},
            "additionalProperties": _HEX64,
        },
        "versions": {
            "type": "object",
            "additionalProperties": False,
            "required": ["derl-bench", "python", "gymnasium", "alfworld", "textworld",
                         "scienceworld", "math-verify", "torch", "transformers"],
            "properties": {name: _VERSION for name in (
                "derl-bench", "python", "gymnasium", "alfworld", "textworld", "scienceworld",
                "math-verify", "torch", "transformers")},
        },
        "method": _NAME,
        "model": _NAME,
        "policy": {"type": ["string", "null"], "maxLength": 200,
                   "pattern": r"^[A-Za-z0-9_.:/@=,+-]+$"},
        "recipe": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["name", "sha256"],
            "properties": {
                "name": _NAME, "sha256": _HEX64,
                # where the repository holds the recipe (relative to its root, no hidden or
                # parent parts): the validator hashes the file, or its "config" object
                "path": {"type": "string", "minLength": 1, "maxLength": 300,
                         "pattern": RECIPE_PATH_PATTERN},
                # or the recipe itself, whose canonical JSON the sha256 hashes
                "config": {"type": "object", "maxProperties": 200},
            },
        },
        "meta_reward": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["expression", "hash"],
            "properties": {
                # arithmetic over primitive names only; the validator never evaluates it
                "expression": {"type": "string", "maxLength": 1000,
                               "pattern": r"^[A-Za-z0-9_ .+\-*/(),<>=!?:]+$"},
                "hash": {"type": "string", "pattern": "^[0-9a-f]{8,64}$"},
            },
        },
        "seeds": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["base", "rule"],
            "properties": {"base": {"type": "integer", "minimum": 0},
                           "rule": {"const": "episode i of the eval set uses seed base + i"}},
        },
        "hardware": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["platform", "cpu", "cpu_count", "gpu"],
            "properties": {"platform": _TEXT, "cpu": _TEXT,
                           "cpu_count": {"type": "integer", "minimum": 1},
                           "gpu": {"type": ["string", "null"], "maxLength": 200}},
        },
        "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
        "setup": _SETUP,
        "results": {
            "type": "object",
            "additionalProperties": False,
            "required": ["n", "successes", "success_rate", "mean_score", "per_task_type",
                         "mean_steps", "wall_time_s", "metric"],
            "properties": {
                "n": {"type": ["integer", "null"], "minimum": 1},
                "successes": {"type": ["integer", "null"], "minimum": 0},
                "success_rate": _SUCCESS_RATE,
                "mean_score": {"type": ["number", "null"]},
                "per_task_type": {
                    "type": "object",
                    "maxProperties": 64,
                    "propertyNames": {"pattern": r"^[A-Za-z0-9_.-]{1,80}$"},
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["n", "successes", "success_rate", "mean_score"],
                        "properties": {"n": {"type": "integer", "minimum": 1},
                                       "successes": _COUNT,
                                       "success_rate": _SUCCESS_RATE,
                                       "mean_score": {"type": ["number", "null"]},
                                       "goal_progress": {"type": "number", "minimum": 0,
                                                         "maximum": 1}},
                    },
                },
                "mean_steps": {"type": ["number", "null"], "minimum": 0},
                "wall_time_s": {"type": ["number", "null"], "minimum": 0},
                # what success_rate counts: strict (the board's default) or the published rule
                "metric": {"enum": ["strict", "published"]},
                # agents: the goal's share of conditions holding at the episode's end, mean
                # over episodes (a secondary endpoint beside success)
                "goal_progress": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["mean", "se"],
                    "properties": {"mean": {"type": "number", "minimum": 0, "maximum": 1},
                                   "se": {"type": ["number", "null"], "minimum": 0}},
                },
                # ScienceWorld runs: the published (RLVMR) metric next to the strict one
                "published": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["successes", "success_rate"],
                    "properties": {"successes": _COUNT, "success_rate": _SUCCESS_RATE},
                },
            },
        },
        "source": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["citation", "url", "table", "note"],
            "properties": {"citation": _TEXT,
                           "url": {"type": "string", "pattern": r"^https://[A-Za-z0-9./_#-]+$"},
                           "table": _NAME, "note": _TEXT},
        },
    },
}

_JSON_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_errors(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Check ``value`` against ``schema``; return one message per violation (empty: valid).

    Supports the keywords :data:`RESULT_SCHEMA` uses: type, const, enum, required, properties,
    additionalProperties, propertyNames, maxProperties, pattern, minLength, maxLength,
    minimum, maximum.
    """
    errors: list[str] = []
    if "const" in schema and value != schema["const"]:
        return [f"{path}: must be {schema['const']!r}, got {_short(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: must be one of {schema['enum']}, got {_short(value)}"]
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        if not any(_JSON_TYPES[t](value) for t in allowed):
            return [f"{path}: must be {' or '.join(allowed)}, got {type(value).__name__}"]
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            return [f"{path}: must be a finite number"]
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: {_short(value)} does not match {schema['pattern']}")
    if isinstance(value, dict):
        errors.extend(_object_errors(value, schema, path))
    return errors


def _object_errors(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors = [f"{path}: missing required field {name!r}"
              for name in schema.get("required", ()) if name not in value]
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(f"{path}: more than {schema['maxProperties']} fields")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for key, item in value.items():
        where = f"{path}.{key}"
        if names is not None:
            errors.extend(schema_errors(key, names, f"{path} key"))
        if key in properties:
            errors.extend(schema_errors(item, properties[key], where))
        elif extra is False:
            errors.append(f"{path}: unknown field {key!r}")
        elif isinstance(extra, dict):
            errors.extend(schema_errors(item, extra, where))
    return errors


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def binomial_se(mean: float, n: int) -> float:
    """Standard error of a success rate over ``n`` independent episodes: sqrt(p(1-p)/n).

    >>> round(binomial_se(0.5, 100), 3)
    0.05
    """
    if n <= 0:
        raise ValueError("n must be positive")
    return math.sqrt(max(0.0, mean * (1.0 - mean)) / n)
