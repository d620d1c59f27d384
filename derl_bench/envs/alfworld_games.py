"""Kept for importers of the old path; the module is :mod:`derl_bench.envs.alfworld.games`."""

from derl_bench.envs.alfworld.games import *  # noqa: F403
