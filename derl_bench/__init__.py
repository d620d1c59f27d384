"""derl-bench: Gymnasium benchmarks and training for discovering reward functions (DERL).

Importing the package registers every env id under the ``derl/`` namespace::

    >>> import gymnasium as gym
    >>> import derl_bench  # noqa: F401
    >>> "derl/GSM8K-v0" in gym.registry
    True

``gymnasium.make("derl_bench:derl/GSM8K-v0")`` imports the package for you.

verifiers trainers load derl-bench's envs as the ``derl-bench-v1`` taskset (verifiers 0.4,
``environments/derl_bench_v1``; docs/serving.md).
"""

from typing import Any

from derl_bench._version import __version__
from derl_bench.registration import register_envs

register_envs()


def load_environment(*args: Any, **kwargs: Any) -> Any:
    """Retired with verifiers 0.3: derl-bench's verifiers environment is the ``derl-bench-v1``
    taskset (a clear error, not an import failure, for code written against the old door)."""
    raise RuntimeError(
        "derl_bench.load_environment served verifiers 0.3's environment API, which verifiers "
        "0.4 removed. derl-bench's envs are the verifiers v1 taskset 'derl-bench-v1' (pip "
        "install -e environments/derl_bench_v1, then e.g. vf-eval derl-bench-v1 "
        "--env.taskset.env-id derl/GSM8K-v0); see docs/serving.md.")


__all__ = ["__version__", "load_environment", "register_envs"]
