"""The math family's evaluation rules (the card's ``evaluation`` hook): each id is one of the
card's ``datasets:``, evaluated on its ``eval_split``."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from derl_bench.envs.items import eval_splits, split_items
from derl_bench.evaluation.families import LevelsAdapter
from derl_bench.evaluation.protocol import EvalSet, LevelSpec, ManifestRef, ProtocolError
from derl_bench.family import Family


class MathAdapter(LevelsAdapter):
    """A family of downloaded datasets (GSM8K and MATH): each id is one of the card's
    ``datasets:``, whose ``eval_split`` is the one level; a split's ``data`` names the file or
    folder its record checksums."""

    def __init__(self, env_id: str, family: Family) -> None:
        super().__init__(env_id, family)
        datasets = self.card["datasets"]
        matches = [name for name, spec in datasets.items() if spec.get("env_id") == env_id]
        if not matches:
            raise ProtocolError(f"the {self.spec.name} card defines no dataset for {env_id}")
        self.dataset = matches[0]
        self._spec = datasets[self.dataset]

    def levels(self) -> dict[str, LevelSpec]:
        out = {}
        for level, kwargs in eval_splits(self.resolved, self.env_id).items():
            split = kwargs["split"]
            split_spec = self._spec["splits"][split]
            manifest = ManifestRef(split, str(split_spec["manifest_sha256"]),
                                   int(split_spec["count"]),
                                   functools.partial(split_items, self.resolved, self.env_id,
                                                     split))
            out[level] = LevelSpec(manifest, dict(kwargs))
        return out

    def task_type(self, entry: str, info: Mapping[str, Any]) -> str:
        # ids of a subject-divided dataset name their subject (test/precalculus/807.json)
        parts = entry.split("/")
        return parts[1] if len(parts) == 3 else self.dataset

    def task_types(self, level: str) -> frozenset[str]:
        # The ids come from the downloaded data, which checking a record must not need: a
        # subject-divided dataset's subjects are the folders of its release's file list in
        # the data catalogue; any other dataset is one task type, its name.
        from derl_bench.data.sources import dataset, tree_files

        self.level(level)
        trees = [s for s in dataset(self.dataset).sources if s.kind == "tree" and s.file_list]
        if not trees:
            return frozenset({self.dataset})
        return frozenset(path.split("/")[1] for tree in trees for path in tree_files(tree))

    def data_checksums(self, eval_set: EvalSet) -> dict[str, str]:
        from derl_bench.data.download import sha256_file, tree_sha256
        from derl_bench.data.root import dataset_dir

        split = self._spec["splits"][eval_set.spec.env_kwargs["split"]]
        if "data" not in split:
            raise ProtocolError(f"the {self.dataset} split {eval_set.spec.env_kwargs['split']!r} "
                                f"names no data to checksum")
        path = dataset_dir(self.dataset) / str(split["data"])
        digest = tree_sha256(path) if path.is_dir() else sha256_file(path)
        return {f"{self.dataset}/{split['data']}": digest}
