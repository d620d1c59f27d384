"""Log-probs computed a chunk of positions at a time equal the whole-vocabulary computation.

Chunk sizes that do not divide the number of positions (and a chunk of 1) leave a last, short
chunk, so a chunk placed at the wrong offset puts a log-prob at the wrong position and the
comparison fails. Only the order of the sums differs between the two computations, so they
are compared at the tolerance that order allows (``tests/numerics.py``), not at one machine's.
"""

from __future__ import annotations

import copy

import pytest
import torch

from derl_bench.grpo import TrainConfig
from derl_bench.grpo.config import ConfigError
from derl_bench.grpo.loss import chunked_logprobs, grpo_loss, target_logprobs, token_logprobs
from derl_bench.grpo.population import population_token_logprobs
from derl_bench.grpo.update import UpdateSettings, grpo_update
from derl_bench.policies.population import Population
from derl_bench.policies.tiny import TinyModelSpec, build_tiny_model, build_tiny_tokenizer
from derl_bench.rollout import Episode, Step, collate
from tests.numerics import assert_close_reordered

WHOLE = 10**9


def _model(seed: int = 0):
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, TinyModelSpec(seed=seed))
    with torch.no_grad():  # varied predictions, so a misplaced position shows
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.mul_(6.0)
    return model, tokenizer


def _terms(model) -> int:
    """The longest sum behind a log-prob or a gradient: the log-softmax over the vocabulary."""
    return model.get_input_embeddings().num_embeddings


def _batch(tok):
    episodes = [
        Episode(0, 0, [Step([5, 6, 7, 8], [9, 10], "", "", {})]),
        Episode(0, 1, [Step([5, 6], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23], "", "",
                            {})]),
        Episode(1, 2, [Step([30, 31, 32], [33, 34, 35, 36, 37], "", "", {})]),
    ]
    return collate(episodes, [1.0, -0.5, 0.7], tok.pad_token_id)


@pytest.mark.numerics
@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_chunks_give_the_whole_log_probs_entropy_and_gradients(chunk):
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    states = torch.randn(2, 17, 8, requires_grad=True)
    targets = torch.randint(0, 50, (2, 17))
    upstream = torch.randn(2, 17)
    whole, whole_entropy = target_logprobs(head(states), targets, 0.7, True)
    (whole * upstream).sum().backward()
    expected = states.grad.clone(), head.weight.grad.clone()
    states.grad, head.weight.grad = None, None
    picked, entropy = chunked_logprobs(head, states, targets, 0.7, True, chunk)
    (picked * upstream).sum().backward()
    terms = head.out_features  # the log-softmax over the 50 outputs
    assert_close_reordered(picked, whole, terms)
    assert entropy is not None and whole_entropy is not None
    assert_close_reordered(entropy, whole_entropy, terms)
    assert_close_reordered(states.grad, expected[0], terms)
    assert_close_reordered(head.weight.grad, expected[1], terms)


def test_a_chunk_size_below_one_is_refused():
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_logprobs(torch.nn.Identity(), torch.zeros(3, 4), torch.zeros(3, dtype=torch.long),
                         chunk_size=0)
    with pytest.raises(ConfigError, match="logprob_chunk"):
        TrainConfig(logprob_chunk=0)


@pytest.mark.numerics
@pytest.mark.parametrize("masked", [True, False], ids=["loss-mask", "every-position"])
def test_chunked_grpo_loss_and_gradients_equal_the_whole(masked):
    model, tok = _model(seed=3)
    batch = _batch(tok)
    ref_logp = torch.randn(batch.loss_mask.shape) - 3.0
    results = []
    for chunk in (WHOLE, 4):
        model.zero_grad()
        logp, entropy = token_logprobs(model, batch.input_ids, batch.attention_mask,
                                       with_entropy=True, temperature=0.7,
                                       loss_mask=batch.loss_mask if masked else None,
                                       chunk_size=chunk)
        out = grpo_loss(logp, logp.detach() - 0.1, batch.advantages, batch.loss_mask,
                        ref_logp=ref_logp, kl_coef=0.05)
        out.loss.backward()
        results.append((logp, entropy, out,
                        {n: p.grad.clone() for n, p in model.named_parameters()}))
    (logp_a, ent_a, out_a, grads_a), (logp_b, ent_b, out_b, grads_b) = results
    terms = _terms(model)
    assert_close_reordered(logp_b, logp_a, terms)
    assert_close_reordered(ent_b, ent_a, terms)
    assert_close_reordered(out_b.loss, out_a.loss, terms)
    assert out_b.kl == pytest.approx(out_a.kl) and out_a.kl > 0
    for name, grad in grads_a.items():
        assert_close_reordered(grads_b[name], grad, terms, msg=name)


@pytest.mark.numerics
def test_an_update_with_small_chunks_trains_the_same_weights():
    model, tok = _model(seed=5)
    batch = _batch(tok)
    reference = copy.deepcopy(model)
    after = []
    for chunk in (WHOLE, 5):
        trained = copy.deepcopy(model)
        optimizer = torch.optim.SGD(trained.parameters(), lr=0.1)
        stats = grpo_update(trained, optimizer, batch, UpdateSettings(
            kl_coef=0.05, updates_per_batch=2, micro_batch_size=2, logprob_chunk=chunk),
            reference=reference)
        after.append((stats, dict(trained.named_parameters())))
    (stats_a, params_a), (stats_b, params_b) = after
    terms = _terms(model)
    for key in ("loss", "kl", "entropy", "grad_norm"):
        assert_close_reordered(torch.tensor(stats_b[key]), torch.tensor(stats_a[key]), terms,
                               msg=key)
    for name, param in params_a.items():
        assert_close_reordered(params_b[name], param, terms, msg=name)
    assert any(not torch.equal(p, dict(model.named_parameters())[n])
               for n, p in params_a.items())


@pytest.mark.numerics
@pytest.mark.parametrize("shared", [False, True], ids=["distinct-prompts", "group-prompts"])
def test_chunked_population_log_probs_and_gradients_equal_the_whole(shared):
    models = [_model(seed)[0] for seed in (0, 1)]
    torch.manual_seed(1)
    ids = torch.randint(3, 500, (2, 3, 10))
    mask = torch.zeros(2, 3, 10)
    mask[:, :, 4:] = 1
    mask[1, 2, 8:] = 0
    if shared:
        ids[:, 1, :4] = ids[:, 0, :4]
    results = []
    for chunk in (WHOLE, 7):  # 3 positions of each member's a chunk
        population = Population.stack(models)
        logp, entropy = population_token_logprobs(population.weights, ids, mask, 0.7, True,
                                                  chunk_size=chunk)
        (logp * mask * torch.linspace(-1, 1, 10)).sum().backward()
        results.append((logp, entropy, [p.grad.clone() for p in population.parameters()]))
    (logp_a, ent_a, grads_a), (logp_b, ent_b, grads_b) = results
    terms = _terms(models[0])
    assert_close_reordered(logp_b, logp_a, terms)
    assert_close_reordered(ent_b, ent_a, terms)
    for grad_b, grad_a in zip(grads_b, grads_a, strict=True):
        assert_close_reordered(grad_b, grad_a, terms)


@pytest.mark.numerics
def test_recomputed_layers_give_the_same_loss_and_gradients():
    model, tok = _model(seed=6)
    batch = _batch(tok)
    results = []
    for recompute in (False, True):
        model.zero_grad()
        logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask,
                                 loss_mask=batch.loss_mask, chunk_size=4, recompute=recompute)
        out = grpo_loss(logp, logp.detach() - 0.1, batch.advantages, batch.loss_mask)
        out.loss.backward()
        results.append((out.loss.detach(), {n: p.grad.clone()
                                            for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    terms = _terms(model)
    assert_close_reordered(loss_b, loss_a, terms)
    for name, grad in grads_a.items():
        assert_close_reordered(grads_b[name], grad, terms, msg=name)


@pytest.mark.numerics
@pytest.mark.parametrize("shared", [False, True], ids=["distinct-prompts", "group-prompts"])
def test_recomputed_population_layers_give_the_same_gradients(shared):
    models = [_model(seed)[0] for seed in (0, 1)]
    torch.manual_seed(2)
    ids = torch.randint(3, 500, (2, 3, 10))
    mask = torch.zeros(2, 3, 10)
    mask[:, :, 4:] = 1
    if shared:
        ids[:, 1, :4] = ids[:, 0, :4]
    results = []
    for recompute in (False, True):
        population = Population.stack(models)
        logp, _ = population_token_logprobs(population.weights, ids, mask, 1.0, False,
                                            recompute=recompute)
        (logp * mask * torch.linspace(-1, 1, 10)).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in population.parameters()]))
    (logp_a, grads_a), (logp_b, grads_b) = results
    terms = _terms(models[0])
    assert_close_reordered(logp_b, logp_a, terms)
    for grad_b, grad_a in zip(grads_b, grads_a, strict=True):
        assert_close_reordered(grad_b, grad_a, terms)


def _saved_bytes(model, batch, **options) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of one loss."""
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask,
                                 loss_mask=batch.loss_mask, **options)
    return total


def test_chunks_and_recomputed_layers_keep_less_for_the_backward_pass():
    model, tok = _model(seed=7)
    batch = _batch(tok)
    whole = _saved_bytes(model, batch, chunk_size=WHOLE)
    chunked = _saved_bytes(model, batch, chunk_size=4)
    recomputed = _saved_bytes(model, batch, chunk_size=4, recompute=True)
    assert recomputed < chunked < whole
