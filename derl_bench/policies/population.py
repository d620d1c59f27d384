"""A population of same-shaped Qwen2/Llama decoders run as one stacked model.

Reward discovery trains ``P`` policies at once, one per candidate Meta-Reward, all from the
same model. Stacked, the ``P`` models pay each op's call (or kernel launch) overhead once
instead of ``P`` times: a gain where ops are small, as when decoding a few rows, and little
where one member's batch already keeps the processor busy. :class:`Population`
holds every parameter with a leading population axis ``[P, ...]`` (leaf tensors an optimiser
steps directly) and runs the lean path of :mod:`derl_bench.policies.fast` through
:class:`StackedWeights`, whose linear maps are batched matrix products (``torch.baddbmm``):

- :func:`population_hidden` — final hidden states of ``[P, N, T]`` right-padded rows
  (training), differentiable;
- :meth:`Population.sample` — each member samples its own prompts with its own generator,
  drawing exactly the uniforms it would draw sampled alone by
  :class:`~derl_bench.policies.fast.FastSampler` (same prompts and seeds: same samples);
- :meth:`Population.member` — member ``m``'s weights in an HF model, ready for
  ``save_pretrained``.

Attention, norms and sampling act per row, so rows of all members form one batch; only the
weight products are per member.

    >>> from derl_bench.policies.tiny import build_tiny_model, build_tiny_tokenizer
    >>> tok = build_tiny_tokenizer()
    >>> model = build_tiny_model(tok)
    >>> population = Population.replicate(model, 3)
    >>> population.size, tuple(population.params["model.norm.weight"].shape)
    (3, (3, 64))
    >>> rows = population.sample([[[5, 6, 7]]] * 3, max_new_tokens=4, temperature=0.0,
    ...                          eos_ids={tok.eos_token_id}, pad_id=tok.pad_token_id)
    >>> rows[0] == rows[1] == rows[2]
    True
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from derl_bench.policies.backends import GENERATION_BATCH
from derl_bench.policies.fast import Weights, hidden_states, sample_rows, supports


class StackedWeights(Weights):
    """The operations of :class:`~derl_bench.policies.fast.Weights` for ``members`` models
    whose parameters are stacked along a leading axis; a batch's rows are member-major (the
    first ``rows / members`` belong to member 0, and so on)."""

    def __init__(self, model: Any, named: Mapping[str, torch.Tensor], members: int) -> None:
        super().__init__(model, named)
        self.members = members

    def _by_member(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.members, -1, x.shape[-1])

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        if self.embed.stride(0) == 0:  # one table viewed by every member (a shared reference)
            return F.embedding(ids, self.embed[0])
        vocab = self.embed.shape[1]
        offsets = torch.arange(self.members, device=ids.device).repeat_interleave(
            ids.shape[0] // self.members) * vocab
        flat = self.embed.reshape(self.members * vocab, self.embed.shape[-1])
        return F.embedding(ids + offsets.view(-1, *([1] * (ids.dim() - 1))), flat)

    def linear(self, x: torch.Tensor, weight: torch.Tensor,
               bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = self._by_member(x)
        out = (torch.bmm(rows, weight.transpose(1, 2)) if bias is None else
               torch.baddbmm(bias.unsqueeze(1), rows, weight.transpose(1, 2)))
        return out.reshape(*x.shape[:-1], weight.shape[1])

    def norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rows = self._by_member(x)
        if rows.dtype == torch.float32:
            out = F.rms_norm(rows, (rows.shape[-1],), None, eps) * weight.unsqueeze(1)
        else:
            # Qwen2RMSNorm's order: normalise in float32, cast back, then scale.
            out = weight.unsqueeze(1) * F.rms_norm(rows.float(), (rows.shape[-1],), None,
                                                   eps).to(rows.dtype)
        return out.reshape(x.shape)


def population_hidden(weights: StackedWeights, input_ids: torch.Tensor,
                      recompute: bool = False) -> torch.Tensor:
    """Final hidden states ``[P, N, T, hidden]`` of right-padded rows ``[P, N, T]`` (member
    ``m``'s rows through member ``m``'s weights). Differentiable; ``recompute`` keeps only
    each layer's input for the backward pass."""
    members, rows, length = input_ids.shape
    hidden = hidden_states(weights, input_ids.reshape(members * rows, length), recompute)
    return hidden.reshape(members, rows, length, -1)


class Population:
    """``size`` models of one architecture as stacked parameters (see the module docstring).

    Args:
        template: an HF model of the members' shape; it supplies the config, epsilons and
            rotary tables, and is where :meth:`member` writes a member's weights.
        params: ``name -> [P, ...]`` in ``template.named_parameters()`` order (tied
            parameters once, under their first name).
    """

    def __init__(self, template: Any, params: dict[str, torch.Tensor]) -> None:
        if not supports(template):
            raise ValueError(f"{type(template).__name__} is not a Qwen2/Llama-shaped decoder")
        self.template = template
        self.params = params
        self.size = int(next(iter(params.values())).shape[0])
        # Tied parameters (the output projection of the tiny model) answer to each name.
        self.aliases = {alias: name for name, alias in _tied_names(template)}
        named = {**params, **{alias: params[name] for alias, name in self.aliases.items()}}
        self.weights = StackedWeights(template, named, self.size)

    @classmethod
    def stack(cls, models: Sequence[Any], requires_grad: bool = True) -> Population:
        """The population of ``models`` (same shape), as leaf tensors of their current values;
        the first model is the template."""
        if not models:
            raise ValueError("a population needs at least one model")
        named = [dict(m.named_parameters()) for m in models]
        names = list(named[0])
        for other in named[1:]:
            if list(other) != names or any(other[n].shape != named[0][n].shape for n in names):
                raise ValueError("every member of a population must have the same shape")
        params = {n: torch.stack([m[n].detach() for m in named]).clone().requires_grad_(
            requires_grad) for n in names}
        return cls(models[0], params)

    @classmethod
    def replicate(cls, model: Any, size: int, requires_grad: bool = True) -> Population:
        """``size`` copies of ``model``."""
        params = {n: p.detach().unsqueeze(0).repeat(size, *([1] * p.dim())).requires_grad_(
            requires_grad) for n, p in model.named_parameters()}
        return cls(model, params)

    @classmethod
    def shared(cls, model: Any, size: int) -> Population:
        """``size`` frozen views of one copy of ``model``'s current weights: the KL reference
        of members that all start from ``model``, in the memory of one model."""
        params = {n: p.detach().clone().unsqueeze(0).expand(size, *p.shape)
                  for n, p in model.named_parameters()}
        return cls(model, params)

    def parameters(self) -> list[torch.Tensor]:
        """The stacked parameters, in the template's ``parameters()`` order."""
        return list(self.params.values())

    def member(self, index: int, model: Any | None = None) -> Any:
        """An HF model holding member ``index``'s weights: ``model`` (the template when
        ``None``) overwritten in place, or pass ``copy.deepcopy(template)`` to keep it."""
        model = self.template if model is None else model
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(self.params[name][index])
        return model

    def detached_member(self, index: int) -> Any:
        """A new HF model with member ``index``'s weights (the template is left as it is)."""
        return self.member(index, copy.deepcopy(self.template))

    def members(self, start: int, stop: int) -> Population:
        """Members ``start..stop-1`` as a population of their own (views, no copy)."""
        return Population(self.template, {n: p[start:stop] for n, p in self.params.items()})

    @torch.no_grad()
    def sample(self, prompts: Sequence[Sequence[Sequence[int]]], max_new_tokens: int,
               temperature: float, eos_ids: set[int], pad_id: int, top_p: float = 1.0,
               generators: Sequence[torch.Generator | None] | None = None,
               batch_size: int = GENERATION_BATCH,
               max_rows: int | None = None) -> list[list[list[int]]]:
        """``prompts[m]`` sampled by member ``m`` from ``generators[m]``: what
        :class:`~derl_bench.policies.backends.TransformersBackend` gives member ``m``'s model
        with that generator (the same chunks of ``batch_size`` rows, the same draws).

        Every member samples as many prompts. Members decode together in groups of at most
        ``max_rows`` rows (at least one member a group; default: 256 on a CPU, where past a
        few hundred rows the caches, not the per-op overhead, set the pace, and every member
        at once on a GPU).
        """
        if len(prompts) != self.size:
            raise ValueError(f"{len(prompts)} prompt lists for a population of {self.size}")
        count = len(prompts[0])
        if any(len(p) != count for p in prompts):
            raise ValueError("every member of a population samples as many prompts")
        generators = list(generators) if generators is not None else [None] * self.size
        if max_rows is None:
            on_cpu = self.weights.embed.device.type == "cpu"
            max_rows = GENERATION_BATCH if on_cpu else self.size * batch_size
        chunk = min(count, batch_size)
        together = max(1, max_rows // max(1, chunk))
        out: list[list[list[int]]] = [[] for _ in range(self.size)]
        for first in range(0, self.size, together):
            last = min(self.size, first + together)
            group = self if (first, last) == (0, self.size) else self.members(first, last)
            for start in range(0, count, batch_size):
                rows = [row for member in prompts[first:last]
                        for row in member[start:start + batch_size]]
                completions = sample_rows(group.weights, rows, max_new_tokens, temperature,
                                          top_p, generators[first:last], sorted(eos_ids), pad_id)
                per = len(rows) // group.size
                for m in range(group.size):
                    out[first + m].extend(completions[m * per:(m + 1) * per])
        return out


def _tied_names(model: Any) -> list[tuple[str, str]]:
    """``(first name, other name)`` of every parameter registered under two names."""
    first: dict[int, str] = {}
    tied = []
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            tied.append((first[id(param)], name))
        else:
            first[id(param)] = name
    return tied


__all__ = ["Population", "StackedWeights", "population_hidden"]
