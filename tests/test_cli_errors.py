"""The command line's promises about bad input (docs/guarantees.md): an expected error is one
line ``error: ...`` and exit status 2, inputs are regular files checked before they are read,
outputs are checked writable before the work starts, and nothing is left half-written."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from derl_bench.cli import main

REPO = Path(__file__).resolve().parents[1]
EVALUATE = ["evaluate", "--env", "derl/Arithmetic-v0", "--level", "L0", "--policy", "random",
            "--limit", "2", "--no-progress"]


# -- the handler ----------------------------------------------------------------------------------

def _raising(exc: BaseException):
    def command(args):
        raise exc
    return command


def _expected_errors() -> list[tuple[BaseException, str]]:
    import gymnasium.error
    import torch  # noqa: F401  (the handler recognises torch's errors once torch is loaded)

    from derl_bench.grpo.config import ConfigError

    return [
        (OSError(errno.ENOSPC, "No space left on device", "out/rec.json"),
         "error: out/rec.json: No space left on device"),
        (PermissionError(errno.EROFS, "Read-only file system", "/ro/rec.json"),
         "error: /ro/rec.json: Read-only file system"),
        (ConfigError("learning_rate must be > 0"), "error: learning_rate must be > 0"),
        (gymnasium.error.NameNotFound("Environment `Nope` doesn't exist."),
         "error: Environment `Nope` doesn't exist."),
        (AssertionError("Torch not compiled with CUDA enabled"),
         "error: Torch not compiled with CUDA enabled (--device cpu, or device: cpu in a recipe, "
         "runs on the CPU)"),
        (RuntimeError("Found no NVIDIA driver on your system."),
         "error: Found no NVIDIA driver on your system. (--device cpu, or device: cpu in a "
         "recipe, runs on the CPU)"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_an_expected_error_is_one_line_and_exit_2(case, monkeypatch, capsys):
    from derl_bench.cli import leaderboard

    exc, line = _expected_errors()[case]
    monkeypatch.setattr(leaderboard, "run_schema", _raising(exc))
    assert main(["leaderboard", "schema"]) == 2
    out, err = capsys.readouterr()
    assert err == line + "\n" and out == ""


@pytest.mark.parametrize("exc", [ZeroDivisionError("division by zero"), RuntimeError("boom"),
                                 AssertionError("a broken invariant"), KeyError("x")])
def test_a_bug_keeps_its_traceback(exc, monkeypatch):
    from derl_bench.cli import leaderboard

    monkeypatch.setattr(leaderboard, "run_schema", _raising(exc))
    with pytest.raises(type(exc)):
        main(["leaderboard", "schema"])
