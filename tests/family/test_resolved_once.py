"""A family is resolved where a command starts and handed down: outside ``derl_bench/cli/``,
``derl_bench/families/`` and the two modules that define the lookups (``cards.py`` and
``family.py``), no code calls ``family_spec``, ``card_for`` or ``load_card``.
A stage reads what it needs from the :class:`~derl_bench.family.Family` it was given (its
``spec``, ``card`` and ``adapter(env_id)``).

``resolve_family``, ``find_family`` and ``adapter_for`` are how a stage's public entry
resolves an env id it was given as a string; their calls are counted and kept to the entries
listed here, so that a new lookup deep in a stage shows up as a change to this list."""

from __future__ import annotations

import ast
import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from derl_bench import family as family_module
from derl_bench.family import Family, resolve_family

PACKAGE = Path(__file__).resolve().parents[2] / "derl_bench"
LOOKUPS = frozenset({"family_spec", "card_for", "load_card"})
RESOLVERS = frozenset({"resolve_family", "find_family", "adapter_for"})
ALLOWED = ("cli", "families", "family.py", "cards.py")
ENV = "derl/Arithmetic-v0"


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def calls(source: str, names: frozenset[str]) -> list[tuple[int, str, str]]:
    """``(line, called name, enclosing function)`` of each call of one of ``names``.

    >>> calls("def f(e):\\n    return family_spec(e).name\\n", LOOKUPS)
    [(2, 'family_spec', 'f')]
    """
    found = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = f"{where}.{child.name}" if where else child.name
            elif isinstance(child, ast.ClassDef):
                inner = f"{where}.{child.name}" if where else child.name
            if isinstance(child, ast.Call) and _called_name(child) in names:
                found.append((child.lineno, str(_called_name(child)), where))
            visit(child, inner)

    visit(ast.parse(source), "")
    return found


def stage_modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py")
                  if path.relative_to(PACKAGE).parts[0] not in ALLOWED)


def test_the_scan_finds_a_lookup_and_where_it_is():
    source = ("class Board:\n"
              "    def rows(self, env_id):\n"
              "        return family_spec(env_id).levels, cards.load_card('x')\n")
    assert calls(source, LOOKUPS) == [(3, "family_spec", "Board.rows"),
                                      (3, "load_card", "Board.rows")]
    assert calls("family.card['levels']\nspec.name\n", LOOKUPS) == []


def test_no_stage_looks_a_family_up():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} {name} (in {where or 'module'})"
             for path in stage_modules()
             for line, name, where in calls(path.read_text(encoding="utf-8"), LOOKUPS)]
    assert not found, ("a stage looks its family up instead of being handed the resolved "
                       "Family:\n" + "\n".join(found))


def test_stages_resolve_an_env_id_only_at_their_entries():
    counted = Counter()
    for path in stage_modules():
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for _, _, where in calls(path.read_text(encoding="utf-8"), RESOLVERS):
            counted[f"{module}:{where}"] += 1
    assert dict(counted) == ENTRIES, (
        "resolve_family/find_family calls moved; an entry that resolves an env id given as a "
        "string belongs here, a helper below it takes the Family instead")


ENTRIES: dict[str, int] = {
    # each is where a user's call starts from an env id: it resolves it (``adapter_for`` hands
    # back an adapter its caller resolved as it is) and hands the Family down
    "derl_bench.evaluation.__init__:evaluate": 1,
    "derl_bench.evaluation.batched:evaluate_llm": 1,
    "derl_bench.evaluation.batched:headline_evaluator": 1,
    "derl_bench.evaluation.commands:evaluate_commands": 1,
    "derl_bench.evaluation.families:adapter_for": 1,
    "derl_bench.evaluation.policies:_degenerate": 1,
    "derl_bench.evaluation.record:command_record": 1,
    "derl_bench.experiments.climb:draw_neighbours": 1,
    "derl_bench.experiments.landscape:draw_rewards": 1,
    "derl_bench.experiments.proposer_check.run:run_check": 1,
    "derl_bench.experiments.proxy.config:ProxyConfig.family": 1,
    "derl_bench.grpo.commands:train_commands": 1,
    "derl_bench.grpo.config:TrainConfig.__post_init__": 1,
    "derl_bench.grpo.dispatch:run_training": 1,
    "derl_bench.grpo.trainer:train": 1,
    "derl_bench.integrations.sessions:check_env_id": 1,
    "derl_bench.leaderboard.board:evaluated_adapters": 1,
    "derl_bench.leaderboard.validate:_record_adapter": 1,
    "derl_bench.leaderboard.validate:known_data_checksums": 1,
    "derl_bench.meta.config:MetaConfig.__post_init__": 1,
    "derl_bench.policies.command_model:init_command_model": 1,
    "derl_bench.policies.policy:LLMPolicy.__init__": 1,
    "derl_bench.reward.primitives:_named_family_primitives": 1,
    "derl_bench.reward.primitives:_named_set": 1,
    "derl_bench.sft.__init__:SFTConfig.__post_init__": 1,
    "derl_bench.sft.__init__:run_sft": 1,
    "derl_bench.sft.dagger:run_dagger": 1,
}
"""Each stage entry that resolves an env id it was given as a string, and how many times."""


@pytest.fixture
def no_lookups(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """From here on, any lookup of a family by name fails the test (``resolve_family``,
    ``find_family`` and ``card_for`` go through ``family_spec``; a Family handed down needs
    none). Yields the names asked for."""
    asked: list[str] = []
    real = family_module.family_spec

    def refuse(name: object) -> object:
        if getattr(refuse, "paused", False):
            return real(name)  # type: ignore[arg-type]
        asked.append(str(name))
        raise AssertionError(f"looked the family of {name!r} up again")

    monkeypatch.setattr(family_module, "family_spec", refuse)
    yield asked
    assert not asked, f"looked up: {asked}"


@contextlib.contextmanager
def no_lookups_paused(asked: list[str]) -> Iterator[None]:
    refuse = family_module.family_spec
    refuse.paused = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        refuse.paused = False  # type: ignore[attr-defined]


@pytest.fixture
def family() -> Family:
    return resolve_family(ENV)


def test_an_evaluation_handed_its_adapter_looks_nothing_up(family, no_lookups):
    from derl_bench.evaluation import evaluate
    from derl_bench.evaluation.families import resolve_adapter

    record, results = evaluate(resolve_adapter(ENV, family), "L0", "oracle", limit=3)
    assert record["env"]["id"] == ENV and len(results) == record["setup"]["episodes"] == 3
    assert record["results"]["success_rate"]["mean"] == 1.0


def counted(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """From here on, the names looked up (``family_spec``, which every lookup goes through) and
    the expressions compiled (a :class:`~derl_bench.reward.MetaReward` made), in order."""
    from derl_bench.reward.meta_reward import MetaReward

    looked_up: list[str] = []
    compiled: list[str] = []
    real_spec, real_init = family_module.family_spec, MetaReward.__init__

    def spec(name: object) -> object:
        looked_up.append(str(name))
        return real_spec(name)  # type: ignore[arg-type]

    def init(self: MetaReward, expr: str, *args: object, **kwargs: object) -> None:
        compiled.append(expr)
        real_init(self, expr, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(family_module, "family_spec", spec)
    monkeypatch.setattr(MetaReward, "__init__", init)
    return looked_up, compiled


def test_run_training_resolves_once_and_compiles_once(tmp_path, monkeypatch):
    # the Python entry resolves and compiles where it starts, like the command
    from derl_bench.grpo.config import TrainConfig
    from derl_bench.grpo.dispatch import run_training

    config = TrainConfig(env_id=ENV, model="tiny", meta_reward="outcome", steps=1,
                         group_size=2, prompts_per_step=1, max_new_tokens=8,
                         tensorboard=False, progress=False, output_dir=str(tmp_path / "run"))
    looked_up, compiled = counted(monkeypatch)
    history, checkpoint = run_training(config)
    assert len(history) == 1 and checkpoint.is_dir()
    assert looked_up == [ENV] and compiled == ["outcome"]


def test_train_resolves_once_and_compiles_once(tmp_path, monkeypatch):
    # the command resolves and compiles where it starts; its trainer and everything below it
    # are handed both
    from derl_bench.cli import main

    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(f"env_id: {ENV}\nmodel: tiny\nmeta_reward: outcome\nsteps: 1\n"
                      "group_size: 2\nprompts_per_step: 1\nmax_new_tokens: 8\n"
                      "tensorboard: false\nprogress: false\n")
    looked_up, compiled = counted(monkeypatch)
    assert main(["train", str(recipe), "--output", str(tmp_path / "run")]) == 0
    assert looked_up == [ENV] and compiled == ["outcome"]


def test_train_of_a_command_recipe_resolves_once_and_compiles_once(tmp_path, data_root,
                                                                    monkeypatch):
    from derl_bench.cli import main
    from derl_bench.policies.command_model import init_command_model

    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    recipe = tmp_path / "commands.yaml"
    recipe.write_text(f"trainer: commands\nenv_id: derl/ALFWorld-v0\nmodel: {base}\n"
                      "meta_reward: success\nsteps: 1\ngames_per_step: 1\ngroup_size: 2\n"
                      "pool: 2\nvalidation_games: 1\nenvs: 2\nnum_threads: 1\n"
                      "max_episode_steps: 3\n")
    looked_up, compiled = counted(monkeypatch)
    assert main(["train", str(recipe), "--output", str(tmp_path / "run")]) == 0
    assert looked_up == ["derl/ALFWorld-v0"] and compiled == ["success"]


def test_meta_resolves_once_and_compiles_each_candidate_once(tmp_path, monkeypatch):
    # the config resolves the inner env's family where the command makes it; the proposer,
    # each inner run, the validation and the headline evaluator read it from there, and the
    # best candidate's headline uses the reward its inner run was handed
    from derl_bench.cli import main

    recipe = tmp_path / "meta.yaml"
    recipe.write_text(f"name: t\nmethod: random\nouter_steps: 1\npopulation: 2\n"
                      f"validation_episodes: 2\nexecutor: local\nseed: 3\nprogress: false\n"
                      f"eval_levels: [L0]\neval_limit: 2\ninner:\n  env_id: {ENV}\n"
                      f"  model: tiny\n  steps: 1\n  group_size: 2\n  prompts_per_step: 1\n"
                      f"  max_new_tokens: 8\n  tensorboard: false\n")
    looked_up, compiled = counted(monkeypatch)
    assert main(["meta", str(recipe), "--output", str(tmp_path / "run")]) == 0
    candidates = [json.loads(line) for line in
                  (tmp_path / "run" / "candidates.jsonl").read_text().splitlines()]
    assert (tmp_path / "run" / "results" / "L0.json").is_file()
    assert looked_up == [ENV]
    assert sorted(compiled) == sorted(c["expr"] for c in candidates) and len(compiled) == 2


def test_evaluate_resolves_once_and_compiles_once(tmp_path, monkeypatch):
    from derl_bench.cli import main

    looked_up, compiled = counted(monkeypatch)
    out = tmp_path / "L0.json"
    assert main(["evaluate", "--env", ENV, "--level", "L0", "--policy", "oracle", "--limit", "3",
                 "--meta-reward", "outcome", "--no-progress", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["results"]["n"] == 3
    assert looked_up == [ENV] and compiled == ["outcome"]



def test_evaluate_of_a_command_model_resolves_once_and_compiles_once(tmp_path, data_root,
                                                                     monkeypatch):
    # the command's adapter is handed to the games and to the record, which compiles the
    # reward the model was trained with once, for its block
    from derl_bench.cli import main
    from derl_bench.policies.command_model import init_command_model

    base = init_command_model(tmp_path / "base", "derl/ALFWorld-v0")
    looked_up, compiled = counted(monkeypatch)
    out = tmp_path / "L0.json"
    assert main(["evaluate", "--env", "derl/ALFWorld-v0", "--level", "L0", "--commands",
                 str(base), "--method", "grpo-outcome", "--meta-reward", "success",
                 "--checkpoint", "its initial weights", "--limit", "2", "--num-envs", "2",
                 "--no-progress", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["results"]["n"] == 2
    assert looked_up == ["derl/ALFWorld-v0"] and compiled == ["success"]

def test_serve_resolves_once_and_compiles_a_tasks_reward_once(monkeypatch):
    # the app resolves its env id and compiles its default task's reward where it is built;
    # every session of that task is handed both
    pytest.importorskip("openenv.core")
    import asyncio

    from derl_bench.integrations.openenv_server import DerlAction, DerlEnvClient, build_app
    from tests.integrations.serving import serving

    looked_up, compiled = counted(monkeypatch)
    app = build_app(ENV, max_sessions=2, session_timeout=None, reward="outcome")

    async def play(url: str) -> list[float]:
        rewards = []
        for seed in (1, 2):
            async with DerlEnvClient(base_url=url) as env:
                await env.reset(seed=seed)
                rewards.append((await env.step(DerlAction(text="\\boxed{0}"))).reward)
        return rewards

    with serving(app) as url:
        rewards = asyncio.run(play(url))
    assert len(rewards) == 2 and all(r is not None for r in rewards)
    assert looked_up == [ENV] and compiled == ["outcome"]


@pytest.mark.slow
def test_the_small_proxy_resolves_once(tmp_path, monkeypatch):
    # the benchmark's config resolves the task's family; its base policy, its recipes (one
    # MetaConfig per method, handed that family), every method's proposer, inner runs and
    # evaluations read it from there (in this process: one worker)
    from derl_bench.cli import main

    looked_up, _ = counted(monkeypatch)
    out = tmp_path / "proxy"
    assert main(["proxy", "--small", "--workers", "1", "--output", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["env_id"] == ENV
    assert looked_up == [ENV]
