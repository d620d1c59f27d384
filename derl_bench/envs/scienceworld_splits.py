"""Kept for importers of the old path; the module is :mod:`derl_bench.envs.scienceworld.splits`."""

from derl_bench.envs.scienceworld.splits import *  # noqa: F403
