"""ALFWorld's text games behind the Gymnasium API, one module per job:

- :mod:`~derl_bench.envs.alfworld.env`: the Gymnasium env, ``ALFWorldEnv``;
- :mod:`~derl_bench.envs.alfworld.games`: game ids, levels, splits and their manifests;
- :mod:`~derl_bench.envs.alfworld.engine`: one game being played (commands, feedback, plan);
- :mod:`~derl_bench.envs.alfworld.game`: a game's data, translated and parsed once per process;
- :mod:`~derl_bench.envs.alfworld.state`: fast-downward's state built from that data;
- :mod:`~derl_bench.envs.alfworld.textgen`: TextWorld's grammar derivation, memoised;
- :mod:`~derl_bench.envs.alfworld.goal`: the PDDL goal and how much of it holds;
- :mod:`~derl_bench.envs.alfworld.upstream`: the lazily imported upstream libraries.
"""

from derl_bench.envs.alfworld.engine import NOTHING_HAPPENS
from derl_bench.envs.alfworld.env import ALFWorldEnv
from derl_bench.envs.alfworld.upstream import EngineError

__all__ = ["ALFWorldEnv", "NOTHING_HAPPENS", "EngineError"]
