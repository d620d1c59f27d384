"""Reward discovery: variation operators, search baselines, the Meta-Optimizer and the loop."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml

from derl_bench.cli import main
from derl_bench.grpo.config import ConfigError
from derl_bench.grpo.trainer import ResumeError, initial_model_path, step_seeds
from derl_bench.meta import (
    IslandEvolution,
    MetaConfig,
    OptimizerConfig,
    Proposal,
    RandomSearch,
    load_meta_config,
    meta_config_from_dict,
    run_meta,
)
from derl_bench.meta.evolve import crossover, get_subtree, mutate, replace_subtree, subtree_paths
from derl_bench.meta.inner import inner_config, validation_score
from derl_bench.meta.optimizer import MetaOptimizer
from derl_bench.meta.persist import start_run
from derl_bench.reward import compile_reward
from derl_bench.reward.canonical import to_text
from derl_bench.reward.nodes import Num
from derl_bench.reward.parser import parse

REPO = Path(__file__).resolve().parents[2]
TINY_INNER = {"env_id": "derl/GSM8K-v0", "model": "tiny", "steps": 1, "group_size": 2,
              "prompts_per_step": 1, "max_new_tokens": 8, "tensorboard": False}
ARITH_INNER = {**TINY_INNER, "env_id": "derl/Arithmetic-v0"}


def test_replace_subtree_swaps_exactly_one_node():
    tree = parse("outcome + 0.5 * format_boxed", "math")
    paths = subtree_paths(tree)
    assert paths[0] == () and len(paths) == len(set(paths))
    target = next(p for p in paths if to_text(get_subtree(tree, p)) == "format_boxed")
    assert to_text(replace_subtree(tree, target, Num(2.0))) == "outcome + 0.5 * 2"


@pytest.mark.parametrize("domain", ["math", "agent"])
def test_mutation_and_crossover_always_compile(domain):
    rng = random.Random(0)
    a, b = "g1 + 0.5 * g2", "min(g1, g3) * 2"
    for _ in range(40):
        for child in (mutate(a, domain, rng), crossover(a, b, domain, rng)):
            compile_reward(child, domain=domain)


def test_random_search_is_seeded():
    first = [p.expr for p in RandomSearch("agent", seed=3).propose(5)]
    assert first == [p.expr for p in RandomSearch("agent", seed=3).propose(5)]
    assert first != [p.expr for p in RandomSearch("agent", seed=4).propose(5)]


def test_islands_keep_the_best_and_migrate():
    evo = IslandEvolution("math", seed=0, islands=2, island_size=2, migrate_every=1)
    proposals = evo.propose(4)
    assert [p.extra["island"] for p in proposals] == [0, 1, 0, 1]
    evo.observe(proposals, [0.1, 0.2, 0.9, 0.3])
    # each island kept its best two ([0.9, 0.1] and [0.3, 0.2]), then each island's best
    # replaced the next island's worst
    assert [m.score for m in evo.islands[0]] == [0.9, 0.3]
    assert [m.score for m in evo.islands[1]] == [0.9, 0.3]
    children = evo.propose(4)
    assert {c.origin for c in children} <= {"crossover", "mutation"}
    for child in children:
        compile_reward(child.expr, domain="math")


@pytest.fixture(scope="module")
def meta_optimizer(tmp_path_factory):
    return MetaOptimizer("math", OptimizerConfig(max_new_tokens=24, learning_rate=5e-3,
                                                 kl_coef=0.0),
                         workdir=tmp_path_factory.mktemp("meta-opt"), seed=1)


def test_meta_optimizer_always_closes_its_expressions_within_budget(meta_optimizer):
    # Untrained, the model rambles; constrained decoding must still end every sample with a
    # complete expression inside the 24-token budget.
    proposals = meta_optimizer.propose(12)
    assert all(p.extra["complete"] for p in proposals), [p.expr for p in proposals]
    for p in proposals:
        compile_reward(p.expr, domain="math")
        assert len(p.extra["completion_ids"]) <= 24


def test_meta_optimizer_cold_start_learns_the_grammar(tmp_path):
    optimizer = MetaOptimizer("math", OptimizerConfig(max_new_tokens=24), tmp_path, seed=2)
    losses = optimizer.cold_start(examples=24, steps=12, seed=0, batch_size=8)
    assert losses["loss_last"] < 0.7 * losses["loss_first"]


def test_meta_optimizer_grpo_raises_the_likelihood_of_a_rewarded_expression(meta_optimizer):
    good = Proposal("outcome", "meta-optimizer", extra={"complete": True})
    bad = Proposal("cot_steps", "meta-optimizer", extra={"complete": True})
    tok = meta_optimizer.tokenizer
    for p in (good, bad):
        p.extra["completion_ids"] = tok(p.expr, add_special_tokens=False)["input_ids"] + [
            tok.eos_token_id]

    def logprob(p: Proposal) -> float:
        ids = torch.tensor([meta_optimizer.prompt_ids + p.extra["completion_ids"]])
        with torch.no_grad():
            logits = meta_optimizer.model(input_ids=ids).logits[0, :-1].log_softmax(-1)
        n = len(meta_optimizer.prompt_ids)
        return float(logits[torch.arange(n - 1, ids.shape[1] - 1), ids[0, n:]].sum())

    before = logprob(good) - logprob(bad)
    for _ in range(5):
        meta_optimizer.observe([good, bad], [1.0, 0.0])
    assert logprob(good) - logprob(bad) > before + 1.0


def test_unfinished_expressions_score_the_invalid_score(meta_optimizer):
    p = Proposal("outcome +", "meta-optimizer", extra={"complete": False, "completion_ids": [5]})
    q = Proposal("outcome", "meta-optimizer", extra={"complete": True, "completion_ids": [6]})
    stats = meta_optimizer.observe([p, q], [1.0, 1.0])
    assert stats["meta/reward_mean"] == pytest.approx(0.5)


def test_meta_config_rejects_bad_recipes(tmp_path):
    with pytest.raises(ConfigError, match="method"):
        MetaConfig(method="gradient", inner=TINY_INNER)
    with pytest.raises(ConfigError, match="population >= 2"):
        MetaConfig(method="derl", population=1, inner=TINY_INNER)
    with pytest.raises(ConfigError, match="unknown recipe keys"):
        MetaConfig(inner={**TINY_INNER, "stepz": 3})
    recipe = tmp_path / "r.yaml"
    recipe.write_text("method: random\nbudget: 3\n")
    assert main(["meta", str(recipe)]) == 2
    with pytest.raises(ConfigError, match="unknown optimizer fields: lr"):
        MetaConfig(inner=TINY_INNER, optimizer={"lr": 0.1})
    with pytest.raises(ConfigError, match="optimizer advantage must be one of"):
        MetaConfig(inner=TINY_INNER, optimizer={"advantage": "ppo"})


def test_every_committed_meta_recipe_loads_and_flat_optimizer_fields_still_do(tmp_path):
    recipes = sorted(REPO.glob("baselines/meta-*.yaml"))
    assert len(recipes) == 2 and all(load_meta_config(r).inner.env_id for r in recipes)
    nested = REPO / "baselines" / "meta-derl-gsm8k.yaml"
    assert load_meta_config(nested).optimizer.max_new_tokens == 24
    flat = tmp_path / "flat.yaml"
    flat.write_text(nested.read_text().replace("optimizer:\n  max_new_tokens: 24",
                                               "optimizer_max_new_tokens: 24"))
    assert "optimizer_max_new_tokens" in flat.read_text()
    assert load_meta_config(flat) == load_meta_config(nested)
    # An override wins over the recipe, written flat or dotted.
    both = load_meta_config(flat, ["optimizer_max_new_tokens=8", "optimizer.epochs=2"])
    assert both.optimizer.max_new_tokens == 8 and both.optimizer.epochs == 2
    with pytest.raises(ConfigError, match="both flat and nested: epochs"):
        meta_config_from_dict({"inner": TINY_INNER, "optimizer_epochs": 2,
                               "optimizer": {"epochs": 3}})


def test_a_run_saved_with_flat_optimizer_fields_resumes(tmp_path):
    config = MetaConfig(method="random", inner=TINY_INNER, output_dir=str(tmp_path))
    saved = config.to_dict()
    saved.update({f"optimizer_{k}": v for k, v in saved.pop("optimizer").items()})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    assert start_run(config, resume=True) is None  # no checkpoint yet: it starts over
    changed = {**saved, "optimizer_epochs": 9}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    with pytest.raises(ResumeError, match="optimizer"):
        start_run(config, resume=True)


def test_random_search_run_end_to_end(data_root, tmp_path):
    config = MetaConfig(name="t", method="random", outer_steps=1, population=2,
                        validation_episodes=2, inner=TINY_INNER, output_dir=str(tmp_path),
                        progress=False, executor="local", seed=5)
    result = run_meta(config)
    lines = [json.loads(line) for line in (tmp_path / "candidates.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(rec["valid"] for rec in lines)
    assert all(0.0 <= rec["score"] <= 1.0 for rec in lines)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["best_expr"] == result.best_expr and summary["generations"][0]["generation"] == 0
    assert (tmp_path / "curve.png").stat().st_size > 0
    assert (tmp_path / "structure.png").stat().st_size > 0
    rows = json.loads((tmp_path / "structure.json").read_text())
    # A reward constant on the probe set is not trained, so the table counts the others.
    assert rows[0]["n"] == sum(rec["status"] == "scored" for rec in lines) >= 1
    assert sum(rows[0][f"{k}_share"] for k in ("linear", "bounded", "veto", "unbounded")) == 1
    assert result.best_checkpoint and (tmp_path / "inner" / "g000-c00" / "checkpoints").is_dir()


def test_derl_pop_warm_starts_from_the_best_policy(data_root, tmp_path):
    config = MetaConfig(name="p", method="derl-pop", outer_steps=2, population=2,
                        validation_episodes=2, inner=TINY_INNER, output_dir=str(tmp_path),
                        progress=False, executor="local", seed=2,
                        optimizer={"max_new_tokens": 16, "sft_examples": 16, "sft_steps": 2})
    result = run_meta(config)
    second = [c for c in result.candidates if c["generation"] == 1]
    first_best = max((c for c in result.candidates if c["generation"] == 0 and c.get("checkpoint")),
                     key=lambda c: c["score"], default=None)
    assert first_best is not None
    assert all(c["start_model"] == first_best["checkpoint"] for c in second)
    assert (tmp_path / "meta-optimizer" / "config.json").is_file()


def test_a_warm_started_baseline_continues_from_the_best_policy_as_derl_pop_does(tmp_path):
    config = MetaConfig(name="f", method="fixed", reward="outcome + format_boxed",
                        warm_start=True, outer_steps=2, population=1, validation_episodes=2,
                        inner=ARITH_INNER, output_dir=str(tmp_path), progress=False,
                        executor="local")
    result = run_meta(config)
    first, second = result.candidates
    assert first["start_model"] is None and second["start_model"] == first["checkpoint"]
    cold = MetaConfig(name="f", method="fixed", reward="outcome", inner=ARITH_INNER)
    assert not cold.warm_starts and config.warm_starts


def test_derl_pop_continues_through_the_training_data(tmp_path):
    # A warm-started inner run of generation g starts g * steps into the problem sequence,
    # so it never repeats the problems the policy it starts from was trained on.
    config = MetaConfig(name="p", method="derl-pop", population=2,
                        inner={**ARITH_INNER, "steps": 3}, output_dir=str(tmp_path))
    first = inner_config(config, "outcome", tmp_path / "a", None)
    warm = inner_config(config, "outcome", tmp_path / "b", "some/model", data_offset=3)
    assert step_seeds(warm, 0) == step_seeds(first, 3)
    seen = {s for step in range(3) for s in step_seeds(first, step)}
    assert not seen & {s for step in range(3) for s in step_seeds(warm, step)}


def test_validation_is_a_fixed_set_scored_once_each_and_deterministically(tmp_path):
    import gymnasium as gym

    from derl_bench.policies import LLMPolicy, SamplingConfig
    from derl_bench.rollout import rollout_single_step

    config = MetaConfig(method="random", validation_episodes=6, inner=ARITH_INNER,
                        output_dir=str(tmp_path))
    inner = inner_config(config, "outcome", tmp_path / "run", None)
    model = initial_model_path(inner)
    first = validation_score(model, config, inner)
    assert first == validation_score(model, config, inner)
    # The set: the first six problems of the validation split, each once.
    env = gym.make("derl/Arithmetic-v0", split="validation")
    policy = LLMPolicy.from_pretrained(model, "arithmetic", sampling=SamplingConfig(8, 0.0))
    episodes = rollout_single_step(env, policy, list(range(6)), 1, by_index=True)
    ids = [e.info["problem_id"] for e in episodes]
    assert ids == [p.problem_id for p in env.unwrapped.problems[:6]]


def test_agents_validate_on_held_out_games_each_once_in_manifest_order(data_root, tmp_path):
    from derl_bench.families.alfworld import games
    from derl_bench.meta.inner import validation_envs

    config = MetaConfig(method="random", validation_episodes=3, output_dir=str(tmp_path),
                        inner={**TINY_INNER, "env_id": "derl/ALFWorld-v0", "level": "L2"})
    envs = validation_envs(config, inner_config(config, "success", tmp_path / "run", None))
    try:
        played = [env.reset(seed=7)[1]["game_id"] for env in envs]
    finally:
        for env in envs:
            env.close()
    # The first games of L2's validation split: held out from training, no eval game, and only
    # the task types L2 trains on.
    assert played == games.level_games("L2", "validation")[:3]
    assert not set(played) & set(games.level_games("L2", "train") + games.level_games("L2", "eval"))


def test_scienceworld_validates_on_its_held_out_slice_of_training_variations(data_root,
                                                                             tmp_path):
    from derl_bench.families.scienceworld.splits import split_pairs
    from derl_bench.meta.inner import validation_envs

    config = MetaConfig(method="random", validation_episodes=2, output_dir=str(tmp_path),
                        inner={**TINY_INNER, "env_id": "derl/ScienceWorld-v0"})
    envs = validation_envs(config, inner_config(config, "success", tmp_path / "run", None))
    try:
        played = [(i["task_name"], i["variation"]) for i in (e.reset(seed=3)[1] for e in envs)]
    finally:
        for env in envs:
            env.close()
    assert played == split_pairs("L0", "validation")[:2]
    assert not set(played) & set(split_pairs("L0", "train"))


def test_a_rerun_never_scores_an_earlier_runs_checkpoint(tmp_path):
    stale = tmp_path / "inner" / "g000-c00" / "checkpoints" / "step-10"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    config = MetaConfig(name="t", method="random", outer_steps=1, population=1,
                        validation_episodes=2, inner=ARITH_INNER, output_dir=str(tmp_path),
                        progress=False, executor="local")
    result = run_meta(config)
    assert result.candidates[0]["checkpoint"].endswith("step-1")
    assert not stale.exists()


def test_failed_inner_runs_are_retried_then_excluded_not_scored(tmp_path, monkeypatch):
    import derl_bench.meta.methods.random as random_method
    import derl_bench.meta.workers as workers

    real = workers.train_and_score
    calls = {"n": 0}

    def flaky(config, expr, run, *args):
        calls["n"] += 1
        if calls["n"] in (1, 3, 4):  # candidate 0 fails once; candidate 1 fails every time
            raise RuntimeError("worker died")
        return real(config, expr, run, *args)

    monkeypatch.setattr(workers, "train_and_score", flaky)
    seen: list[list[float]] = []

    class Recording(RandomSearch):
        def observe(self, proposals, scores):
            seen.append(list(scores))

    monkeypatch.setattr(random_method, "RandomSearch", Recording)
    config = MetaConfig(name="t", method="random", outer_steps=1, population=2, retries=1,
                        validation_episodes=2, inner=ARITH_INNER, output_dir=str(tmp_path),
                        progress=False, executor="local", seed=11, batch_inner="false")
    result = run_meta(config)
    first, second = result.candidates
    assert first["status"] == "scored" and first["retried_after"] == ["RuntimeError: worker died"]
    assert second["status"] == "failed" and second["score"] is None
    assert "worker died" in second["error"]
    assert seen == [[first["score"]]], "a failed run must not reach the proposer as a score"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failed_inner_runs"] == 1 and summary["generations"][0]["failed"] == 1


def test_tied_generations_are_counted_as_zero_advantage(tmp_path):
    # The untrained tiny model solves nothing, so every score ties at 0.
    config = MetaConfig(name="t", method="random", outer_steps=2, population=2,
                        validation_episodes=2, inner=ARITH_INNER, output_dir=str(tmp_path),
                        progress=False, executor="local", seed=3)
    result = run_meta(config)
    assert result.zero_advantage_generations == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["zero_advantage_generations"] == 2
    assert all(g["zero_advantage"] for g in summary["generations"])


def test_the_headline_is_the_best_policy_on_the_eval_sets(tmp_path):
    from derl_bench.evaluation.batched import BEST_POLICY, headline_evaluator

    config = MetaConfig(name="t", method="random", outer_steps=1, population=1,
                        validation_episodes=2, inner=ARITH_INNER, output_dir=str(tmp_path),
                        progress=False, executor="local", eval_limit=4)
    evaluate = headline_evaluator("derl/Arithmetic-v0", ["L0", "L2"], limit=4, max_new_tokens=8)
    result = run_meta(config, evaluate=evaluate)
    assert set(result.headline["best"]) == {"L0", "L2"}
    record = json.loads((tmp_path / "results" / "L2.json").read_text())
    assert record["level"] == "L2" and record["results"]["n"] == 4
    assert record["meta_reward"]["expression"] == result.best_expr
    assert record["setup"]["checkpoint"] == BEST_POLICY and record["setup"]["unknown"] == {}


def test_trainer_trl_is_honoured(data_root, tmp_path):
    # an agent recipe's `trainer: trl` is refused by reward discovery's config
    # (tests/grpo/test_trl_env.py), a math recipe's trains on TRL
    from derl_bench.grpo.config import config_from_dict
    from derl_bench.grpo.dispatch import run_training

    config = config_from_dict({**TINY_INNER, "trainer": "trl", "output_dir": str(tmp_path / "t"),
                               "progress": False})
    history, model = run_training(config)
    assert history and (model / "config.json").is_file() and model.name == "final-model"
    assert (tmp_path / "t" / "trl").is_dir()


def test_fixed_reward_baseline_trains_one_reward_with_fresh_seeds(tmp_path):
    config = MetaConfig(name="t", method="fixed", reward="outcome", outer_steps=1,
                        population=2, validation_episodes=2, inner=ARITH_INNER,
                        output_dir=str(tmp_path), progress=False, executor="local", seed=4)
    result = run_meta(config)
    assert [c["expr"] for c in result.candidates] == ["outcome", "outcome"]
    assert "duplicate_of" not in result.candidates[1], "each run has its own seed"
    with pytest.raises(ConfigError, match="reward"):
        MetaConfig(method="fixed", inner=ARITH_INNER)


def test_proxy_benchmark_small_runs_every_method(tmp_path):
    from derl_bench.experiments import proxy as proxy_module
    from derl_bench.experiments.proxy import ProxyConfig, run_proxy, small
    from derl_bench.meta.methods import CONTROLS_GROUP, registry

    # every method but the controls, which run only on a task that plants a reward (Arithmetic
    # plants none; tests/meta/test_controls.py covers them)
    def proxy_methods() -> tuple[str, ...]:
        return tuple(m for m in proxy_module.proxy_methods()
                     if m not in registry() or registry()[m].group != CONTROLS_GROUP)

    config = small(ProxyConfig(output=str(tmp_path / "proxy"), workers=1,
                               methods=list(proxy_methods())))
    result = run_proxy(config, records=tmp_path / "board", log=lambda *_: None)
    assert set(result["summary"]) == set(proxy_methods())
    for method, figures in result["summary"].items():
        assert {"L0", "L1", "L2"} <= set(figures), method
    for figure in ("curves.png", "best_so_far.png", "composition.png", "optimizer.png"):
        assert (tmp_path / "board" / "evidence" / figure).stat().st_size > 0
    assert {c["minus"] for c in result["comparisons"]} == set(proxy_methods()) - {"derl"}
    records = sorted(p.name for p in (tmp_path / "board").glob("*.json"))
    assert len(records) == 3 * len(proxy_methods()) and "derl-pop-s0-L2.json" in records
    generations = json.loads((tmp_path / "board" / "evidence" / "generations.json").read_text())
    assert set(generations["table"]) == set(proxy_methods())
    lines = (tmp_path / "board" / "evidence" / "candidates.jsonl").read_text().splitlines()
    assert len(lines) == config.budget * len(proxy_methods())
    # The pick is the best re-scored of the top rewards, and the mechanism's methods count
    # their proposals at the re-scored values; runs.json keeps it all and renders summary.md.
    from derl_bench.experiments.recompute import summary_renders
    from derl_bench.experiments.rescore import fresh_endpoint, pick, top_rewards

    runs = json.loads((tmp_path / "board" / "evidence" / "runs.json").read_text())["runs"]
    by = {(r["method"], r["seed"]): r for r in result["runs"]}
    for row in runs:
        rescored, full = row["rescored"], by[row["method"], row["seed"]]
        top = top_rewards(full["candidates"], config.pick_top)
        fresh = {e: sum(v) / len(v) for e, v in rescored["scores"].items()}
        want = pick(top, fresh) if len(top) > 1 else top[0]["expr"]
        assert rescored["pick"]["expr"] == row["picked"]["expr"] == want, row["method"]
        assert all(len(v) == config.rescore_seeds for v in rescored["scores"].values())
        if row["method"] in ("derl", "derl-frozen"):
            assert rescored["endpoint"] == fresh_endpoint(full["candidates"], range(0, 1),
                                                          fresh)
        assert row["seconds"] > 0 and len(row["picked"]["L0"]["scores"]) == config.retrain_seeds
    assert summary_renders(tmp_path / "board") is True
    # The small run evaluates 16 problems per level; a board takes only whole eval sets, so
    # that must be the one thing validation objects to.
    from derl_bench.leaderboard.validate import record_problems

    for path in (tmp_path / "board").glob("*.json"):
        problems = record_problems(json.loads(path.read_text()))
        assert problems == ["$.results.n: n=16 is too small: the eval set has 500 episodes"], path


def test_demo_writes_every_method_its_pick_re_trained_curves_and_records(tmp_path):
    from derl_bench.cli.demo import DEMO, explain, run_demo

    summary = run_demo(tmp_path / "demo", workers=1, small=True, log=lambda *_: None)
    on_disk = json.loads((tmp_path / "demo" / "demo.json").read_text())
    assert on_disk == summary
    assert summary["env_id"] == DEMO["env_id"] == "derl/DigitsBalance-v0"
    assert set(summary["methods"]) == {"derl", "random", "outcome"}
    assert summary["planted_reward"] == "digit_recall * length_fit**2"
    for method in summary["methods"].values():
        assert all(isinstance(v, float) for v in method["generation_mean"])
        curve = method["best_so_far_by_run"]
        assert curve == sorted(curve)
        # a curve point per inner run trained: a repeated or constant proposal trains none
        assert len(curve) == method["trained_by_generation"][-1] <= (
            summary["budget_inner_runs"] - method["repeated_proposals"])
        assert method["trained_by_generation"] == sorted(method["trained_by_generation"])
        picked = method["picked"]
        if picked["expr"] is None:  # every proposal constant: nothing trained, nothing picked
            assert picked["L0_scores"] == [] and picked["L0_mean"] is None
            assert method["inner_runs"] == 0
            continue
        assert len(picked["L0_scores"]) == summary["retrain_seeds"] >= 2
        assert picked["L0_mean"] == pytest.approx(sum(picked["L0_scores"]) / len(
            picked["L0_scores"]))
        assert picked["L0_se"] >= 0
        assert json.loads(open(method["records"]["L0"]).read())["level"] == "L0"
    assert summary["methods"]["outcome"]["picked"]["expr"] == "outcome"
    assert (tmp_path / "demo" / "best_so_far.png").stat().st_size > 0
    text = explain(summary)
    assert "DERL − outcome" in text
    assert ("DERL − random" in text) == (summary["methods"]["random"]["picked"]["expr"]
                                         is not None)
    assert "one seed cannot rank the searchers" in text
