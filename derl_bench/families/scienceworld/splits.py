"""ScienceWorld's generalisation levels (the RLVMR/DERL protocol) and their split manifests.

A level names a training set and an evaluation set of ``(task_name, variation)`` pairs:

- ``L0``: train on the train variations of 29 tasks (every task but ``use-thermometer``),
  evaluate on their dev variations (seen task types, held-out variations);
- ``L1``: the same training set, evaluated on the test variations of those 29 tasks;
- ``L2``: train on the train variations of 19 tasks, evaluate on the test variations of the
  10 held-out task types in :data:`L2_HELD_OUT_TASKS`.

Each level's ``validation`` split is a slice of its training variations held out from
``train`` for model selection (reward discovery scores inner policies on it): of every task's
train variations in sorted order, every :data:`VALIDATION_EVERY`-th (positions 9, 19, ...).
``train`` and ``validation`` together are exactly the protocol's training set.

The sets are computed from the simulator (:func:`compute_splits`, one task load each), written
once as the manifests ``envs/manifests/scienceworld/<level>-<split>.txt`` (one
``task_name<TAB>variation`` per line, tasks in sorted order) and read back checksum-verified
with :func:`split_pairs`.

    >>> split_pairs("L2", "eval")[0]
    ('change-the-state-of-matter-of', 21)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

LEVELS = ("L0", "L1", "L2")
SPLITS = ("train", "validation", "eval")
VALIDATION_EVERY = 10
"""One train variation in this many (per task) is held out as validation."""
EXCLUDED_TASKS = ("use-thermometer",)
L2_HELD_OUT_TASKS = (
    "change-the-state-of-matter-of",
    "chemistry-mix-paint-tertiary-color",
    "find-plant",
    "grow-plant",
    "identify-life-stages-2",
    "inclined-plane-friction-unnamed-surfaces",
    "lifespan-longest-lived-then-shortest-lived",
    "measure-melting-point-unknown-substance",
    "mendelian-genetics-unknown-plant",
    "test-conductivity-of-unknown-substances",
)
MANIFEST_FAMILY = "scienceworld"

Pair = tuple[str, int]


class _Simulator(Protocol):
    def task_names(self) -> list[str]: ...
    def load(self, task: str, variation: int, simplifications: str, gold: bool = False) -> None: ...
    def variations(self, split: str) -> list[int]: ...


def manifest_name(level: str, split: str) -> str:
    """``"L0", "eval"`` -> ``"L0-eval"``, after checking both."""
    if level not in LEVELS:
        raise ValueError(f"unknown ScienceWorld level {level!r}; choose one of {LEVELS}")
    if split not in SPLITS:
        raise ValueError(f"unknown ScienceWorld split {split!r}; choose one of {SPLITS}")
    return f"{level}-{split}"


def simulator_variations(sim: _Simulator) -> dict[str, dict[str, list[int]]]:
    """``{task: {"train"|"dev"|"test": [variation, ...]}}`` for every task, sorted by name."""
    out: dict[str, dict[str, list[int]]] = {}
    for task in sorted(sim.task_names()):
        sim.load(task, 0, "")
        out[task] = {part: sorted(sim.variations(part)) for part in ("train", "dev", "test")}
    return out


def level_pairs(variations: dict[str, dict[str, list[int]]]) -> dict[str, list[Pair]]:
    """Build every manifest (``"L0-train"`` ... ``"L2-eval"``) from the simulator's variations."""
    tasks = sorted(variations)
    seen_types = [t for t in tasks if t not in EXCLUDED_TASKS]
    l2_train_types = [t for t in seen_types if t not in L2_HELD_OUT_TASKS]
    l2_eval_types = [t for t in tasks if t in L2_HELD_OUT_TASKS]

    def pairs(task_list: Iterable[str], part: str) -> list[Pair]:
        return [(t, v) for t in task_list for v in variations[t][part]]

    def held_out(task_list: Iterable[str], validation: bool) -> list[Pair]:
        return [(t, v) for t in task_list for i, v in enumerate(variations[t]["train"])
                if (i % VALIDATION_EVERY == VALIDATION_EVERY - 1) == validation]

    return {
        "L0-train": held_out(seen_types, False),
        "L0-validation": held_out(seen_types, True),
        "L0-eval": pairs(seen_types, "dev"),
        "L1-train": held_out(seen_types, False),
        "L1-validation": held_out(seen_types, True),
        "L1-eval": pairs(seen_types, "test"),
        "L2-train": held_out(l2_train_types, False),
        "L2-validation": held_out(l2_train_types, True),
        "L2-eval": pairs(l2_eval_types, "test"),
    }


def compute_splits(sim: _Simulator) -> dict[str, list[Pair]]:
    """All nine manifests, straight from a running simulator."""
    return level_pairs(simulator_variations(sim))


def format_pairs(pairs: Iterable[Pair]) -> list[str]:
    """Manifest lines: ``task_name<TAB>variation``."""
    return [f"{task}\t{variation}" for task, variation in pairs]


def parse_pairs(lines: Iterable[str]) -> list[Pair]:
    """Inverse of :func:`format_pairs`."""
    out: list[Pair] = []
    for line in lines:
        task, _, variation = line.partition("\t")
        out.append((task, int(variation)))
    return out


def split_pairs(level: str, split: str) -> list[Pair]:
    """The checksum-verified ``(task_name, variation)`` pairs of a level's split."""
    from derl_bench.cards import read_manifest

    return parse_pairs(read_manifest(MANIFEST_FAMILY, manifest_name(level, split)))


def to_index_pairs(pairs: Iterable[Pair], task_names: list[str]) -> list[list[int]]:
    """``[[task_idx, variation], ...]`` with ``task_idx`` into sorted task names (RLVMR's form)."""
    index = {name: i for i, name in enumerate(sorted(task_names))}
    return [[index[task], variation] for task, variation in pairs]


def write_manifests(out_dir: str) -> dict[str, dict[str, object]]:
    """Compute the splits with a fresh simulator, write ``<out_dir>/<level>-<split>.txt`` and
    return the card's ``manifests:`` entries (file, count, sha256)."""
    from pathlib import Path

    from derl_bench.cards import sha256_lines
    from derl_bench.families.scienceworld.simulator import SimulatorProcess

    sim = SimulatorProcess()
    try:
        splits = compute_splits(sim)
    finally:
        sim.close()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    entries: dict[str, dict[str, object]] = {}
    for name, pairs in splits.items():
        lines = format_pairs(pairs)
        (out / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        entries[name] = {
            "file": f"manifests/{MANIFEST_FAMILY}/{name}.txt",
            "count": len(lines),
            "sha256": sha256_lines(lines),
        }
    return entries


if __name__ == "__main__":  # regenerate: python -m derl_bench.families.scienceworld.splits <dir>
    import sys

    import yaml

    target = sys.argv[1] if len(sys.argv) > 1 else "envs/manifests/scienceworld"
    print(yaml.safe_dump({"manifests": write_manifests(target)}, sort_keys=False))
