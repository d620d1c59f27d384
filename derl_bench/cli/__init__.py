"""The ``derl-bench`` command line.

Each module in this package that defines ``register(subparsers)`` adds one subcommand group,
so a stage's commands live next to nothing but themselves. A command refuses bad input by
raising; :func:`main` prints an expected error as one line and exits 2
(:mod:`derl_bench.cli._errors`).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shlex
import sys

from derl_bench._version import __version__


def build_parser() -> argparse.ArgumentParser:
    """Build the full parser, one subcommand per module of :mod:`derl_bench.cli`."""
    parser = argparse.ArgumentParser(
        prog="derl-bench",
        description="Gymnasium benchmarks and training for discovering reward functions (DERL).",
    )
    parser.add_argument("--version", action="version", version=f"derl-bench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit status: 2 for an expected error (bad
    input, a file that cannot be read or written, a device that is not there), printed as
    ``error: ...``; 130 after SIGINT and 143 after SIGTERM, once the command has cleaned up.
    Any other exception is a bug and propagates with its traceback."""
    from derl_bench.cli._errors import Terminated, expected_message, sigterm_as_interrupt

    parser = build_parser()
    args = parser.parse_args(argv)
    # A command that holds an output folder names itself in the folder's lock.
    args.command_line = shlex.join(["derl-bench", *(sys.argv[1:] if argv is None else argv)])
    try:
        with sigterm_as_interrupt():
            return int(args.func(args) or 0)
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        message = expected_message(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
