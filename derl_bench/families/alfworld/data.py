"""ALFWorld's dataset (the card's ``data`` hook): the TextWorld-PDDL games of alfworld's 0.4.2
release and the two logic files the engine reads, and the game counts ``derl-bench data verify``
checks per split."""

from __future__ import annotations

from derl_bench.data.sources import Check, Dataset, Source

_ALFWORLD_RAW = "https://raw.githubusercontent.com/alfworld/alfworld/0.4.2/alfworld/data"

DATASETS = (
    Dataset(
        name="alfworld",
        description="ALFWorld TextWorld-PDDL games (release json_2.1.3_tw-pddl) and logic files",
        licence="MIT",
        sources=(
            Source(
                "alfworld/alfworld_tw-pddl.zip",
                "https://github.com/alfworld/alfworld/releases/download/0.4.2/json_2.1.3_tw-pddl.zip",
                kind="zip",
                extract_to="alfworld",
                sha256=(
                    # the official 0.4.2 release asset
                    "5df77ea759f2211a4106082839ddbbb790f1ba4e7d097ed732cf453f72aa36cf",
                    # the release-style zip of the same games that offline mirrors serve
                    "0088e73b12cd39ec9897ef01cb5590f1471b3137753388acf3e8b69b6b68ef96",
                ),
                size_hint="37 MB",
            ),
            Source(
                "alfworld/logic/alfred.pddl",
                f"{_ALFWORLD_RAW}/alfred.pddl",
                sha256=("f1473041ed01da514de1f87adfd7ef0804862361f83ccf63c75e43633b0eb280",),
            ),
            Source(
                "alfworld/logic/alfred.twl2",
                f"{_ALFWORLD_RAW}/alfred.twl2",
                sha256=("c5b22f0f73309a7fd7c8e5b71de42ad4803b60766ab4a51cc2feb34162be036b",),
            ),
        ),
        checks=(
            Check("train", "glob", "alfworld/json_2.1.1/train", 3553, pattern="*/*/game.tw-pddl"),
            Check("valid_seen", "glob", "alfworld/json_2.1.1/valid_seen", 140,
                  pattern="*/*/game.tw-pddl"),
            Check("valid_unseen", "glob", "alfworld/json_2.1.1/valid_unseen", 134,
                  pattern="*/*/game.tw-pddl"),
            Check("valid_train", "glob", "alfworld/json_2.1.1/valid_train", 200,
                  pattern="*/*/game.tw-pddl"),
        ),
    ),
)
