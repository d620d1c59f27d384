"""Where benchmark data lives.

One place decides: the ``DERL_BENCH_DATA`` environment variable, else
``$XDG_CACHE_HOME/derl-bench/data`` (``~/.cache/derl-bench/data`` by default).

    >>> import os
    >>> os.environ["DERL_BENCH_DATA"] = "/tmp/derl-data"
    >>> str(data_root())
    '/tmp/derl-data'
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "DERL_BENCH_DATA"
#: The file whose presence makes a dataset usable; a download writes it last.
COMPLETE_MARKER = ".complete"


class DataNotFoundError(FileNotFoundError):
    """A dataset is missing from the data root; the message says how to fetch it."""


def data_root() -> Path:
    """Return the data root: ``$DERL_BENCH_DATA``, else the user cache default."""
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "derl-bench" / "data"


def dataset_dir(name: str, root: Path | None = None) -> Path:
    """Return ``<root>/<name>`` and fail with a fetch hint when it was never downloaded."""
    path = (root or data_root()) / name
    if not is_complete(name, root):
        raise DataNotFoundError(
            f"dataset {name!r} is not in the data root {path.parent}; "
            f"run `derl-bench data download {name}` (set {ENV_VAR} to use another root)"
        )
    return path


def is_complete(name: str, root: Path | None = None) -> bool:
    """Whether dataset ``name`` finished downloading into ``root`` (what the envs require)."""
    return ((root or data_root()) / name / COMPLETE_MARKER).is_file()
