"""The reward-discovery methods: one module per method, each exporting one
:class:`~derl_bench.meta.methods.base.Method` as ``METHOD``, and the registry that finds them.

The registry feeds everything that lists or dispatches on methods: a recipe's ``method`` is
checked against it (:class:`~derl_bench.meta.config.MetaConfig`), ``derl-bench meta --method``
offers its names, the meta loop asks the method for its proposer, the proxy benchmark and the
proposer check run its methods, and the leaderboards group rows by its methods' groups.

Methods are found, in this order: the built-in ones (this package's modules), those the
``DERL_BENCH_METHOD_PATH`` setting names (separated by commas), and those packages declare
under the entry-point group ``derl_bench.methods``. A setting's entry is
``package.module:NAME`` or ``path/to/file.py:NAME``; ``:NAME`` may be left out for a module
whose ``METHOD`` is the method. An entry point, or ``NAME``, names a :class:`Method`, a module
exporting ``METHOD``, or a callable returning a method. A name given twice is an error. The
search runs once; :func:`reload` runs it again.

    >>> method_named("derl-pop").warm_starts, method_named("random").learns
    (True, False)
    >>> method_names()[:3]
    ('derl', 'derl-pop', 'derl-frozen')
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
import types
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from derl_bench.grpo.config import ConfigError
from derl_bench.meta.methods import (
    control_negative,
    control_one_part,
    control_planted,
    derl,
    derl_frozen,
    derl_pop,
    fixed,
    random,
    revolve,
)
from derl_bench.meta.methods.base import (
    CONTROLS_GROUP,
    HAND_MADE_GROUP,
    SEARCHED_GROUP,
    Method,
    method_head,
)

METHOD_PATH_SETTING = "DERL_BENCH_METHOD_PATH"
"""The environment variable naming methods from outside the package, separated by commas
(``a.module:METHOD,path/to/file.py:METHOD``)."""
ENTRY_POINT_GROUP = "derl_bench.methods"
"""The entry-point group through which an installed package adds methods."""
BUILT_IN: tuple[Method, ...] = (derl.METHOD, derl_pop.METHOD, derl_frozen.METHOD, random.METHOD,
                                revolve.METHOD, fixed.METHOD, control_negative.METHOD,
                                control_planted.METHOD, control_one_part.METHOD)
"""The methods this package defines, in the order they are listed."""


class MethodError(ConfigError):
    """A method is unknown, or one from outside the package cannot be loaded."""


def _as_method(target: Any, where: str) -> Method:
    if isinstance(target, types.ModuleType):
        target = getattr(target, "METHOD", None)
    elif callable(target) and not isinstance(target, Method):
        target = target()
    if not isinstance(target, Method):
        raise MethodError(f"{where} names {type(target).__name__}, not a method "
                          f"(derl_bench.meta.methods.base.Method)")
    return target


def _load_file(path: Path) -> types.ModuleType:
    if not path.is_file():
        raise MethodError(f"{METHOD_PATH_SETTING} names {str(path)!r}, which is not a file")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"derl_bench_method_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    spec.loader.exec_module(module)
    return module


def load_entry(entry: str) -> Method:
    """The method one entry of :data:`METHOD_PATH_SETTING` names: ``package.module[:NAME]`` or
    ``path/to/file.py[:NAME]``."""
    source, colon, attr = entry.rpartition(":")
    if not colon or os.sep in attr or attr.endswith(".py"):  # no ``:NAME`` (or a drive's colon)
        source, attr = entry, ""
    try:
        if source.endswith(".py"):
            module = _load_file(Path(source))
        else:
            module = importlib.import_module(source)
    except ImportError as err:
        raise MethodError(f"{METHOD_PATH_SETTING}: cannot import {source!r}: {err}") from None
    target: Any = module
    if attr:
        if not hasattr(module, attr):
            raise MethodError(f"{METHOD_PATH_SETTING}: {source!r} has no {attr!r}")
        target = getattr(module, attr)
    return _as_method(target, f"{METHOD_PATH_SETTING} entry {entry!r}")


def _outside() -> list[tuple[Method, str]]:
    setting = os.environ.get(METHOD_PATH_SETTING, "")
    entries = [entry.strip() for entry in setting.split(",") if entry.strip()]
    found = [(load_entry(entry), f"{METHOD_PATH_SETTING} entry {entry!r}") for entry in entries]
    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {point.name!r} ({point.value})"
        found.append((_as_method(point.load(), where), where))
    return found


@functools.cache
def registry() -> dict[str, Method]:
    """Every method by name, built-in ones first (see the module docstring)."""
    methods = {m.name: m for m in BUILT_IN}
    origins = dict.fromkeys(methods, "derl_bench.meta.methods")
    for method, where in _outside():
        if methods.get(method.name) is method:
            continue  # one method reached twice (a setting and an entry point)
        if method.name in methods:
            raise MethodError(f"method {method.name!r} is defined twice: by "
                              f"{origins[method.name]} and by {where}")
        methods[method.name], origins[method.name] = method, where
    return methods


def reload() -> None:
    """Search for methods again (after :data:`METHOD_PATH_SETTING` changed, say)."""
    registry.cache_clear()


def method_names() -> tuple[str, ...]:
    """Every method's name, in registry order."""
    return tuple(registry())


def methods() -> tuple[Method, ...]:
    """Every method, in registry order."""
    return tuple(registry().values())


def method_named(name: str) -> Method:
    """The method called ``name``; :class:`MethodError` names the known ones otherwise."""
    found = registry().get(name)
    if found is None:
        raise MethodError(f"method must be one of {method_names()}, got {name!r}")
    return found


__all__ = ["BUILT_IN", "CONTROLS_GROUP", "ENTRY_POINT_GROUP", "HAND_MADE_GROUP",
           "METHOD_PATH_SETTING", "SEARCHED_GROUP", "Method", "MethodError", "load_entry",
           "method_head", "method_named", "method_names", "methods", "registry", "reload"]
