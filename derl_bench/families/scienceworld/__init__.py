"""ScienceWorld's science tasks behind the Gymnasium API, one module per job:

- :mod:`~derl_bench.families.scienceworld.env`: the Gymnasium env, ``ScienceWorldEnv``;
- :mod:`~derl_bench.families.scienceworld.splits`: levels, splits and their manifests;
- :mod:`~derl_bench.families.scienceworld.simulator`: the simulator's JVM and its gateway;
- :mod:`~derl_bench.families.scienceworld.text`: what the simulator's text means;
- :mod:`~derl_bench.families.scienceworld.observers`: the primitives ``gymnasium.make`` attaches;
- :mod:`~derl_bench.families.scienceworld.prompts`: the agent prompt and RLVMR's prompt;
- :mod:`~derl_bench.families.scienceworld.adapter`: the evaluation rules;
- :mod:`~derl_bench.families.scienceworld.rlvmr`: RLVMR's validation draws and action text;
- :mod:`~derl_bench.families.scienceworld.data`: the dataset ``derl-bench data`` fetches.

The card, ``envs/scienceworld.md``, names the env, its observers and its hooks here by dotted
path; this package exports the env's names.
"""

from derl_bench.families.scienceworld.env import (
    FIRST_ACTION,
    MAX_OBSERVATION_CHARS,
    OBJECT_ORDERS,
    PROTOCOLS,
    RESET_OBSERVATIONS,
    RLVMR_TICK_LIMIT,
    ScienceWorldEnv,
)
from derl_bench.families.scienceworld.simulator import (
    DEFAULT_JVM_MEMORY,
    UNKNOWN_ACTION,
    SimulatorCrashedError,
    SimulatorError,
    SimulatorProcess,
    SimulatorStartError,
)
from derl_bench.families.scienceworld.text import (
    NO_MATCH,
    clean_action,
    location_in,
    parse_goal_progress,
)

__all__ = [
    "DEFAULT_JVM_MEMORY",
    "FIRST_ACTION",
    "MAX_OBSERVATION_CHARS",
    "NO_MATCH",
    "OBJECT_ORDERS",
    "PROTOCOLS",
    "RESET_OBSERVATIONS",
    "RLVMR_TICK_LIMIT",
    "UNKNOWN_ACTION",
    "ScienceWorldEnv",
    "SimulatorCrashedError",
    "SimulatorError",
    "SimulatorProcess",
    "SimulatorStartError",
    "clean_action",
    "location_in",
    "parse_goal_progress",
]
