"""A fake installed distribution for entry-point tests: a ``dist-info`` folder that
``importlib.metadata`` finds once its parent is on ``sys.path``."""

from __future__ import annotations

from pathlib import Path


def write_dist_info(folder: Path, name: str, group: str, entry: str) -> Path:
    """A ``<name>-0.1.dist-info`` under ``folder`` declaring ``entry`` (``key = target``) in
    entry-point ``group``; returns ``folder`` (put it on ``sys.path``)."""
    info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")
    return folder
