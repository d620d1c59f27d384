"""Which episodes an evaluation runs: one eval set per env id and level.

An eval set is a manifest from the env's card (its entries and checksum come from the card, so
a record can prove which split produced its number), optionally narrowed to a fixed sample
where the manifest is too large to run in full on a CPU: the ``k`` entries with the smallest
``sha256("<seed>:<entry>")``, kept in manifest order. The sample depends only on the entries
and the seed, never on the Python version or on a random number generator.

Episode ``i`` of the eval set (its position, counting from 0) is reset with seed
``base_seed + i``.

    >>> sample_entries(["a", "b", "c", "d"], k=2, seed=0)
    ['a', 'd']
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from derl_bench.cards import read_manifest, sha256_lines

if TYPE_CHECKING:
    from derl_bench.family import Family

LEVELS = ("L0", "L1", "L2")


class ProtocolError(ValueError):
    """No eval set is defined for this env id and level."""


def sample_entries(entries: Sequence[str], k: int, seed: int) -> list[str]:
    """The fixed-seed sample: ``k`` entries chosen by hash, returned in manifest order."""
    if k >= len(entries):
        return list(entries)
    rank = sorted(range(len(entries)),
                  key=lambda i: hashlib.sha256(f"{seed}:{entries[i]}".encode()).hexdigest())
    return [entries[i] for i in sorted(rank[:k])]


def draw_rule(eval_set: Mapping[str, Any]) -> str:
    """How the episodes of an ``eval_set`` block were drawn, in words (a record's
    ``setup.drawn``).

    >>> draw_rule({"manifest": "L1-eval", "manifest_count": 134, "selection": "all",
    ...            "sample_seed": None, "size": 134})
    'all 134 entries of manifest L1-eval, in manifest order'
    """
    name, size, seed = eval_set["manifest"], eval_set["size"], eval_set["sample_seed"]
    if eval_set["selection"] == "draws":
        return (f"{size} draws with replacement from manifest {name} by RLVMR's validation "
                f"rule, seed {seed}")
    if eval_set["selection"] == "sample":
        return (f"fixed sample of {size} of the {eval_set['manifest_count']} entries of "
                f"manifest {name}: those with the smallest sha256 of seed:entry, seed {seed}, "
                "in manifest order")
    return f"all {size} entries of manifest {name}, in manifest order"


@dataclass(frozen=True)
class ManifestRef:
    """A named, checksummed list of episode ids: its card checksum and a way to read it.

    ``load`` may need the data root (the math splits are lists of problem ids read from the
    data); ``sha256`` and ``count`` never do, so records can be checked without any data.
    """

    name: str
    sha256: str
    count: int
    load: Callable[[], list[str]] = field(repr=False, compare=False)


def card_manifest(family: Family, name: str) -> ManifestRef:
    """A manifest listed under the ``manifests:`` of ``family``'s card (a file in
    ``envs/manifests/``); an adapter passes its own family (:attr:`FamilyAdapter.resolved
    <derl_bench.evaluation.families.FamilyAdapter.resolved>`)."""
    spec = (family.card.get("manifests") or {}).get(name)
    if spec is None:
        raise ProtocolError(f"card {family.name!r} has no manifest {name!r}")
    return ManifestRef(name, str(spec["sha256"]), int(spec["count"]),
                       functools.partial(read_manifest, family.name, name))


@dataclass(frozen=True)
class LevelSpec:
    """How one level of one env is evaluated: the manifest, env kwargs and an optional sample."""

    manifest: ManifestRef
    env_kwargs: dict[str, Any]
    sample_size: int | None = None
    sample_seed: int = 0
    draws_seed: int | None = None
    """Set for an eval set drawn with replacement by a protocol's own rule (``rlvmr``)."""

    @property
    def sampled(self) -> bool:
        return self.sample_size is not None and self.sample_size < self.manifest.count

    @property
    def size(self) -> int:
        if self.sample_size is not None and self.sample_size < self.manifest.count:
            return self.sample_size
        return self.manifest.count

    def describe(self, entries: Sequence[str] | None = None) -> dict[str, Any]:
        """The ``eval_set`` block of a result record.

        Without ``entries`` a sampled set reads its manifest to checksum the sample.
        """
        if self.draws_seed is not None:
            if entries is None:
                raise ProtocolError("an eval set of draws is described from its entries")
            return {
                "manifest": self.manifest.name,
                "manifest_sha256": self.manifest.sha256,
                "manifest_count": self.manifest.count,
                "selection": "draws",
                "sample_seed": self.draws_seed,
                "size": len(entries),
                "episodes_sha256": sha256_lines(list(entries)),
            }
        if self.sampled:
            chosen = list(entries) if entries is not None else self.select(self.manifest.load())
            episodes_sha = sha256_lines(chosen)
        else:
            episodes_sha = self.manifest.sha256
        return {
            "manifest": self.manifest.name,
            "manifest_sha256": self.manifest.sha256,
            "manifest_count": self.manifest.count,
            "selection": "sample" if self.sampled else "all",
            "sample_seed": self.sample_seed if self.sampled else None,
            "size": self.size,
            "episodes_sha256": episodes_sha,
        }

    def describe_full(self) -> dict[str, Any]:
        """The ``eval_set`` block of the whole manifest, unsampled (for reported numbers)."""
        return {
            "manifest": self.manifest.name,
            "manifest_sha256": self.manifest.sha256,
            "manifest_count": self.manifest.count,
            "selection": "all",
            "sample_seed": None,
            "size": self.manifest.count,
            "episodes_sha256": self.manifest.sha256,
        }

    def select(self, entries: Sequence[str]) -> list[str]:
        """The eval set's episodes out of the manifest's entries."""
        if len(entries) != self.manifest.count:
            raise ProtocolError(f"manifest {self.manifest.name}: {len(entries)} entries, "
                                f"card says {self.manifest.count}")
        if self.sampled:
            assert self.sample_size is not None
            return sample_entries(entries, self.sample_size, self.sample_seed)
        return list(entries)


@dataclass(frozen=True)
class EvalSet:
    """The episodes of one evaluation, in the order they are run and seeded."""

    env_id: str
    level: str
    spec: LevelSpec
    entries: tuple[str, ...] = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.entries)

    def describe(self) -> dict[str, Any]:
        """The ``eval_set`` block of a result record."""
        return self.spec.describe(self.entries)
