"""derl-bench's envs as a verifiers v1 taskset (``vf-eval derl-bench-v1``).

The id is ``derl-bench-v1``, whose module is this package: the id ``derl-bench`` would import
the ``derl_bench`` library itself, which exports no taskset.
"""

from derl_bench_v1.env import DerlBenchEnv, DerlBenchEnvConfig
from derl_bench_v1.harness import DerlBenchHarness, DerlBenchHarnessConfig
from derl_bench_v1.taskset import DerlBenchConfig, DerlBenchData, DerlBenchTask, DerlBenchTaskset

__all__ = ["DerlBenchConfig", "DerlBenchData", "DerlBenchEnv", "DerlBenchEnvConfig",
           "DerlBenchHarness", "DerlBenchHarnessConfig", "DerlBenchTask", "DerlBenchTaskset"]
