"""A lean forward pass and sampler for Qwen2/Llama-shaped causal LMs, reading the HF weights.

A small model on a CPU spends almost all of its time in per-call overhead: transformers'
``generate`` runs a logits-processor stack, rebuilds attention masks and a dynamic cache every
token, and the module tree adds hundreds of Python calls per forward. For decoders of the
Qwen2/Llama family (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP) this module
runs the same arithmetic as a flat sequence of tensor ops on the model's own parameters:

- :func:`causal_logits` — logits of right-padded rows (training), differentiable;
- :class:`FastSampler` — batched sampling with a preallocated key/value cache: one prefill of
  the left-padded prompts, then one decode step per token over all rows, SDPA attention,
  temperature / top-p sampling from a seeded generator, rows stopping at their end token.

The parameters are read live, so an optimiser step is seen by the next call without any copy.
Other architectures fall back to transformers (:func:`supports` says which path a model takes).

    >>> from derl_bench.policies.tiny import build_tiny_model, build_tiny_tokenizer
    >>> tok = build_tiny_tokenizer()
    >>> model = build_tiny_model(tok)
    >>> supports(model)
    True
    >>> sampler = FastSampler(model, eos_ids={tok.eos_token_id}, pad_id=tok.pad_token_id)
    >>> rows = sampler.sample([[5, 6, 7], [8]], max_new_tokens=4, seed=0)
    >>> rows == sampler.sample([[5, 6, 7], [8]], max_new_tokens=4, seed=0)
    True
    >>> [len(r) <= 4 for r in rows]
    [True, True]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from derl_bench.policies.lora import decoder_view, lean_allowed, linear_weight

SUPPORTED_TYPES = ("qwen2", "llama")
"""``config.model_type`` values whose decoder layers this module reproduces exactly."""

LogitsHook = Callable[[torch.Tensor, list[list[int]], torch.Tensor], torch.Tensor]
"""``hook(logits, completions_so_far, active_rows) -> logits``: constrained decoding."""


def supports(model: Any) -> bool:
    """Whether ``model`` can run on the lean path (else callers use transformers)."""
    if not lean_allowed(model):
        return False
    model = decoder_view(model).model
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in SUPPORTED_TYPES:
        return False
    if getattr(config, "hidden_act", "silu") != "silu":
        return False
    if getattr(config, "use_sliding_window", False):
        return False
    inner = getattr(model, "model", None)
    return inner is not None and hasattr(inner, "rotary_emb") and hasattr(inner, "layers")


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Qwen2RMSNorm/LlamaRMSNorm: normalise in float32, cast back, then scale.
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Weights:
    """The decoder's parameters and shape, gathered once per model (the tensors stay live)."""

    def __init__(self, model: Any) -> None:
        # A LoRA model's projections are read through ``linear_weight`` at every ``packed()``
        # call, so the adapter's live ``W + scaling * B A`` is what runs (and is trained).
        view = decoder_view(model)
        model, self.adapters = view.model, view.adapters
        config = model.config
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.norm_eps = float(inner.norm.variance_epsilon)
        self.lm_head = model.lm_head.weight
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None)
                            or config.hidden_size // config.num_attention_heads)
        self.rotary = inner.rotary_emb
        self.layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight, float(layer.input_layernorm.variance_epsilon),
                attn.q_proj, attn.q_proj.bias, attn.k_proj, attn.k_proj.bias,
                attn.v_proj, attn.v_proj.bias, attn.o_proj, attn.o_proj.bias,
                layer.post_attention_layernorm.weight,
                float(layer.post_attention_layernorm.variance_epsilon),
                mlp.gate_proj, mlp.up_proj, mlp.down_proj,
            ))

    def packed(self) -> list[tuple]:
        """Per layer: the q/k/v projections as one matrix and gate/up as another, so a layer
        runs 4 matrix products instead of 7 (``torch.cat`` keeps gradients flowing)."""
        out = []
        for (ln1, eps1, q, bq, k, bk, v, bv, o, bo, ln2, eps2, g, u, d) in self.layers:
            wq, wk, wv, wo, wg, wu, wd = (linear_weight(m, self.adapters)
                                          for m in (q, k, v, o, g, u, d))
            biases = (bq, bk, bv)
            bqkv = (None if all(b is None for b in biases) else torch.cat([
                b if b is not None else wq.new_zeros(w.shape[0])
                for b, w in zip(biases, (wq, wk, wv), strict=True)]))
            out.append((ln1, eps1, torch.cat((wq, wk, wv)), bqkv, wo, bo, ln2, eps2,
                        torch.cat((wg, wu)), wd))
        return out

    def rope(self, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables ``(length, head_dim)`` for positions ``0..length-1``."""
        positions = torch.arange(length, device=self.embed.device).unsqueeze(0)
        cos, sin = self.rotary(self.embed[:1], positions)
        return cos[0].to(dtype), sin[0].to(dtype)


def _layer_forward(w: tuple, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   heads: int, kv_heads: int, head_dim: int,
                   attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                   ) -> torch.Tensor:
    """One decoder layer on ``x`` ``(B, T, hidden)``; ``cos``/``sin`` are ``(B, T, 1, D)``."""
    (ln1, eps1, wqkv, bqkv, wo, bo, ln2, eps2, wgu, wd) = w
    batch, length, _ = x.shape
    qkv = F.linear(_rms_norm(x, ln1, eps1), wqkv, bqkv).view(
        batch, length, heads + 2 * kv_heads, head_dim)
    # Rotary embeddings on the query and key heads at once.
    qk = qkv[:, :, :heads + kv_heads]
    qk = qk * cos + _rotate_half(qk) * sin
    q = qk[:, :, :heads].transpose(1, 2)
    k = qk[:, :, heads:].transpose(1, 2)
    v = qkv[:, :, heads + kv_heads:].transpose(1, 2)
    out = attend(q, k, v).transpose(1, 2).reshape(batch, length, heads * head_dim)
    x = x + F.linear(out, wo, bo)
    gate, up = F.linear(_rms_norm(x, ln2, eps2), wgu).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, wd)


_WEIGHTS: dict[int, tuple[Any, _Weights]] = {}


def _weights(model: Any) -> _Weights:
    # Parameters are replaced only by loading another model, so one gathering per model object
    # serves every call; the tensors themselves are the live, trained ones.
    key = id(model)
    cached = _WEIGHTS.get(key)
    if cached is None or cached[0] is not model:
        cached = (model, _Weights(model))
        _WEIGHTS[key] = cached
        if len(_WEIGHTS) > 16:
            _WEIGHTS.pop(next(iter(_WEIGHTS)))
    return cached[1]


def causal_hidden(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Final hidden states ``(N, T, hidden)`` of right-padded rows under causal attention.

    Right padding never changes the states of the real tokens before it, so no mask is needed:
    positions are ``0..T-1`` for every row. Differentiable.
    """
    w = _weights(model)
    batch, length = input_ids.shape
    x = F.embedding(input_ids, w.embed)
    cos, sin = w.rope(length, x.dtype)
    cos, sin = cos[None, :, None], sin[None, :, None]

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              enable_gqa=w.kv_heads != w.heads)

    for layer in w.packed():
        x = _layer_forward(layer, x, cos, sin, w.heads, w.kv_heads, w.head_dim, attend)
    return _rms_norm(x, w.norm, w.norm_eps)


def lm_head(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """Logits of final hidden states (the model's output projection)."""
    return F.linear(hidden, _weights(model).lm_head)


def causal_logits(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits ``(N, T, V)`` of right-padded rows: ``model(input_ids).logits`` on every
    position before the padding, for a fraction of the call overhead. Differentiable."""
    return lm_head(model, causal_hidden(model, input_ids))


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from ``logits`` ``(B, V)``: greedy at temperature 0, else
    temperature-scaled nucleus sampling (``top_p`` 1.0 keeps the whole distribution)."""
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_p < 1.0:
        sorted_logits, order = logits.sort(-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token once the tokens before it already cover top_p; the first always stays.
        drop = probs.cumsum(-1) - probs > top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    # Inverse-CDF sampling: one uniform per row. (``torch.multinomial`` draws an exponential
    # per vocabulary entry, which dominates a small model's decode step on a CPU.)
    cdf = logits.softmax(-1).cumsum(-1)
    u = torch.rand((logits.shape[0], 1), generator=generator, device=logits.device)
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return token.squeeze(-1).clamp(max=logits.shape[-1] - 1)


class FastSampler:
    """Batched sampling with a preallocated key/value cache (see the module docstring).

    Args:
        model: a Qwen2/Llama-shaped HF causal LM (``supports(model)``).
        eos_ids: tokens that end a row; the end token is kept in the completion.
        pad_id: the id written after a row has ended (never part of a completion).
    """

    def __init__(self, model: Any, eos_ids: set[int], pad_id: int) -> None:
        if not supports(model):
            raise ValueError(f"{type(model).__name__} is not a Qwen2/Llama-shaped decoder")
        self.model = model
        self.eos = torch.tensor(sorted(eos_ids), dtype=torch.long)
        self.pad_id = int(pad_id)

    @torch.no_grad()
    def sample(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
               temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
               generator: torch.Generator | None = None,
               logits_hook: LogitsHook | None = None) -> list[list[int]]:
        """One completion per prompt, each ending at (and including) its first end token.

        The same ``seed`` (or the same state of the global torch RNG when no seed or generator
        is given) and the same prompts give the same completions.
        """
        if not prompts:
            return []
        w = _weights(self.model)
        device = w.embed.device
        dtype = w.embed.dtype
        if generator is None and seed is not None:
            generator = torch.Generator(device=device).manual_seed(int(seed))
        batch = len(prompts)
        width = max(len(p) for p in prompts)
        total = width + max_new_tokens
        ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((batch, total), dtype=torch.bool)
        for row, prompt in enumerate(prompts):
            if len(prompt):
                ids[row, width - len(prompt):] = torch.as_tensor(list(prompt), dtype=torch.long)
            valid[row, width - len(prompt):width] = True
        ids, valid = ids.to(device), valid.to(device)
        # Left padding: a row's first real token has position 0.
        positions = (valid[:, :width].long().cumsum(-1) - 1).clamp(min=0)
        next_position = positions[:, -1:] + 1
        layers = w.packed()
        cos_table, sin_table = w.rope(total, dtype)

        shape = (batch, w.kv_heads, total, w.head_dim)
        cache = [(torch.empty(shape, dtype=dtype, device=device),
                  torch.empty(shape, dtype=dtype, device=device)) for _ in w.layers]
        # Prefill: causal and padding-aware; a padding query sees itself so no row is all -inf.
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        prefill_mask = (causal & valid[:, None, :width]) | torch.eye(
            width, dtype=torch.bool, device=device)
        prefill_mask = prefill_mask.unsqueeze(1)
        logits = self._step(w, layers, ids, cos_table[positions], sin_table[positions], cache,
                            0, prefill_mask)[:, -1]

        completions: list[list[int]] = [[] for _ in range(batch)]
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        eos = self.eos.to(device)
        tokens_out = []
        for t in range(max_new_tokens):
            active = (~done).nonzero().squeeze(-1)
            if logits_hook is not None:
                logits = logits_hook(logits, completions, active)
            token = sample_tokens(logits, temperature, top_p, generator)
            token = torch.where(done, torch.full_like(token, self.pad_id), token)
            tokens_out.append(token)
            if logits_hook is not None:
                for row in active.tolist():
                    completions[row].append(int(token[row]))
            done = done | torch.isin(token, eos)
            if bool(done.all()) or t == max_new_tokens - 1:
                break
            column = width + t
            valid[:, column] = True
            logits = self._step(w, layers, token.unsqueeze(1), cos_table[next_position],
                                sin_table[next_position], cache, column,
                                valid[:, None, None, :column + 1])[:, -1]
            next_position = next_position + 1
        out = torch.stack(tokens_out, 1).tolist() if tokens_out else [[] for _ in range(batch)]
        eos_set = set(self.eos.tolist())
        result = []
        for row in out:
            kept: list[int] = []
            for token in row:
                kept.append(int(token))
                if token in eos_set:
                    break
            result.append(kept)
        return result

    @staticmethod
    def _step(w: _Weights, layers: list[tuple], ids: torch.Tensor, cos: torch.Tensor,
              sin: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]], start: int,
              mask: torch.Tensor) -> torch.Tensor:
        x = F.embedding(ids, w.embed)
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        end = start + ids.shape[1]
        for layer, (k_cache, v_cache) in zip(layers, cache, strict=True):
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       k_cache: torch.Tensor = k_cache, v_cache: torch.Tensor = v_cache,
                       ) -> torch.Tensor:
                k_cache[:, :, start:end] = k
                v_cache[:, :, start:end] = v
                keys, values = k_cache[:, :, :end], v_cache[:, :, :end]
                if q.shape[2] > 1:
                    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                          enable_gqa=w.kv_heads != w.heads)
                # One query per row: two small matmuls beat SDPA's CPU kernel here. Query heads
                # are grouped under their key/value head instead of repeating the cache.
                batch, groups = q.shape[0], w.heads // w.kv_heads
                qg = q.view(batch, w.kv_heads, groups, w.head_dim)
                scores = (qg @ keys.transpose(-1, -2)) * w.head_dim ** -0.5
                scores = scores.masked_fill(~mask, float("-inf")).softmax(-1)
                return (scores @ values).view(batch, w.heads, 1, w.head_dim)

            x = _layer_forward(layer, x, cos, sin, w.heads, w.kv_heads, w.head_dim, attend)
        return F.linear(_rms_norm(x[:, -1:], w.norm, w.norm_eps), w.lm_head)


__all__ = ["SUPPORTED_TYPES", "FastSampler", "causal_hidden", "causal_logits", "lm_head",
           "sample_tokens", "supports"]
