"""Kept for importers of the old path; the module is
:mod:`derl_bench.envs.scienceworld.simulator`."""

from derl_bench.envs.scienceworld.simulator import *  # noqa: F403
