"""The GRPO loss, shared by math and agents: clipped ratio, k3 KL to a reference, masking.

For every completion token ``t`` with log-probabilities ``logp`` (current policy), ``old``
(the policy that sampled) and ``ref`` (the frozen reference), and the sample's advantage ``A``::

    ratio   = exp(logp - old)
    policy  = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
    kl_k3   = exp(ref - logp) - (ref - logp) - 1          # >= 0, unbiased, low variance
    loss_t  = policy + kl_coef * kl_k3

``mask`` is 1 on tokens the policy generated and 0 on prompt, env and padding tokens.
Aggregation is token-level (DAPO): the sum over all unmasked tokens of the batch divided by their
count, so long and short responses weigh each token the same. ``"sequence"`` averages within each
sequence first (the original GRPO).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossOutput:
    """The loss to back-propagate and detached statistics to log."""

    loss: torch.Tensor
    policy_loss: float
    kl: float
    clip_fraction: float
    ratio_mean: float


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when nothing is unmasked)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference) from sampled tokens' log-probs."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, ref_logp: torch.Tensor | None = None, clip_eps: float = 0.2,
              clip_eps_high: float | None = None, kl_coef: float = 0.0,
              aggregation: str = "token") -> LossOutput:
    """GRPO loss for a batch (see the module docstring).

    ``logp``, ``old_logp``, ``ref_logp`` and ``mask`` are ``(N, T)``; ``advantages`` is ``(N,)``
    (one value per sequence, broadcast to its tokens) or ``(N, T)``.
    """
    if aggregation not in ("token", "sequence"):
        raise ValueError(f"aggregation must be 'token' or 'sequence', got {aggregation!r}")
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    policy_per_token = per_token
    kl = torch.zeros_like(logp)
    if ref_logp is not None and kl_coef != 0.0:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + kl_coef * kl
    if aggregation == "token":
        loss = masked_mean(per_token, mask)
    else:
        per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        loss = per_seq[mask.sum(1) > 0].mean() if (mask.sum(1) > 0).any() else per_seq.sum() * 0
    with torch.no_grad():
        was_clipped = (clipped * adv) < (ratio * adv)  # the clip bound set the objective
        stats = LossOutput(
            loss=loss,
            policy_loss=float(masked_mean(policy_per_token, mask)),
            kl=float(masked_mean(kl, mask)),
            clip_fraction=float(masked_mean(was_clipped.to(logp.dtype), mask)),
            ratio_mean=float(masked_mean(ratio, mask)),
        )
    return stats


def token_logprobs(model: torch.nn.Module, input_ids: torch.Tensor,
                   attention_mask: torch.Tensor, with_entropy: bool = False,
                   temperature: float = 1.0, loss_mask: torch.Tensor | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of each token given the ones before it, shape ``(N, T)``.

    Position 0 has no prediction and gets 0 (it is always a prompt token, so masked). The
    logits are divided by the sampling ``temperature`` first, as TRL and veRL do, so the ratio
    compares the distribution the tokens were actually drawn from. With ``with_entropy`` also
    returns the entropy of each predictive distribution (no gradient). Computed as
    ``logit[token] - logsumexp(logits)`` so no full log-softmax is kept for the backward pass.

    Right-padded rows of a Qwen2/Llama-shaped model take the lean forward pass of
    :mod:`derl_bench.policies.fast`, and with a ``loss_mask`` the output projection runs only on
    the positions the loss reads (elsewhere the result is 0); any other model runs its own
    forward on every position.
    """
    from derl_bench.policies.fast import causal_hidden, lm_head, supports

    targets = input_ids[:, 1:]
    right_padded = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    if right_padded and supports(model):
        hidden = causal_hidden(model, input_ids)[:, :-1]
        if loss_mask is not None:
            where = loss_mask[:, 1:] > 0
            logits = lm_head(model, hidden[where])
            targets = targets[where]
        else:
            where = None
            logits = lm_head(model, hidden)
    else:
        where = None
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    normaliser = torch.logsumexp(logits, -1)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - normaliser
    ent = None
    if with_entropy:
        with torch.no_grad():
            detached = logits.detach()
            ent = normaliser.detach() - (detached.softmax(-1) * detached).sum(-1)
    if where is not None:
        full = picked.new_zeros(where.shape)
        picked = full.masked_scatter(where, picked)
        if ent is not None:
            ent = full.detach().masked_scatter(where, ent)
    out = torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)
    entropy = None if ent is None else torch.cat([torch.zeros_like(ent[:, :1]), ent], dim=1)
    return out, entropy
