"""One GRPO update of a batch, shared by the inner trainer and the Meta-Optimizer.

A batch (:class:`~derl_bench.rollout.batch.TrainBatch`) is cut into micro-batches; each gets
exactly one forward and one backward pass. What is computed once per batch, and only when it
matters:

- reference log-probs, only when ``kl_coef > 0``;
- the sampler's ("old") log-probs, only with more than one update per batch. With a single
  on-policy update the sampler *is* the current policy, so the detached current log-probs are
  the old ones (ratio 1) and no extra forward pass is needed.

Micro-batch losses are weighted so that their sum is the loss of the whole batch: by the share
of completion tokens for ``aggregation="token"``, by the share of rows for ``"sequence"`` (every
sequence weighs the same whatever micro-batch it lands in).

    >>> import torch
    >>> mask = torch.tensor([[1., 1., 0.], [1., 1., 1.]])
    >>> (round(micro_batch_weight(mask[:1], mask, "token"), 6),
    ...  micro_batch_weight(mask[:1], mask, "sequence"))
    (0.4, 0.5)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from derl_bench.grpo.loss import LOGPROB_CHUNK, grpo_loss, token_logprobs


class DivergedError(RuntimeError):
    """Training diverged: an update met a loss or gradient norm that is not finite (and was not
    applied), or left a weight that is not (a learning rate far too large, say)."""


def nonfinite_weight(model: Any) -> str | None:
    """The name of ``model``'s first trained weight holding a value that is not finite (inf or
    NaN), else None."""
    for name, param in model.named_parameters():
        if param.requires_grad and not bool(torch.isfinite(param).all()):
            return name
    return None


@dataclass(frozen=True)
class UpdateSettings:
    """The loss and optimiser settings of an update (a subset of ``TrainConfig``)."""

    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    kl_coef: float = 0.0
    aggregation: str = "token"
    updates_per_batch: int = 1
    micro_batch_size: int = 16
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    logprob_chunk: int = LOGPROB_CHUNK
    recompute_activations: bool = False


def micro_batch_weights(mask: torch.Tensor, batch_mask: torch.Tensor,
                        aggregation: str) -> torch.Tensor:
    """The weight of a micro-batch's mean loss in the batch's loss (see the module docstring),
    over the last two axes: one per member of a population ``(P, N, T) -> (P,)``."""
    if aggregation == "token":
        return mask.sum((-2, -1)) / batch_mask.sum((-2, -1)).clamp(min=1)
    rows = (mask.sum(-1) > 0).sum(-1)
    return rows / (batch_mask.sum(-1) > 0).sum(-1).clamp(min=1)


def micro_batch_weight(mask: torch.Tensor, batch_mask: torch.Tensor, aggregation: str) -> float:
    """The weight of a micro-batch's mean loss in the batch's loss (see the module docstring)."""
    return float(micro_batch_weights(mask, batch_mask, aggregation))


def batch_logprobs(model: Any, batch: Any, micro_batch_size: int,
                   temperature: float = 1.0, chunk_size: int = LOGPROB_CHUNK) -> torch.Tensor:
    """Detached log-probs of every row of ``batch``, padded to the batch width."""
    out = torch.zeros_like(batch.loss_mask)
    with torch.no_grad():
        for start in range(0, len(batch), micro_batch_size):
            mb = batch.slice(slice(start, start + micro_batch_size))
            logp, _ = token_logprobs(model, mb.input_ids, mb.attention_mask,
                                     temperature=temperature, loss_mask=mb.loss_mask,
                                     chunk_size=chunk_size)
            out[start:start + micro_batch_size, :logp.shape[1]] = logp
    return out


def grpo_update(model: Any, optimizer: torch.optim.Optimizer, batch: Any,
                settings: UpdateSettings, reference: Any | None = None) -> dict[str, float]:
    """Run ``settings.updates_per_batch`` optimiser steps on ``batch``; returns mean statistics
    (loss, policy_loss, kl, clip_fraction, entropy, grad_norm) and ``reference_s``, the
    seconds spent on reference and old log-probs. A loss or gradient norm that is not finite
    raises :class:`DivergedError` before the optimiser steps on it."""
    s = settings
    use_kl = reference is not None and s.kl_coef > 0
    started = time.perf_counter()
    old_logp = (batch_logprobs(model, batch, s.micro_batch_size, s.temperature,
                               s.logprob_chunk)
                if s.updates_per_batch > 1 else None)
    ref_logp = (batch_logprobs(reference, batch, s.micro_batch_size, s.temperature,
                               s.logprob_chunk)
                if use_kl else None)
    sums = dict.fromkeys(("loss", "policy_loss", "kl", "clip_fraction", "entropy",
                          "grad_norm"), 0.0)
    sums["reference_s"] = time.perf_counter() - started
    model.train()
    for _ in range(s.updates_per_batch):
        optimizer.zero_grad(set_to_none=True)
        for start in range(0, len(batch), s.micro_batch_size):
            rows = slice(start, start + s.micro_batch_size)
            mb = batch.slice(rows)
            width = mb.input_ids.shape[1]
            logp, entropy = token_logprobs(model, mb.input_ids, mb.attention_mask,
                                           with_entropy=True, temperature=s.temperature,
                                           loss_mask=mb.loss_mask, chunk_size=s.logprob_chunk,
                                           recompute=s.recompute_activations)
            out = grpo_loss(
                logp, old_logp[rows, :width] if old_logp is not None else logp.detach(),
                mb.advantages, mb.loss_mask,
                ref_logp=ref_logp[rows, :width] if ref_logp is not None else None,
                clip_eps=s.clip_eps, clip_eps_high=s.clip_eps_high,
                kl_coef=s.kl_coef if use_kl else 0.0, aggregation=s.aggregation,
            )
            weight = micro_batch_weight(mb.loss_mask, batch.loss_mask, s.aggregation)
            (out.loss * weight).backward()
            share = weight / s.updates_per_batch
            sums["loss"] += float(out.loss.detach()) * share
            sums["policy_loss"] += out.policy_loss * share
            sums["kl"] += out.kl * share
            sums["clip_fraction"] += out.clip_fraction * share
            ent = float((entropy * mb.loss_mask).sum() / mb.loss_mask.sum().clamp(min=1))
            sums["entropy"] += ent * share
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm,
                                                   foreach=True)
        if not (math.isfinite(sums["loss"]) and math.isfinite(float(grad_norm))):
            # A step on such gradients writes NaN into every weight it touches.
            raise DivergedError(f"the loss is {sums['loss']:.4g} and the gradient norm "
                                f"{float(grad_norm):.4g}")
        sums["grad_norm"] += float(grad_norm) / s.updates_per_batch
        optimizer.step()
    return sums


def make_optimizer(model: Any, learning_rate: float, weight_decay: float = 0.0,
                   ) -> torch.optim.Optimizer:
    """AdamW over the model's parameters, with the multi-tensor kernels: a small model has
    many small tensors, and one fused pass over all of them beats a loop of tiny updates."""
    return torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay,
                             foreach=True)


__all__ = ["DivergedError", "UpdateSettings", "batch_logprobs", "grpo_update", "make_optimizer",
           "micro_batch_weight", "micro_batch_weights", "nonfinite_weight"]
