"""ScienceWorld's science tasks behind the Gymnasium API, one module per job:

- :mod:`~derl_bench.families.scienceworld.env`: the Gymnasium env, ``ScienceWorldEnv``;
- :mod:`~derl_bench.families.scienceworld.splits`: levels, splits and their manifests;
- :mod:`~derl_bench.families.scienceworld.simulator`: the simulator's JVM and its gateway;
- :mod:`~derl_bench.families.scienceworld.text`: what the simulator's text means.
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
