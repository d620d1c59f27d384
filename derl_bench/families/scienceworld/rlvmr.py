"""ScienceWorld's part of the ``rlvmr`` evaluation protocol (:mod:`derl_bench.evaluation.rlvmr`):
RLVMR's validation episodes, drawn as its public code draws them, and the action text its
prompt shows.

RLVMR (and DERL, which reuses its code) validates on ScienceWorld with 128 worker envs; worker
``i`` seeds Python's ``random`` with ``seed + 1000 + i`` and draws its episode with
``random.choice`` from the level's ``test`` list of ``L{n}_idx.json``, with replacement. The
draws below follow that code line by line:

- RLVMR/code/agent_system/environments/env_manager.py, ``make_envs``: the validation envs get
  ``seed=config.env.seed + 1000`` and ``env_num=config.data.val_batch_size`` (128 in
  RLVMR/code/examples/*/run_sciworld.sh, with ``env.seed=0``);
- RLVMR/code/agent_system/environments/env_package/sciworld/envs.py: worker ``i`` gets
  ``seed + i``; ``_worker`` calls ``random.seed(seed)`` and ``random.choice(variations_idx)``
  once on start, and again on every ``reset`` (so the first validation uses each worker's
  second draw); ``taskNames[task_num]`` maps the index to a task, ``taskNames`` being the
  simulator's task names, which it lists sorted.

The prompt (RLVMR/code/agent_system/environments/prompts/sciworld.py) lists the action
templates plus the objects that can replace OBJ, every earlier action and the last 2
observations (:mod:`derl_bench.families.scienceworld.prompts`).

    >>> scienceworld_draws([[0, 1], [0, 2], [3, 4]], seed=0, n=3)
    [(3, 4), (0, 1), (3, 4)]
"""

from __future__ import annotations

import random
from collections.abc import Sequence

VALIDATION_ENVS = 128
VALIDATION_SEED_OFFSET = 1000
HISTORY_OBSERVATIONS = 2
"""ScienceWorld's prompt shows this many recent observations (all earlier actions besides)."""


def scienceworld_draws(
    test_pairs: Sequence[Sequence[int]], seed: int = 0, n: int = VALIDATION_ENVS,
    validation_round: int = 0,
) -> list[tuple[int, int]]:
    """The ``(task_index, variation)`` each of ``n`` validation workers runs.

    ``test_pairs`` is the ``test`` list of ``L{n}_idx.json`` in file order; ``seed`` is
    RLVMR's ``env.seed``; ``validation_round`` counts validations before this one (each resets
    every worker once, drawing again).
    """
    if not test_pairs:
        raise ValueError("no test pairs to draw from")
    out = []
    for i in range(n):
        rng = random.Random(seed + VALIDATION_SEED_OFFSET + i)
        rng.choice(test_pairs)  # the draw _worker makes on start, before any reset
        for _ in range(validation_round):
            rng.choice(test_pairs)
        task, variation = rng.choice(test_pairs)
        out.append((int(task), int(variation)))
    return out


def scienceworld_task_names() -> list[str]:
    """The simulator's 30 task names, sorted, as ``get_task_names()`` lists them."""
    from scienceworld.constants import ID2TASK

    return sorted(ID2TASK.values())


def scienceworld_entries(level: str, seed: int = 0, n: int = VALIDATION_ENVS) -> list[str]:
    """Eval-set entries (``task<TAB>variation``) of the ``rlvmr`` protocol at ``level``."""
    from derl_bench.data.read import read_json
    from derl_bench.data.root import dataset_dir

    index = read_json(dataset_dir("scienceworld") / f"{level}_idx.json")
    names = scienceworld_task_names()
    return [f"{names[task]}\t{variation}"
            for task, variation in scienceworld_draws(index["test"], seed, n)]


def scienceworld_available_actions(possible_actions: Sequence[str],
                                   possible_objects: Sequence[str]) -> str:
    """The ``available_actions`` text RLVMR's ScienceWorld worker puts in every prompt."""
    return (f"Valid_actions: {list(possible_actions)}, OBJ needs to be replaced with one of the "
            f"following objects: {list(possible_objects)}\n"
            " example: <action>focus on door</action>")


__all__ = [
    "HISTORY_OBSERVATIONS",
    "VALIDATION_ENVS",
    "VALIDATION_SEED_OFFSET",
    "scienceworld_available_actions",
    "scienceworld_draws",
    "scienceworld_entries",
    "scienceworld_task_names",
]
