"""The math family's datasets (the card's ``data`` hook): GSM8K and MATH, with MATH500, as
``derl-bench data`` downloads and verifies them (:func:`derl_bench.data.sources.datasets`).

MATH's release is a tree: the official URL is a tarball, a mirror serves it file by file as
``MATH_files.txt`` (beside this module) lists them.
"""

from __future__ import annotations

from pathlib import Path

from derl_bench.data.sources import Check, Dataset, Source

_GSM8K_BASE = "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data"

DATASETS: tuple[Dataset, ...] = (
    Dataset(
        name="gsm8k",
        description="GSM8K grade-school math word problems (openai/grade-school-math)",
        licence="MIT",
        sources=(
            Source(
                "gsm8k/train.jsonl",
                f"{_GSM8K_BASE}/train.jsonl",
                sha256=("17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",),
            ),
            Source(
                "gsm8k/test.jsonl",
                f"{_GSM8K_BASE}/test.jsonl",
                sha256=("3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",),
            ),
        ),
        checks=(
            Check("train", "jsonl", "gsm8k/train.jsonl", 7473,
                  "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
            Check("test", "jsonl", "gsm8k/test.jsonl", 1319,
                  "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
        ),
    ),
    Dataset(
        name="math",
        description="MATH (Hendrycks et al. 2021) and its MATH500 test subset (PRM800K split)",
        licence="MIT",
        sources=(
            Source(
                "math/MATH",
                "https://people.eecs.berkeley.edu/~hendrycks/MATH.tar",
                kind="tree",
                file_list=str(Path(__file__).with_name("MATH_files.txt")),
                size_hint="12,500 files",
            ),
            Source(
                "math/math500_test.jsonl",
                "https://raw.githubusercontent.com/openai/prm800k/main/prm800k/math_splits/test.jsonl",
                sha256=("35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",),
            ),
        ),
        checks=(
            Check("train", "tree", "math/MATH/train", 7500,
                  "c3a1fc2ec654590d6db4d3729b3c9f69e0612a471b78ece3bbf18db87120d54f"),
            Check("test", "tree", "math/MATH/test", 5000,
                  "17be1c2d95867717f420a8755c59a0c5b163c33e329eb7e57f24c92903b65ed6"),
            Check("math500", "jsonl", "math/math500_test.jsonl", 500,
                  "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"),
        ),
    ),
)
