"""The DERL paper's Meta-Optimizer cold-start corpus: 206 hand-written formulas over g1..g4.

The official code (sitaocheng/DERL, ``dataset/cold_start_training_data.json``) fine-tunes its
Meta-Optimizer on these before the first outer step. Each item is an instruction and one
formula in ``<formula>...</formula>`` over ``g1`` (outcome), ``g2`` (format), ``g3`` and
``g4`` with ``+ - * /``, parentheses and floats. This module reads the file from the data root
(``derl-bench data download derl``) and returns the formulas as written; which of them a
Meta-Reward domain accepts is the reward layer's business (``g1..g4`` are aliases every
family's card defines)::

    formulas = cold_start_formulas()
    len(formulas), formulas[0]        # (206, '0.4 * g1 + 0.3 * g2 + 0.2 * g3 + 0.1 * g4')
"""

from __future__ import annotations

import re
from pathlib import Path

from derl_bench.data.read import read_json
from derl_bench.data.root import dataset_dir

CORPUS_FILE = Path("dataset") / "cold_start_training_data.json"
"""Where the corpus lies inside the ``derl`` dataset, as upstream lays it out."""

_FORMULA = re.compile(r"<formula>(.*?)</formula>", re.DOTALL)


def parse_formula(output: str) -> str:
    """The formula of one corpus item's ``output``: the text inside its ``<formula>`` tags.

    >>> parse_formula("<formula>g1 + 0.5 * g2</formula>")
    'g1 + 0.5 * g2'
    >>> parse_formula("no tags")
    Traceback (most recent call last):
    ...
    ValueError: no <formula>...</formula> in 'no tags'
    """
    found = _FORMULA.search(output)
    if found is None:
        raise ValueError(f"no <formula>...</formula> in {output[:80]!r}")
    return found.group(1).strip()


def cold_start_formulas(root: Path | None = None) -> list[str]:
    """The corpus's formulas in file order (duplicates kept, as the official cold start sees
    them). Fails with the download command when the dataset is missing from the data root."""
    return [parse_formula(str(item.get("output", ""))) for item in _items(root)[1]]


def _items(root: Path | None) -> tuple[Path, list[dict]]:
    path = dataset_dir("derl", root) / CORPUS_FILE
    items = read_json(path)
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a JSON list of items")
    return path, items


def cold_start_instruction(root: Path | None = None) -> str:
    """The instruction every corpus item shares: the official code's Meta-Optimizer prompt
    (``constrained_rollout.py``), which names ``g1``..``g4`` and allows ``+ - * /``,
    parentheses and floats. An error when the items disagree."""
    path, items = _items(root)
    instructions = {str(item.get("instruction", "")) for item in items}
    if len(instructions) != 1:
        raise ValueError(f"{path}: expected one instruction shared by every item, found "
                         f"{len(instructions)}")
    return instructions.pop()
