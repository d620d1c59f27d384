"""What the commands that run share: the recipe, with ``KEY=VALUE`` overrides after it (before
or after the options), the hold on an output folder (one command per folder at a time) and the
checks of a run's folder and models, made before anything is written, and the argument types
and actions that refuse a bad count, override or list with exit 2 as argparse refuses any bad
argument."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from derl_bench.cli._errors import RECIPE_MAX_BYTES, CommandError, require_input
from derl_bench.files import output_folder_problem
from derl_bench.grpo.rundir import (
    FolderLock,
    RunDirError,
    claim_run_dir,
    output_problem,
    run_kind,
)


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


def at_least_one(text: str) -> int:
    """``type=`` of a count such as ``--workers``: an integer of at least 1.

    >>> at_least_one("3")
    3
    >>> at_least_one("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be at least 1, got 0
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def key_value(text: str) -> str:
    """``type=`` of a ``KEY=VALUE`` override (value parsed as YAML).

    >>> key_value("steps=5")
    'steps=5'
    >>> key_value("nokey")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: override 'nokey' is not KEY=VALUE
    """
    from derl_bench.grpo.config import ConfigError, parse_overrides

    try:
        parse_overrides([text])
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


class Distinct(argparse.Action):
    """``action=`` of a list option (``nargs="+"``) whose items each make their own runs
    (``--seeds``, ``--methods``): an item given twice is refused, as argparse refuses any bad
    argument (exit 2, before any work). Given twice, an item's runs share their folders and
    clash there, or count twice in the statistics.

    >>> parser = argparse.ArgumentParser(exit_on_error=False)
    >>> _ = parser.add_argument("--seeds", type=int, nargs="+", action=Distinct)
    >>> parser.parse_args(["--seeds", "0", "1"]).seeds
    [0, 1]
    >>> parser.parse_args(["--seeds", "0", "1", "0"])
    Traceback (most recent call last):
    ...
    argparse.ArgumentError: argument --seeds: 0 is given twice; give each once
    """

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        seen: list[Any] = []
        for value in values:
            if value in seen:
                raise argparse.ArgumentError(self, f"{value!r} is given twice; give each once")
            seen.append(value)
        setattr(namespace, self.dest, values)


def require_recipe(args: argparse.Namespace) -> Path:
    """The recipe of ``train`` or ``meta`` if it is a regular file that can be read (and not
    over :data:`~derl_bench.cli._errors.RECIPE_MAX_BYTES`), else :class:`CommandError`.

    The recipe is the first word that is not an option, so an override put before it
    (``derl-bench train steps=1 r.yaml``) arrives here as the recipe; one that is not a file
    is refused saying that the recipe comes first."""
    recipe = args.recipe
    if not Path(recipe).exists():
        try:
            key_value(recipe)
        except argparse.ArgumentTypeError:
            pass  # not shaped like an override: the plain "does not exist" below says it
        else:
            raise CommandError(f"recipe: {recipe} does not exist; it looks like a KEY=VALUE "
                               f"override, and the recipe comes first: derl-bench "
                               f"{args.command} RECIPE [KEY=VALUE ...]")
    return require_input("recipe", recipe, RECIPE_MAX_BYTES)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """``--resume`` and ``--overwrite``, and overrides before or after the options."""
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in the output folder from its last checkpoint "
                        "(after a crash or kill); changed settings are refused")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the derl-bench run the output folder holds, once the new "
                        "run has passed its checks (default: refuse a folder that is not "
                        "empty; a folder of other files is refused either way)")
    parser.__class__ = IntermixedParser


@contextlib.contextmanager
def hold_output(folder: str | Path, args: argparse.Namespace, *,
                whole: bool = False) -> Iterator[None]:
    """Hold ``folder`` for this command while the ``with`` block runs; a folder another command
    holds is refused (:class:`RunDirError`, naming it). It is held by its lock beside it,
    ``.<name>.lock``, and but for ``whole`` by its own ``<folder>/.lock``. ``whole``: the output
    appears whole at the end (a model folder renamed into place), so nothing is put in it."""
    folder = Path(folder)
    problem = output_problem(folder)
    if problem:
        raise RunDirError(problem)
    full = Path(os.path.abspath(folder))
    command = getattr(args, "command_line", None)
    with contextlib.ExitStack() as held:
        # Every command takes the lock beside the folder, so that one whose output appears
        # whole (and cannot lock inside a folder it has yet to make) and one that writes in
        # place see each other. Where nothing can be written beside the folder, no whole
        # output can appear there either, and the lock inside it is enough.
        if whole or output_folder_problem(full.parent) is None:
            held.enter_context(FolderLock(folder, full.parent / f".{full.name}.lock",
                                          command=command))
        if not whole:
            held.enter_context(FolderLock(folder, command=command))
        yield


def folder_owner(folder: str | Path, benchmark: str | None = None) -> str | None:
    """What another derl-bench command keeps in ``folder``, with the files that tell, or None:
    a ``train`` or ``meta`` run (:func:`~derl_bench.grpo.rundir.run_kind`), a model, the
    leaderboards' list of records run here, or a board's result records (but those of
    ``benchmark``'s board, which the caller writes). The one place a command asks whose a
    folder is before it writes there."""
    from derl_bench.evaluation.record import RUN_HERE_FILE
    from derl_bench.grpo.rundir import RUN_ID_FILE, RUN_MARKER, run_kind
    from derl_bench.leaderboard.validate import board_titles, records_benchmark

    folder = Path(folder)
    if not folder.is_dir():
        return None
    kind = run_kind(folder)
    if kind is not None:
        return f"a {kind} run ({RUN_MARKER}, {RUN_ID_FILE})"
    if (folder / "config.json").is_file():
        return "a model (config.json)"
    if (folder / RUN_HERE_FILE).is_file():
        return f"the leaderboards' list of records run here ({RUN_HERE_FILE})"
    theirs = records_benchmark(folder)
    if theirs is not None and theirs != benchmark:
        return f"the {board_titles().get(theirs, theirs)} board's result records (*.json)"
    return None


_KIND_NAMES = {"train": "train", "meta": "reward-discovery (meta)"}


def _refuse_other_kind(run_dir: Path, command: str) -> None:
    """Refuse ``--resume`` of a run that ``command`` did not start: compared with this
    command's settings, every field of the other run's would be reported as changed."""
    theirs = run_kind(run_dir)
    if theirs in _KIND_NAMES and theirs != command:
        raise RunDirError(f"--resume: {run_dir} holds {folder_owner(run_dir)}, not a "
                          f"{_KIND_NAMES[command]} run; resume it with derl-bench {theirs}, "
                          f"or give --output the folder of the {command} run to resume")


@contextlib.contextmanager
def hold_run(run_dir: Path, models: Iterable[str], args: argparse.Namespace) -> Iterator[bool]:
    """Hold a run's folder (:func:`hold_output`) and refuse (:class:`RunDirError`) a folder or a
    model the run cannot use; yields whether an old run is to be removed (``--overwrite``) once
    everything else is checked (:func:`~derl_bench.grpo.rundir.clear_run_dir`)."""
    from derl_bench.policies.loading import model_problem

    with hold_output(run_dir, args):
        replace = claim_run_dir(run_dir, resume=args.resume, overwrite=args.overwrite)
        if args.resume:
            _refuse_other_kind(run_dir, args.command)
        for model in models:
            problem = model_problem(model)
            if problem:
                raise RunDirError(problem)
        yield replace
