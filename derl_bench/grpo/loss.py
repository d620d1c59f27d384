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

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

LOGPROB_CHUNK = 1024
"""Token positions whose vocabulary-wide logits exist at once when log-probs are computed
from hidden states (:func:`chunked_logprobs`): at Qwen2.5's 151,936 entries, 1024 positions
are 0.6 GB of float32 logits, whatever the batch."""


@dataclass
class LossOutput:
    """The loss to back-propagate and detached statistics to log."""

    loss: torch.Tensor
    policy_loss: float
    kl: float
    clip_fraction: float
    ratio_mean: float


def masked_mean(values: torch.Tensor, mask: torch.Tensor,
                dim: tuple[int, ...] | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when nothing is unmasked), over ``dim``
    (default: every axis)."""
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, aggregation: str) -> torch.Tensor:
    """The loss of a batch ``(N, T)`` from its per-token losses (module docstring): the mean
    over unmasked tokens, or over sequences of their token means. Leading axes (a
    population's) are kept: ``(P, N, T) -> (P,)``."""
    check_aggregation(aggregation)
    if aggregation == "token":
        return masked_mean(per_token, mask, (-2, -1))
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    has = (mask.sum(-1) > 0).to(per_seq.dtype)
    return (per_seq * has).sum(-1) / has.sum(-1).clamp(min=1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference) from sampled tokens' log-probs."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def token_terms(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                ref_logp: torch.Tensor | None = None, clip_eps: float = 0.2,
                clip_eps_high: float | None = None, kl_coef: float = 0.0,
                ) -> dict[str, torch.Tensor]:
    """The loss of every token (module docstring), before aggregation: ``loss`` (policy + KL),
    ``policy``, ``kl``, ``ratio`` and ``clipped`` (where the clip bound set the objective).

    ``advantages`` has one value per sequence (the shape of ``logp`` without its last axis,
    broadcast to its tokens) or one per token; any leading axes (a population's) pass through.
    """
    adv = advantages.to(logp.dtype)
    if adv.dim() < logp.dim():
        adv = adv.unsqueeze(-1)
    ratio = torch.exp(logp - old_logp)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + high)
    policy = -torch.minimum(ratio * adv, clipped * adv)
    per_token = policy
    kl = torch.zeros_like(logp)
    if ref_logp is not None and kl_coef != 0.0:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + kl_coef * kl
    with torch.no_grad():
        was_clipped = (clipped * adv) < (ratio * adv)
    return {"loss": per_token, "policy": policy, "kl": kl, "ratio": ratio,
            "clipped": was_clipped.to(logp.dtype)}


def check_aggregation(aggregation: str) -> None:
    """Reject an unknown ``aggregation``."""
    if aggregation not in ("token", "sequence"):
        raise ValueError(f"aggregation must be 'token' or 'sequence', got {aggregation!r}")


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, ref_logp: torch.Tensor | None = None, clip_eps: float = 0.2,
              clip_eps_high: float | None = None, kl_coef: float = 0.0,
              aggregation: str = "token") -> LossOutput:
    """GRPO loss for a batch (see the module docstring).

    ``logp``, ``old_logp``, ``ref_logp`` and ``mask`` are ``(N, T)``; ``advantages`` is ``(N,)``
    (one value per sequence, broadcast to its tokens) or ``(N, T)``.
    """
    check_aggregation(aggregation)
    mask = mask.to(logp.dtype)
    terms = token_terms(logp, old_logp, advantages, ref_logp, clip_eps, clip_eps_high, kl_coef)
    loss = aggregate(terms["loss"], mask, aggregation)
    with torch.no_grad():
        stats = LossOutput(
            loss=loss,
            policy_loss=float(masked_mean(terms["policy"], mask)),
            kl=float(masked_mean(terms["kl"], mask)),
            clip_fraction=float(masked_mean(terms["clipped"], mask)),
            ratio_mean=float(masked_mean(terms["ratio"], mask)),
        )
    return stats


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                    with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of ``targets`` under ``logits`` (last axis: the vocabulary) at the
    sampling ``temperature``, and the entropy of each distribution (no gradient) when asked."""
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
    return picked, ent


def chunked_logprobs(head: Callable[[torch.Tensor], torch.Tensor], states: torch.Tensor,
                     targets: torch.Tensor, temperature: float = 1.0,
                     with_entropy: bool = False, chunk_size: int = LOGPROB_CHUNK,
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`target_logprobs` of ``head(states)``, ``chunk_size`` positions at a time.

    ``states`` is ``(..., M, hidden)`` and ``targets`` ``(..., M)``; positions (axis -2 of
    ``states``) are cut into chunks, so the ``(..., M, V)`` logits never exist whole: each
    chunk's logits are made, reduced to one log-prob (and entropy) per position, and dropped.
    With gradients on, each chunk is checkpointed: the backward pass makes that chunk's logits
    again (one more output projection) instead of keeping every chunk's. ``M <= chunk_size``
    runs as one block, exactly as :func:`target_logprobs` of the whole.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    length = states.shape[-2]
    if length <= chunk_size:
        return target_logprobs(head(states), targets, temperature, with_entropy)
    recomputing: set[int] = set()

    def piece(start: int, part: torch.Tensor, picked_targets: torch.Tensor,
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # The backward pass runs this again for the gradient; the entropy (no gradient) was
        # kept from the first run, so the second skips it.
        again = start in recomputing
        recomputing.add(start)
        return target_logprobs(head(part), picked_targets, temperature,
                               with_entropy and not again)

    picked, entropy = [], []
    for start in range(0, length, chunk_size):
        part = states[..., start:start + chunk_size, :]
        part_targets = targets[..., start:start + chunk_size]
        if torch.is_grad_enabled():
            p, e = checkpoint(piece, start, part, part_targets, use_reentrant=False)
        else:
            p, e = piece(start, part, part_targets)
        picked.append(p)
        if e is not None:
            entropy.append(e)
    return torch.cat(picked, -1), torch.cat(entropy, -1) if with_entropy else None


def token_logprobs(model: torch.nn.Module, input_ids: torch.Tensor,
                   attention_mask: torch.Tensor, with_entropy: bool = False,
                   temperature: float = 1.0, loss_mask: torch.Tensor | None = None,
                   chunk_size: int = LOGPROB_CHUNK, recompute: bool = False,
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of each token given the ones before it, shape ``(N, T)``.

    Position 0 has no prediction and gets 0 (it is always a prompt token, so masked). The
    logits are divided by the sampling ``temperature`` first, as TRL and veRL do, so the ratio
    compares the distribution the tokens were actually drawn from. With ``with_entropy`` also
    returns the entropy of each predictive distribution (no gradient). Computed as
    ``logit[token] - logsumexp(logits)`` so no full log-softmax is kept for the backward pass.

    Right-padded rows of a Qwen2/Llama-shaped model take the lean forward pass of
    :mod:`derl_bench.policies.fast`, and with a ``loss_mask`` the output projection runs only on
    the positions the loss reads (elsewhere the result is 0), ``chunk_size`` positions at a
    time (:func:`chunked_logprobs`), and ``recompute`` keeps only each decoder layer's input
    for the backward pass (the layer runs again there); any other model runs its own forward
    on every position and holds its whole logits.
    """
    from derl_bench.policies.fast import causal_hidden, lm_head, supports

    targets = input_ids[:, 1:]
    right_padded = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    if right_padded and supports(model):
        hidden = causal_hidden(model, input_ids, recompute)[:, :-1]
        where = loss_mask[:, 1:] > 0 if loss_mask is not None else None
        states = hidden[where] if where is not None else hidden.flatten(0, 1)
        flat_targets = targets[where] if where is not None else targets.flatten()
        picked, ent = chunked_logprobs(lambda h: lm_head(model, h), states, flat_targets,
                                       temperature, with_entropy, chunk_size)
        if where is None:
            picked = picked.view(targets.shape)
            ent = None if ent is None else ent.view(targets.shape)
    else:
        where = None
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        picked, ent = target_logprobs(logits, targets, temperature, with_entropy)
    if where is not None:
        full = picked.new_zeros(where.shape)
        picked = full.masked_scatter(where, picked)
        if ent is not None:
            ent = full.detach().masked_scatter(where, ent)
    out = torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)
    entropy = None if ent is None else torch.cat([torch.zeros_like(ent[:, :1]), ent], dim=1)
    return out, entropy
