"""The shared GRPO loss: clipping, k3 KL, masking, aggregation."""

from __future__ import annotations

import pytest
import torch

from derl_bench.grpo import grpo_loss, k3_kl, token_logprobs


def test_on_policy_gradient_raises_good_tokens_and_lowers_bad():
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]])).requires_grad_()
    out = grpo_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), torch.ones(2, 2))
    out.loss.backward()
    # Descending the loss raises logp where the advantage is positive.
    assert (logp.grad[0] < 0).all() and (logp.grad[1] > 0).all()
    assert out.clip_fraction == 0.0 and out.ratio_mean == pytest.approx(1.0)


def test_masked_tokens_get_no_gradient_and_no_weight():
    logp = torch.zeros(1, 4, requires_grad=True)
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    out = grpo_loss(logp, torch.zeros(1, 4), torch.tensor([2.0]), mask)
    out.loss.backward()
    assert logp.grad[0, :2].tolist() == [0.0, 0.0]
    assert logp.grad[0, 2:].tolist() == pytest.approx([-1.0, -1.0])  # -A / n_tokens


def test_ratio_is_clipped_in_the_direction_of_the_advantage():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5]])).requires_grad_()
    out = grpo_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2)
    out.loss.backward()
    # Token 0 (ratio 1.5 > 1.2, positive advantage) is clipped: no gradient; token 1 is not.
    assert logp.grad[0, 0] == 0.0 and logp.grad[0, 1] != 0.0
    assert out.clip_fraction == pytest.approx(0.5)
    assert out.loss.item() == pytest.approx(-(1.2 + 0.5) / 2)


def test_k3_is_non_negative_and_zero_at_the_reference():
    logp, ref = torch.randn(64), torch.randn(64)
    assert (k3_kl(logp, ref) >= 0).all()
    assert k3_kl(ref, ref).abs().max() == 0.0


def test_kl_term_pulls_toward_the_reference():
    logp = torch.tensor([[-0.5]], requires_grad=True)
    ref = torch.tensor([[-1.0]])
    out = grpo_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 1), ref_logp=ref,
                    kl_coef=0.1)
    out.loss.backward()
    assert out.kl > 0 and logp.grad.item() > 0  # descending lowers logp toward ref


def test_token_and_sequence_aggregation_differ_on_ragged_lengths():
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, 0.0])
    token = grpo_loss(logp, logp, adv, mask, aggregation="token").loss.item()
    seq = grpo_loss(logp, logp, adv, mask, aggregation="sequence").loss.item()
    assert token == pytest.approx(-1 / 4) and seq == pytest.approx(-1 / 2)
    with pytest.raises(ValueError):
        grpo_loss(logp, logp, adv, mask, aggregation="mean")


def test_token_logprobs_match_a_manual_softmax():
    torch.manual_seed(0)
    model = torch.nn.Module()
    embed = torch.nn.Embedding(7, 7)

    class Out:
        def __init__(self, logits):
            self.logits = logits

    model.forward = lambda input_ids, attention_mask: Out(embed(input_ids))
    ids = torch.tensor([[1, 3, 5, 2]])
    logp, ent = token_logprobs(model, ids, torch.ones_like(ids), with_entropy=True)
    probs = torch.softmax(embed(ids)[0, :-1], -1)
    assert logp[0, 0] == 0.0
    assert logp[0, 1:].tolist() == pytest.approx(torch.log(probs[range(3), ids[0, 1:]]).tolist(),
                                                 abs=1e-5)
    assert (ent[0, 1:] > 0).all()
