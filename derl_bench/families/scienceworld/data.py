"""ScienceWorld's dataset (the card's ``data`` hook): the RLVMR/DERL L0/L1/L2 split index,
``scienceworld/L{n}_idx.json`` in the data root, which ``derl-bench data`` downloads and
verifies. The simulator itself ships in the ``scienceworld`` wheel and needs no download."""

from __future__ import annotations

from derl_bench.data.sources import Dataset, Source

_RLVMR_RAW = (
    "https://raw.githubusercontent.com/Tencent/DigitalHuman/main/RLVMR/"
    "agent_system/environments/env_package/sciworld/variations_idx"
)

DATASETS = (
    Dataset(
        name="scienceworld",
        description=(
            "The RLVMR/DERL L0/L1/L2 split index of ScienceWorld; the simulator itself ships "
            "in the scienceworld wheel and needs no download"
        ),
        licence="MIT",
        sources=tuple(
            Source(f"scienceworld/L{n}_idx.json", f"{_RLVMR_RAW}/L{n}_idx.json", sha256=(digest,))
            for n, digest in enumerate(
                (
                    "151b8942dd58cba74d78115ea7a1cd5eb998cf9c112e51232cb1ef1c87630316",
                    "93b80b653eb67b0802f18c5edfcf11ada2e689eacf886051ad79f382c59b4b3e",
                    "6f96dd084dbc6d0de079d553d27473265e3f6851f279f91f64a5f23c1b277124",
                )
            )
        ),
    ),
)

__all__ = ["DATASETS"]
