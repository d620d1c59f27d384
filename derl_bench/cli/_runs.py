"""What ``train`` and ``meta`` share: ``KEY=VALUE`` overrides anywhere on the line, and the
checks of a run's output folder and models, made before anything is written."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from derl_bench.grpo.rundir import RunDirError, claim_run_dir


class IntermixedParser(argparse.ArgumentParser):
    """Accept ``KEY=VALUE`` overrides before and after options (``--output D steps=5``)."""

    _mixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._mixing:  # parse_known_intermixed_args calls back into this method
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """``--resume`` and ``--overwrite``, and overrides anywhere on the line."""
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in the output folder from its last checkpoint "
                        "(after a crash or kill); changed settings are refused")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace what the output folder holds, once the new run has "
                        "passed its checks (default: refuse a folder that is not empty)")
    parser.__class__ = IntermixedParser


def check_run(run_dir: Path, models: Iterable[str], args: argparse.Namespace) -> bool:
    """Refuse (:class:`RunDirError`) an output folder or a model the run cannot use; returns
    whether an old run is to be removed (``--overwrite``) once everything else is checked."""
    from derl_bench.policies.loading import model_problem

    replace = claim_run_dir(run_dir, resume=args.resume, overwrite=args.overwrite)
    for model in models:
        problem = model_problem(model)
        if problem:
            raise RunDirError(problem)
    return replace
