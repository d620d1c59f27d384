"""TextWorld's PDDL engine and alfworld, imported lazily (both are slow imports), and the
engine's error type."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any


class EngineError(RuntimeError):
    """The PDDL engine failed; the episode cannot continue until the next reset."""


def import_engine() -> Any:
    """Import TextWorld's PDDL engine and alfworld's name demangler (slow imports, done once)."""
    import fast_downward  # noqa: F401
    from textworld.envs.pddl import logic as pddl_logic

    return pddl_logic


def ensure_alfworld_data(alfworld_dir: Path) -> None:
    """Point ``ALFWORLD_DATA`` at the data root before alfworld is imported.

    Importing alfworld creates ``$ALFWORLD_DATA`` (default ``~/.cache/alfworld``); setting it to
    the data root's ``alfworld/`` folder, which exists, keeps the user's home untouched.
    """
    os.environ.setdefault("ALFWORLD_DATA", str(alfworld_dir))


@functools.cache
def demangler_class() -> Any:
    from alfworld.agents.utils.misc import Demangler

    return Demangler
