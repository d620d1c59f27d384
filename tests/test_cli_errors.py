"""The command line's promises about bad input (docs/guarantees.md): an expected error is one
line ``error: ...`` and exit status 2, inputs are regular files checked before they are read,
outputs are checked writable before the work starts, and nothing is left half-written."""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from derl_bench.cli import main

REPO = Path(__file__).resolve().parents[1]
EVALUATE = ["evaluate", "--env", "derl/Arithmetic-v0", "--level", "L0", "--policy", "random",
            "--limit", "2", "--no-progress"]


def _error_line(err: str) -> str:
    """The one ``error:`` line a refusal prints, and nothing else on stderr."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _can_create_in(folder: Path) -> bool:
    try:
        (folder / ".probe").touch()
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


@pytest.fixture
def unwritable(tmp_path):
    """A folder in which no file can be created. Permission bits do not stop root, so as root
    this is /sys, which refuses new files to everyone."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        try:
            if _can_create_in(folder):
                pytest.skip("this file system ignores permission bits")
            yield folder
        finally:
            folder.chmod(0o755)
        return
    if Path("/sys").is_dir() and not _can_create_in(Path("/sys")):
        yield Path("/sys")
        return
    pytest.skip("running as root, and /sys accepts new files: no folder here refuses a write")


# -- inputs that would block or never end ---------------------------------------------------------

def _limit_memory() -> None:
    # A reader of /dev/zero that is not stopped would grow until the machine runs out.
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))


def _command(tmp_path: Path, source: str, case: str) -> tuple[list[str], Path]:
    if source == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    out = tmp_path / "rec.json"
    if case == "evaluate --recipe":
        return [*EVALUATE, "--recipe", str(path), "--output", str(out)], path
    return ["reward", "eval", "g1", "--domain", "agent", "--trajectories", str(path)], path


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
@pytest.mark.parametrize("source", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("case", ["evaluate --recipe", "reward eval --trajectories"])
def test_a_fifo_or_device_input_is_refused_without_being_read(tmp_path, source, case):
    args, path = _command(tmp_path, source, case)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    try:
        done = subprocess.run([sys.executable, "-m", "derl_bench", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=90,
                              preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case} read {source} instead of refusing it")
    option = case.split()[-1]
    kind = "a FIFO" if source == "fifo" else "a character device"
    assert done.returncode == 2, done.stderr
    assert _error_line(done.stderr) == f"error: {option}: {path} is not a regular file ({kind})"
    assert done.stdout == ""
    assert not (tmp_path / "rec.json").exists()


def test_a_trajectory_file_over_the_bound_is_refused_before_it_is_read(tmp_path, capsys,
                                                                       monkeypatch):
    from derl_bench.cli import reward

    monkeypatch.setattr(reward, "TRAJECTORIES_MAX_BYTES", 16)
    log = tmp_path / "t.jsonl"
    log.write_text('[{"success": 1, "env_reward": 0.5}]\n')
    assert main(["reward", "eval", "g1", "--domain", "agent", "--trajectories", str(log)]) == 2
    out, err = capsys.readouterr()
    assert _error_line(err) == (f"error: --trajectories: {log} is 36 bytes, more than the "
                                "16 bytes it may be")
    assert out == ""


# -- outputs ------------------------------------------------------------------------------------

def test_one_file_for_output_and_trajectories_is_refused(tmp_path, capsys):
    out = tmp_path / "rec.json"
    assert main([*EVALUATE, "--output", str(out), "--trajectories",
                 str(tmp_path / "." / "rec.json")]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --output and --trajectories name the same file ({tmp_path / '.' / 'rec.json'})"
        "; give each its own")
    assert list(tmp_path.iterdir()) == []
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("steps: 1\n")
    assert main([*EVALUATE, "--recipe", str(recipe), "--output", str(recipe)]) == 2
    assert "--recipe and --output name the same file" in _error_line(capsys.readouterr().err)
    assert recipe.read_text() == "steps: 1\n"


def test_an_unwritable_output_is_refused_before_any_episode(unwritable, tmp_path, capsys,
                                                            monkeypatch):
    import derl_bench.evaluation

    def no_episode(*args, **kwargs):
        raise AssertionError("the evaluation ran before its output was checked")

    monkeypatch.setattr(derl_bench.evaluation, "evaluate", no_episode)
    for option in ("--output", "--trajectories"):
        target = unwritable / "results" / "rec.json"
        other = "--trajectories" if option == "--output" else "--output"
        assert main([*EVALUATE, option, str(target), other, str(tmp_path / "other")]) == 2
        line = _error_line(capsys.readouterr().err)
        assert line.startswith(f"error: {option}: {target} cannot be written: {unwritable} is "
                               "not writable (")
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("command", [["proxy", "--small"], ["demo"]])
def test_an_output_folder_that_is_a_file_or_unwritable_is_refused(tmp_path, capsys, unwritable,
                                                                  command):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    assert main([*command, "--output", str(taken)]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --output: {taken} is a file, not a folder")
    assert taken.read_text() == "mine"
    assert main([*command, "--output", str(unwritable / "runs")]) == 2
    assert f"{unwritable} is not writable" in _error_line(capsys.readouterr().err)
    assert [p for p in tmp_path.iterdir() if p != unwritable] == [taken]


def test_demo_refuses_zero_workers_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--workers", "0", "--output", str(tmp_path / "demo")])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert "argument --workers: must be at least 1, got 0" in err and out == ""
    assert list(tmp_path.iterdir()) == []


def test_a_leaderboards_folder_that_does_not_exist_is_refused_to_a_reader(tmp_path, capsys):
    missing = tmp_path / "boards"
    for action in (["render", "--check"], ["validate"], ["run-here", str(missing / "x.json")]):
        assert main(["leaderboard", *action, "--dir", str(missing)]) == 2
        assert _error_line(capsys.readouterr().err) == (
            f"error: --dir: {missing} does not exist (the leaderboards folder, e.g. "
            "leaderboards)")
    assert list(tmp_path.iterdir()) == []


def test_render_refuses_a_leaderboards_folder_it_cannot_write(unwritable, tmp_path, capsys):
    boards = unwritable / "boards"
    assert main(["leaderboard", "render", "--dir", str(boards), "--no-charts"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"error: --dir: {boards} cannot be written: {unwritable} is not "
                           "writable (")


# -- models, mirrors, recipes -------------------------------------------------------------------

def test_evaluate_refuses_a_missing_model_folder_before_the_eval_set(tmp_path, capsys):
    gone = tmp_path / "no-model"
    assert main([*EVALUATE, "--policy", f"llm:{gone}", "--output",
                 str(tmp_path / "rec.json")]) == 2
    assert _error_line(capsys.readouterr().err) == f"error: --policy: no such model folder: {gone}"
    assert list(tmp_path.iterdir()) == []


def test_a_plain_folder_is_a_mirror_and_a_missing_one_is_refused(upstream_data, tmp_path,
                                                                  capsys):
    root = tmp_path / "root"
    assert main(["data", "download", "gsm8k", "--mirror", str(upstream_data), "--root",
                 str(root), "--quiet"]) == 0
    assert (root / "gsm8k" / ".complete").is_file()
    assert f"from {upstream_data.resolve().as_uri()}" in capsys.readouterr().out
    gone = tmp_path / "no-mirror"
    assert main(["data", "download", "gsm8k", "--mirror", str(gone), "--root",
                 str(tmp_path / "other"), "--quiet"]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: --mirror: {gone} is not a URL (http, https, ftp, file) and does not exist; "
        "give a URL or a folder in the upstream layout")
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("command", ["train", "meta"])
def test_a_missing_recipe_is_named_alone(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith("error: the following arguments are required: " + (
        "RECIPE.yaml" if command == "train" else "recipe"))


@pytest.mark.parametrize("command", ["train", "meta"])
def test_a_recipe_that_is_a_folder_is_called_a_folder(command, tmp_path, capsys):
    folder = tmp_path / "recipe.yaml"
    folder.mkdir()
    assert main([command, str(folder), "--output", str(tmp_path / "run")]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"error: recipe: {folder} is a folder, not a file")
    assert list(tmp_path.iterdir()) == [folder]


@pytest.mark.parametrize("command", ["train", "meta"])
def test_an_override_where_the_recipe_goes_says_the_recipe_comes_first(command, tmp_path,
                                                                     capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("steps: 1\n")
    out = tmp_path / "run"
    for argv in (["steps=1", str(recipe), "--output", str(out)],
                 ["--output", str(out), "steps=1", str(recipe)], ["steps=1"]):
        assert main([command, *argv]) == 2
        assert _error_line(capsys.readouterr().err) == (
            "error: recipe: steps=1 does not exist; it looks like a KEY=VALUE override, and "
            f"the recipe comes first: derl-bench {command} RECIPE [KEY=VALUE ...]")
    assert list(tmp_path.iterdir()) == [recipe]
    # A recipe file whose name has an '=' in it is still read as the recipe.
    (tmp_path / "steps=1.yaml").write_text("# nothing set\n")
    assert main([command, str(tmp_path / "steps=1.yaml"), "--output", str(out)]) == 2
    assert _error_line(capsys.readouterr().err).startswith(
        f"error: recipe {tmp_path / 'steps=1.yaml'} is empty")
    assert not out.exists()


def test_a_changed_setting_on_resume_is_named_old_to_new(tmp_path, capsys):
    from derl_bench.meta import load_meta_config

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "resume", "method": "random", "outer_steps": 1, "population": 2,
        "validation_episodes": 2, "eval_levels": [], "progress": False,
        "inner": {"env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 2,
                  "group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8}}))
    run = tmp_path / "run"
    run.mkdir()
    saved = load_meta_config(recipe, [f"output_dir={run}"]).to_dict()
    (run / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    before = sorted(p.name for p in run.iterdir())
    assert main(["meta", str(recipe), "--output", str(run), "--resume", "inner.steps=3",
                 "inner.learning_rate=0.5"]) == 2
    line = _error_line(capsys.readouterr().err)
    old_rate = saved["inner"]["learning_rate"]
    assert line == ("error: the run was started with different settings: inner.learning_rate: "
                    f"{old_rate!r} -> 0.5, inner.steps: 2 -> 3")
    assert sorted(p.name for p in run.iterdir()) == before


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


# -- SIGTERM ------------------------------------------------------------------------------------

class _SignalledInAFinaliser:
    """A finaliser during which SIGTERM arrives, so that its handler runs, and raises, there."""

    def __del__(self) -> None:
        # To the main thread itself: sent to the process, another thread may take it and the
        # main thread only see it later.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the handler raises at one of these instructions
            pass


def test_sigterm_that_lands_in_a_finaliser_still_stops_the_command():
    from derl_bench.cli._errors import Terminated, sigterm_as_interrupt

    reached, hook, handler = False, sys.unraisablehook, signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        with sigterm_as_interrupt():
            _SignalledInAFinaliser()  # dropped at once: its __del__ runs here
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                reached = True
            pytest.fail("the SIGTERM raised inside a finaliser was lost")
    assert reached, "Terminated was raised outside the finaliser, so the test tested nothing"
    assert signal.getsignal(signal.SIGTERM) is handler  # the block leaves both as it found them
    assert sys.unraisablehook is hook


def test_sigterm_during_sft_cleans_up_as_sigint_does(tmp_path):
    out = tmp_path / "model"
    proc = subprocess.Popen([sys.executable, "-m", "derl_bench", "model", "sft", str(out),
                             "--env", "derl/Arithmetic-v0", "--steps", "100000"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # Signalled once the staging folder has content: the command is then at its work,
        # past the instant the folder is created and not yet guarded.
        while not any(p.name.startswith(".model-") and any(p.iterdir())
                      for p in tmp_path.iterdir()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the staging folder never appeared"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"SIGTERM did not stop model sft: {proc.communicate()}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "terminated" in err.splitlines(), err
    assert list(tmp_path.iterdir()) == [], err
