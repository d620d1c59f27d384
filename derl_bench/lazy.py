"""Names a package exports from its modules, imported on first use (PEP 562), so that
importing the package does not load every module behind it::

    >>> getattr_, dir_ = lazy_exports("derl_bench.grpo", {"group_advantages": "advantage"},
    ...                               ["group_advantages"])
    >>> getattr_("group_advantages").__name__, "group_advantages" in dir_()
    ('group_advantages', True)

A package assigns the two functions to its own ``__getattr__`` and ``__dir__``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, module_of: Mapping[str, str], exported: Sequence[str],
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``module_of`` is imported from
    ``package.<module>`` when first asked for and kept on the package, so later lookups skip
    ``__getattr__``; ``__dir__`` lists the package's names and ``exported``."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exported})

    return __getattr__, __dir__
