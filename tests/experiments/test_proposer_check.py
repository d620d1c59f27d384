"""The proposer check: its rules, its probe set, and whether the Meta-Optimizer learns on it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from derl_bench.cli import main
from derl_bench.experiments.proposer_check import (
    CheckConfig,
    observed,
    parse_rule,
    spearman,
)
from derl_bench.experiments.stats import paired_difference, t_quantile
from derl_bench.family import resolve_family
from derl_bench.meta.config import OptimizerConfig
from derl_bench.meta.optimizer import MetaOptimizer
from derl_bench.meta.probe import probe_set
from derl_bench.policies import TinyModelSpec, init_tiny_model
from derl_bench.reward import compile_reward

ENV = "derl/Arithmetic-v0"


@pytest.fixture(scope="module")
def probe():
    return probe_set(ENV, resolve_family(ENV), problems=8)


def _score(rule_text, expr, probe):
    rule = parse_rule(rule_text, ENV)
    return rule.score(None if expr is None else compile_reward(expr, env=ENV), probe)


def test_probe_vectors_are_the_envs_own_graded_responses(probe):
    columns = probe.columns
    assert probe.source == "responses" and len(probe) == 8 * 14
    # A correct answer is always boxed and found anywhere in the response: the correlations
    # that real responses carry and independent draws would not.
    correct = columns["outcome"] == 1
    assert correct.any() and (~correct).any()
    assert np.all(columns["format_boxed"][correct] == 1)
    assert np.all(columns["loose_outcome"][correct] == 1)
    assert set(np.unique(columns["cot_steps"])) == {0.0, 1.0}


def test_rank_rule_has_its_optimum_at_any_reward_that_orders_like_the_target(probe):
    target = "rank:g1 + 0.5 * g2"
    assert _score(target, "g1 + 0.5 * g2", probe) == pytest.approx(1.0)
    # A correct answer is always boxed here, so outcome + format orders the probe the same way.
    assert _score(target, "2 * outcome + format_boxed", probe) == pytest.approx(1.0)
    assert _score(target, "g2", probe) < 1.0
    assert _score(target, "-g1 - g2", probe) == pytest.approx(-1.0)
    assert _score(target, "0.5", probe) == 0.0           # constant: no ordering at all
    assert _score(target, None, probe) == -1.0           # did not compile


def test_pays_rule_rewards_increasing_in_the_named_primitive(probe):
    assert _score("pays:answer_closeness", "answer_closeness + g1", probe) == 1.0
    assert _score("pays:answer_closeness", "-answer_closeness", probe) == -1.0
    assert _score("pays:answer_closeness", "outcome", probe) == 0.0
    product = _score("pays:answer_closeness", "answer_closeness * outcome", probe)
    assert 0.0 < product < 1.0       # pays only where the answer is already right
    assert _score("pays:g2", "format_boxed", probe) == 1.0   # aliases name the primitive


def test_rules_are_checked_against_the_envs_primitives():
    with pytest.raises(ValueError, match="not a primitive"):
        parse_rule("pays:score", ENV)
    with pytest.raises(ValueError, match="expected"):
        parse_rule("likes:g1", ENV)


def test_the_noisy_rule_measures_the_score_like_a_validation_set():
    config = CheckConfig()
    rule = parse_rule("noisy-rank:g1", ENV)
    rng = np.random.default_rng(0)
    draws = np.array([observed(1.0, rule, config, rng) for _ in range(400)])
    # Optimum -> success rate 0.1 on 200 problems: binomial, in steps of 1/200.
    assert abs(draws.mean() - 0.1) < 0.01 and 0.015 < draws.std() < 0.03
    assert np.allclose(draws * 200, np.round(draws * 200))
    assert observed(-1.0, rule, config, rng) == 0.0
    assert observed(0.3, parse_rule("rank:g1", ENV), config, rng) == 0.3


def test_spearman_and_paired_statistics():
    assert spearman(np.array([3.0, 1.0, 2.0]), np.array([30.0, 10.0, 20.0])) == 1.0
    assert spearman(np.array([1.0, 2.0]), np.array([2.0, 1.0])) == -1.0
    assert round(t_quantile(0.975, 4), 3) == 2.776
    d = paired_difference([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])
    assert d["mean"] == 1.0 and d["ci_low"] < 1.0 < d["ci_high"] and d["mde"] > 0


def _optimizer(tmp_path, frozen: bool = False) -> MetaOptimizer:
    init = tmp_path / "init"
    if not (init / "config.json").exists():
        init_tiny_model(init, TinyModelSpec(seed=7919), overwrite=True)
    # The outer-loop settings the proposer check selected (docs/proposer-check.md).
    settings = OptimizerConfig(model=str(init), learning_rate=1e-3, kl_coef=0.001,
                               max_new_tokens=24, epochs=4, reference_reset=True,
                               advantage="rloo")
    optimizer = MetaOptimizer(ENV, settings, tmp_path, seed=3, invalid_score=-1.0,
                              frozen=frozen)
    optimizer.cold_start(64, 20, seed=0, corpus="generator", cache=tmp_path / "cache")
    return optimizer


def _sampled_score(optimizer: MetaOptimizer, rule, probe, n: int = 48) -> float:
    optimizer.generator.manual_seed(12345)
    scores = [rule.score(None if p.extra["complete"] is False
                         else compile_reward(p.expr, env=ENV), probe)
              for p in optimizer.propose(n)]
    return float(np.mean(scores))


def _train(optimizer: MetaOptimizer, rule, probe, generations: int) -> None:
    for _ in range(generations):
        proposals = optimizer.propose(8)
        optimizer.observe(proposals, [
            rule.score(None if p.extra["complete"] is False else compile_reward(p.expr, env=ENV),
                       probe) for p in proposals])


def test_the_meta_optimizer_moves_toward_a_rules_optimum_and_lr_zero_does_not(tmp_path, probe):
    rule = parse_rule("rank:g1", ENV)
    learner = _optimizer(tmp_path)
    before = _sampled_score(learner, rule, probe)
    _train(learner, rule, probe, generations=10)
    after = _sampled_score(learner, rule, probe)
    assert after > before + 0.15, (before, after)

    frozen = _optimizer(tmp_path, frozen=True)   # the same cold start, loaded from the cache
    start = {k: v.clone() for k, v in frozen.model.state_dict().items()}
    assert _sampled_score(frozen, rule, probe) == before
    _train(frozen, rule, probe, generations=10)
    assert all(torch.equal(start[k], v) for k, v in frozen.model.state_dict().items())
    assert _sampled_score(frozen, rule, probe) == before


def test_the_paper_corpus_cold_starts_the_meta_optimizer(data_root, tmp_path):
    optimizer = MetaOptimizer(ENV, OptimizerConfig(max_new_tokens=48), tmp_path, seed=0)
    corpus = optimizer.cold_start_corpus("paper", examples=0)
    # The formulas the Meta-Reward language accepts (193 of 206) that fit the token budget.
    assert 150 < len(corpus) <= 193
    first = optimizer.cold_start(0, 5, corpus="paper", cache=tmp_path / "cache")
    again = MetaOptimizer(ENV, OptimizerConfig(max_new_tokens=48), tmp_path, seed=0)
    second = again.cold_start(0, 5, corpus="paper", cache=tmp_path / "cache")
    assert first["cached"] == 0.0 and second["cached"] == 1.0
    assert second["loss_last"] == first["loss_last"]
    for a, b in zip(optimizer.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_small_check_writes_its_table_and_plot_and_is_deterministic(data_root, tmp_path):
    out = tmp_path / "check"
    status = main(["proposer-check", "--small", "--output", str(out)])
    assert status == 0
    result = json.loads((out / "results.json").read_text())
    summary = (out / "summary.md").read_text()
    assert (out / "curves.png").stat().st_size > 0
    labels = {(r["proposer"], r["cold_start"]) for r in result["rows"]}
    assert labels == {("derl", "paper"), ("derl", "generator"), ("derl-frozen", "paper"),
                      ("derl-frozen", "generator"), ("random", None), ("revolve", None)}
    assert len(result["rows"]) == 3 * 6 * 2 * 3       # rules x runs x seeds x generations
    assert all(0 <= r["valid_share"] <= 1 and len(r["scores"]) == 4 for r in result["rows"])
    entry = result["summary"][0]
    assert set(entry["derl_minus"]) == {"derl-frozen", "random", "revolve"}
    assert "DERL minus this" in summary and "derl-frozen" in summary
    # Generation 0 is shared by DERL and its frozen copy (same cold start, same sampler seed).
    first = {(r["proposer"], r["seed"]): r["exprs"] for r in result["rows"]
             if r["generation"] == 0 and r["cold_start"] == "paper"
             and r["rule"] == "rank:g1 + 0.5 * g2"}
    assert first[("derl", 0)] == first[("derl-frozen", 0)]

    # Two processes give the same numbers as one.
    small = ["--small", "--rules", "noisy-rank:g1 + 0.5 * g2", "--proposers", "derl",
             "random", "--cold-starts", "paper", "--cache", str(out / "cache")]
    assert main(["proposer-check", *small, "--output", str(tmp_path / "a")]) == 0
    assert main(["proposer-check", *small, "--workers", "2", "--output",
                 str(tmp_path / "b")]) == 0
    rows_a = json.loads((tmp_path / "a" / "results.json").read_text())["rows"]
    rows_b = json.loads((tmp_path / "b" / "results.json").read_text())["rows"]
    assert rows_a == rows_b


def test_bad_check_arguments_exit_2(tmp_path, capsys):
    assert main(["proposer-check", "--rules", "pays:nonsense", "--output",
                 str(tmp_path / "x")]) == 2
    assert "not a primitive" in capsys.readouterr().err
    assert main(["proposer-check", "--proposers", "gradient", "--output",
                 str(tmp_path / "y")]) == 2
    assert main(["proposer-check", "--small", "--workers", "0", "--output",
                 str(tmp_path / "z")]) == 2
    assert "workers must be at least 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


@pytest.mark.parametrize(("option", "twice"), [
    ("--seeds", ["1", "1"]), ("--proposers", ["random", "random"]),
    ("--rules", ["pays:answer_closeness"] * 2), ("--cold-starts", ["paper", "paper"]),
])
def test_an_item_given_twice_is_refused_before_anything_is_written(tmp_path, capsys, option,
                                                                    twice):
    # Its runs would count twice in the paired differences.
    out = tmp_path / "check"
    with pytest.raises(SystemExit) as exit_:
        main(["proposer-check", "--small", "--output", str(out), option, *twice])
    assert exit_.value.code == 2
    shown = twice[0] if option == "--seeds" else repr(twice[0])
    assert f"argument {option}: {shown} is given twice; give each once" in \
        capsys.readouterr().err
    assert not out.exists()


def _cold_start_in_a_process(args: tuple[str, str]) -> float:
    from derl_bench.policies.threads import configure_threads

    configure_threads(num_threads=1)
    folder, cache = args
    optimizer = MetaOptimizer(ENV, OptimizerConfig(max_new_tokens=24), folder, seed=0)
    return optimizer.cold_start(64, 20, seed=0, corpus="generator", cache=cache)["cached"]


def test_runs_started_side_by_side_cold_start_once(tmp_path):
    import concurrent.futures
    import multiprocessing

    jobs = [(str(tmp_path / name), str(tmp_path / "cache")) for name in ("a", "b")]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        cached = sorted(pool.map(_cold_start_in_a_process, jobs))
    assert cached == [0.0, 1.0], "the second waits for the first's cold start and loads it"
