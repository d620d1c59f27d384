"""alfworld's own env (``AlfredTWEnv``'s stack), which tests and benchmarks compare
derl-bench's ALFWorld engine with."""

from __future__ import annotations

import sys
from typing import Any

from derl_bench.families.alfworld.upstream import ensure_alfworld_data


def make_alfred_tw_env(
    game_paths: list[str],
    *,
    expert: bool = False,
    asynchronous: bool = True,
    max_episode_steps: int = 1000,
) -> Any:
    """alfworld's own env for ``game_paths``, built as ``AlfredTWEnv.init_env`` builds it
    (``textworld.gym`` with alfworld's demangler and info wrappers, batch size 1), for
    comparisons. Observations come back as a batch of one.

    ``AlfredTWEnv`` itself only collects games that ship a ``traj_data.json``, and its
    ``AlfredExpert`` wrapper reads that file on every reset even in planner mode; the current
    release format has none. So the game list is passed in directly, and ``expert=True``
    requests the planner's commands the way ``AlfredExpert(PLANNER)`` does
    (``policy_commands``, in ``infos["policy_commands"]``).
    """
    from derl_bench.data.root import dataset_dir

    ensure_alfworld_data(dataset_dir("alfworld"))  # before alfworld is imported
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    request_infos = textworld.EnvInfos(
        won=True, admissible_commands=True, extras=["gamefile"], policy_commands=expert
    )
    argv = sys.argv
    try:
        env_id = textworld.gym.register_games(
            list(game_paths),
            request_infos,
            batch_size=1,
            asynchronous=asynchronous,
            max_episode_steps=max_episode_steps,
            wrappers=[AlfredDemangler(shuffle=False), AlfredInfos],
        )
        return textworld.gym.make(env_id)
    finally:
        sys.argv = argv
