"""Population-batched inner runs compute what separate runs compute.

The same seeds give the same samples, losses and weights whether a reward's run trains alone
(the compact trainer) or as one member of a stacked population; and a population whose members
were given each other's rewards does *not* reproduce the separate runs (the check can fail).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from derl_bench.family import resolve_family
from derl_bench.grpo import population as pop_trainer
from derl_bench.grpo import trainer
from derl_bench.grpo.checkpoint import load_trainer_state
from derl_bench.grpo.config import TrainConfig, compile_run_reward, config_from_dict, replace
from derl_bench.grpo.loss import token_logprobs
from derl_bench.grpo.population import (
    PopulationRun,
    clip_grad_norms,
    population_support,
    population_token_logprobs,
    train_population,
)
from derl_bench.meta import MetaConfig, run_meta
from derl_bench.meta.config import ConfigError
from derl_bench.meta.workers import ExecutorError, InnerJob, inner_groups
from derl_bench.policies import SamplingConfig, TransformersBackend
from derl_bench.policies.fast import FastSampler
from derl_bench.policies.population import Population
from derl_bench.reward import compile_reward
from tests.numerics import assert_close_reordered
from tests.policies.test_fast_path import _model  # the tiny model, scaled to write varied tokens

ENV = "derl/Arithmetic-v0"
REWARDS = ["response_length", "-response_length", "1 / (1 + response_length)"]
STEPS = 3
LOSS_KEYS = ("loss", "policy_loss", "kl", "clip_fraction", "entropy", "grad_norm",
             "reward/mean", "tokens/generated")


def _config(run_dir: Path, expr: str, steps: int = STEPS) -> TrainConfig:
    # Every part of the update runs: micro-batches with a ragged last one (a population's
    # hold 18 rows in all: 6 of each member, groups of 4 continuing one prompt), two updates
    # per batch (old log-probs), the KL reference and gradient clipping.
    return TrainConfig(name=run_dir.name, env_id=ENV, model="tiny", meta_reward=expr,
                       steps=steps, group_size=4, prompts_per_step=2, max_new_tokens=10,
                       learning_rate=1e-2, kl_coef=0.05, updates_per_batch=2,
                       micro_batch_size=18, max_grad_norm=0.5, save_every=0,
                       keep_checkpoints=1, tensorboard=False, progress=False,
                       output_dir=str(run_dir))


def _completions(episodes) -> list[list[int]]:
    return [s.completion_ids for e in episodes for s in e.steps]


def _weights(path: Path) -> list[torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return [p.detach() for p in AutoModelForCausalLM.from_pretrained(path).parameters()]


def _separate(root: Path, exprs: list[str]) -> list[dict]:
    """Each reward's own run of the compact trainer: its samples per step, its log, its model."""
    records = []
    real = trainer.rollout_single_step
    for i, expr in enumerate(exprs):
        samples: list[list[list[int]]] = []

        def spy(*args, samples=samples, **kwargs):
            episodes = real(*args, **kwargs)
            samples.append(_completions(episodes))
            return episodes

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(trainer, "rollout_single_step", spy)
            history = trainer.train(_config(root / f"alone-{i}", expr))
        records.append({"samples": samples, "history": history,
                        "model": root / f"alone-{i}" / "checkpoints" / f"step-{STEPS}"})
    return records


def _train(configs: list[TrainConfig]) -> PopulationRun:
    """``train_population`` handed what the meta loop hands it: the family and each reward."""
    family = resolve_family(configs[0].env_id)
    return train_population(configs, [compile_run_reward(c, family) for c in configs], family)


def _population(root: Path, exprs: list[str], tag: str) -> list[dict]:
    """The same rewards' runs as one population, recorded the same way."""
    samples: list[list[list[int]]] = [[] for _ in exprs]
    calls = {"n": 0}
    real = pop_trainer.grade_single_step

    def spy(*args, **kwargs):
        episodes = real(*args, **kwargs)
        samples[calls["n"] % len(exprs)].append(_completions(episodes))
        calls["n"] += 1
        return episodes

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pop_trainer, "grade_single_step", spy)
        run = _train([_config(root / f"{tag}-{i}", e) for i, e in enumerate(exprs)])
    return [{"samples": samples[i], "history": run.histories[i], "model": run.checkpoints[i]}
            for i in range(len(exprs))]


def _mismatches(alone: dict, member: dict) -> list[str]:
    """What differs between a separate run and a population member (empty: the same run)."""
    found = []
    if alone["samples"] != member["samples"]:
        found.append("samples")
    for a, b in zip(alone["history"], member["history"], strict=True):
        for key in LOSS_KEYS:
            if a[key] != pytest.approx(b[key], rel=1e-4, abs=1e-6):
                found.append(f"step {a['step']} {key}: {a[key]} vs {b[key]}")
    # AdamW divides by the root of the second moment, so an element whose gradient is mere
    # rounding noise still moves by up to the learning rate, in a direction the rounding picks:
    # where the two runs round differently, it may differ by up to 2 lr per update (AdamW's
    # bound, whatever the machine). Such elements are rare; a member trained on the wrong
    # gradient moves nearly every element by about lr. So: every element within the bound,
    # and no more than 0.1% of them further apart than lr / 100.
    lr, updates = 1e-2, STEPS * 2
    apart = total = 0
    for a, b in zip(_weights(alone["model"]), _weights(member["model"]), strict=True):
        gap = (a - b).abs()
        if float(gap.max()) > 2 * lr * updates:
            found.append("weights beyond AdamW's bound")
        apart += int((gap > lr / 100).sum())
        total += gap.numel()
    if apart > total / 1000:
        found.append(f"weights: {apart} of {total} elements more than lr / 100 apart")
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("population")
    return root, _separate(root, REWARDS)


def test_each_member_trains_exactly_as_its_separate_run(runs):
    root, alone = runs
    members = _population(root, REWARDS, "together")
    for i in range(len(REWARDS)):
        assert _mismatches(alone[i], members[i]) == [], REWARDS[i]
    # The rewards pull apart: the runs are not trivially equal to one another.
    assert alone[0]["samples"][-1] != alone[1]["samples"][-1]


def test_members_given_each_others_rewards_do_not_match_their_separate_runs(runs):
    root, alone = runs
    swapped = _population(root, [REWARDS[1], REWARDS[0], REWARDS[2]], "swapped")
    assert _mismatches(alone[0], swapped[0]) != []
    assert _mismatches(alone[1], swapped[1]) != []
    assert _mismatches(alone[2], swapped[2]) == []


def test_a_members_checkpoint_resumes_as_a_separate_run(runs):
    root, alone = runs
    member = root / "together-0"
    if not member.is_dir():  # the population of the first test, when this one runs alone
        _population(root, REWARDS, "together")
    longer = []
    for run_dir in (root / "alone-0", member):
        trainer.train(_config(run_dir, REWARDS[0], steps=STEPS + 1), resume=True)
        longer.append(_weights(run_dir / "checkpoints" / f"step-{STEPS + 1}"))
    for a, b in zip(*longer, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_prefix_sharing_changes_no_sample():
    model, tok = _model(1)
    sampler = FastSampler(model, {tok.eos_token_id, 40}, tok.pad_token_id)
    prompts = [[5, 6, 7]] * 4 + [[8, 9]] * 4 + [[10, 11, 12, 13]] * 4
    shared = sampler.sample(prompts, 12, seed=3)
    assert shared == sampler.sample(prompts, 12, seed=3, share_prefix=False)
    assert len({tuple(r) for r in shared}) > 3


def test_every_member_samples_what_its_model_samples_alone():
    models = [_model(seed) for seed in (0, 1, 2)]
    tok = models[0][1]
    population = Population.stack([m for m, _ in models])
    prompts = [[[5, 6, 7]] * 3 + [[8]] * 3, [[9, 10]] * 6, [[11, 12, 13, 14]] * 2 + [[15]] * 4]
    eos = {tok.eos_token_id, 100, 200, 300}
    sampling = SamplingConfig(max_new_tokens=16, temperature=1.0, top_p=0.9)
    alone = []
    for (model, _), rows, seed in zip(models, prompts, (7, 8, 9), strict=True):
        backend = TransformersBackend(model, tok, batch_size=4)
        backend.eos_ids = eos
        alone.append(backend.generate(rows, sampling,
                                      generator=torch.Generator().manual_seed(seed)))
    together = population.sample(prompts, 16, 1.0, eos, tok.pad_token_id, top_p=0.9,
                                 generators=[torch.Generator().manual_seed(s) for s in (7, 8, 9)],
                                 batch_size=4)
    assert together == alone
    assert len({len(row) for rows in alone for row in rows}) > 1, (
        "rows should end at different steps")
    # Members decoded in groups of at most 4 rows (one member a group) draw the same.
    assert population.sample(prompts, 16, 1.0, eos, tok.pad_token_id, top_p=0.9,
                             generators=[torch.Generator().manual_seed(s) for s in (7, 8, 9)],
                             batch_size=4, max_rows=4) == alone


@pytest.mark.numerics
@pytest.mark.parametrize("shared", [False, True], ids=["distinct-prompts", "group-prompts"])
def test_population_log_probs_and_gradients_equal_each_models(shared):
    models = [_model(seed)[0] for seed in (0, 1, 2)]
    population = Population.stack(models)
    ids = torch.randint(3, 500, (3, 4, 9))
    mask = torch.zeros(3, 4, 9)
    mask[:, :, 4:] = 1
    mask[1, 2, 7:] = 0
    if shared:  # rows 0-1 and 2-3 of each member continue one prompt (its length differs)
        ids[:, 1, :4] = ids[:, 0, :4]
        ids[:, 3, :3] = ids[:, 2, :3]
        mask[:, 2:, 3:] = 1
        mask[0, 3, 6:] = 0
        mask[1, 2, 7:] = 0
    assert (pop_trainer._shared_prompts(ids, mask) is not None) == shared
    logp, entropy = population_token_logprobs(population.weights, ids, mask, 0.7, True)
    (logp * mask).sum().backward()
    for m, model in enumerate(models):
        model.zero_grad()
        ref, ref_entropy = token_logprobs(model, ids[m], torch.ones_like(ids[m]),
                                          with_entropy=True, temperature=0.7, loss_mask=mask[m])
        (ref * mask[m]).sum().backward()
        terms = model.get_input_embeddings().num_embeddings  # the log-softmax's sum
        assert_close_reordered(logp[m], ref, terms)
        assert_close_reordered(entropy[m], ref_entropy, terms)
        for name, param in model.named_parameters():
            assert_close_reordered(population.params[name].grad[m], param.grad, terms,
                                   msg=name)


def test_a_bfloat16_population_computes_what_each_bfloat16_model_does():
    # GPU populations run in bfloat16; every norm then runs Qwen2RMSNorm's float32 path.
    models = [_model(seed)[0].to(torch.bfloat16) for seed in (0, 1)]
    population = Population.stack(models)
    ids = torch.randint(3, 500, (2, 3, 8))
    mask = torch.zeros(2, 3, 8)
    mask[:, :, 3:] = 1
    with torch.no_grad():
        logp, _ = population_token_logprobs(population.weights, ids, mask, 1.0, False)
        for m, model in enumerate(models):
            ref, _ = token_logprobs(model, ids[m], torch.ones_like(ids[m]), loss_mask=mask[m])
            torch.testing.assert_close(logp[m] * mask[m], ref * mask[m], rtol=0.02, atol=0.05)


def test_gradients_are_clipped_per_member():
    params = [torch.zeros(3, 4, 5, requires_grad=True), torch.zeros(3, 7, requires_grad=True)]
    grads = [torch.randn(3, 4, 5) * torch.tensor([0.01, 1.0, 10.0]).view(3, 1, 1),
             torch.randn(3, 7)]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    norms = clip_grad_norms(params, 1.0, 3)
    for m in range(3):
        alone = [torch.zeros_like(g[m], requires_grad=True) for g in grads]
        for p, g in zip(alone, grads, strict=True):
            p.grad = g[m].clone()
        norm = torch.nn.utils.clip_grad_norm_(alone, 1.0)
        torch.testing.assert_close(norms[m], norm)
        for p, q in zip(params, alone, strict=True):
            torch.testing.assert_close(p.grad[m], q.grad)


def _inner_jobs(tmp_path: Path, n: int) -> list[InnerJob]:
    return [InnerJob(i, compile_reward(expr, env=ENV), str(tmp_path / f"c{i}"))
            for i, expr in enumerate(REWARDS[:n])]


def test_which_recipes_train_as_populations(tmp_path):
    single = {"env_id": ENV, "model": "tiny", "steps": 1, "tensorboard": False}
    config = MetaConfig(method="random", inner=single, output_dir=str(tmp_path))
    assert [[j.index for j in u] for u in inner_groups(config, _inner_jobs(tmp_path, 3))] == [
        [0, 1, 2]]
    assert [[j.index for j in u] for u in inner_groups(config, _inner_jobs(tmp_path, 3),
                                                       parts=2)] == [[0, 1], [2]]
    apart = MetaConfig(method="random", inner=single, batch_inner=False)
    assert apart.batch_inner == "false"
    assert len(inner_groups(apart, _inner_jobs(tmp_path, 3))) == 3
    arithmetic = resolve_family(ENV)
    assert "trainer" in population_support(TrainConfig(env_id=ENV, trainer="trl"), arithmetic)
    assert "backend" in population_support(TrainConfig(env_id=ENV, backend="vllm"), arithmetic)
    assert "lora" in population_support(TrainConfig(env_id=ENV, lora={"r": 4}), arithmetic)
    agents = {**single, "env_id": "derl/ALFWorld-v0"}
    assert "multi-turn" in population_support(TrainConfig(**agents),
                                              resolve_family("derl/ALFWorld-v0"))
    auto = MetaConfig(method="random", inner=agents, output_dir=str(tmp_path))
    assert len(inner_groups(auto, _inner_jobs(tmp_path, 3))) == 3
    forced = MetaConfig(method="random", inner=agents, batch_inner="true")
    with pytest.raises(ExecutorError, match="multi-turn"):
        inner_groups(forced, _inner_jobs(tmp_path, 3))
    with pytest.raises(ConfigError, match="batch_inner"):
        MetaConfig(batch_inner="sometimes")
    with pytest.raises(ValueError, match="share their start model"):
        _train([_config(tmp_path / "a", "outcome"),
                replace(_config(tmp_path / "b", "outcome"), learning_rate=1.0)])


def _generation(tmp_path: Path, batch_inner: str) -> list[dict]:
    # The tiny model's initial weights follow the inner seed: one seed for every candidate
    # (inner_seeds: run) gives them one start model, so they can train as one population.
    config = MetaConfig(name="g", method="random", outer_steps=1, population=3,
                        validation_episodes=6, validation_temperature=1.0, seed=4,
                        inner_seeds="run",
                        inner={"env_id": ENV, "model": "tiny", "steps": 2, "group_size": 4,
                               "prompts_per_step": 2, "max_new_tokens": 8,
                               "learning_rate": 1e-2, "tensorboard": False},
                        output_dir=str(tmp_path / batch_inner), progress=False,
                        executor="local", batch_inner=batch_inner)
    return run_meta(config).candidates


def test_a_generation_scores_the_same_batched_or_not(tmp_path):
    together, apart = _generation(tmp_path, "true"), _generation(tmp_path, "false")
    assert not list((tmp_path / "true").rglob("*.error.log")), "the population must not fail"
    workers = {c["worker"] for c in together}
    assert len(workers) == 1 and all(c["seconds"] == together[0]["seconds"] for c in together), \
        "the three candidates trained as one population"
    for a, b in zip(together, apart, strict=True):
        assert a["expr"] == b["expr"] and a["status"] == b["status"] == "scored"
        assert a["score"] == b["score"] and a["validation"] == b["validation"]
        assert a["train_reward"] == pytest.approx(b["train_reward"], rel=1e-5)
        assert Path(a["checkpoint"]).relative_to(tmp_path / "true") == Path(
            b["checkpoint"]).relative_to(tmp_path / "false")
        assert (Path(a["checkpoint"]) / "config.json").is_file()
        metrics = [json.loads(line) for line in
                   (Path(a["run"]) / "metrics.jsonl").read_text().splitlines()]
        assert len(metrics) == 2


def test_a_failed_population_reruns_its_jobs_separately(tmp_path, monkeypatch):
    import derl_bench.meta.workers as workers

    def broken(config, runs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(workers, "train_and_score_population", broken)
    candidates = _generation(tmp_path, "auto")
    assert all(c["status"] == "scored" and "retried_after" not in c for c in candidates)
    logs = sorted((tmp_path / "auto" / "inner").glob("*.error.log"))
    assert len(logs) == 3 and all("out of memory" in log.read_text() for log in logs)


def test_a_generations_checkpoints_keep_weights_but_no_optimiser_state(tmp_path):
    # A finished inner run is never resumed: its AdamW moments (twice the weights) are dropped,
    # and a resume of such a run says why it cannot.
    candidate = _generation(tmp_path, "true")[0]
    checkpoint = Path(candidate["checkpoint"])
    state = load_trainer_state(checkpoint)
    assert state["optimizer"] is None and state["step"] == 2 and "torch" in state["rng"]
    saved = yaml.safe_load((Path(candidate["run"]) / "config.yaml").read_text())
    config = replace(config_from_dict(saved), steps=3)
    with pytest.raises(ConfigError, match="no optimiser state"):
        trainer.train(config, resume=True)
