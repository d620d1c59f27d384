"""derl-bench: Gymnasium benchmarks and training for discovering reward functions (DERL).

Importing the package registers every env id under the ``derl/`` namespace::

    >>> import gymnasium as gym
    >>> import derl_bench  # noqa: F401
    >>> "derl/GSM8K-v0" in gym.registry
    True

``gymnasium.make("derl_bench:derl/GSM8K-v0")`` imports the package for you.

The package is also a verifiers environment module: ``verifiers.load_environment("derl-bench",
env="derl/ALFWorld-v0")`` calls :func:`load_environment` (the ``[verifiers]`` extra).
"""

from typing import Any

from derl_bench._version import __version__
from derl_bench.registration import register_envs
from derl_bench.settings import DEFAULT_ENV_ID

register_envs()


def load_environment(env_id: str = DEFAULT_ENV_ID, **kwargs: Any) -> Any:
    """A derl-bench env as a verifiers environment (see
    :func:`derl_bench.integrations.verifiers_env.load_environment`)."""
    # imported here: verifiers is an optional extra, and the core install stays lean
    from derl_bench.integrations.verifiers_env import load_environment as load

    return load(env_id, **kwargs)


__all__ = ["__version__", "load_environment", "register_envs"]
