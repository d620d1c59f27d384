"""The lean decoder layer: the arithmetic of a Qwen2/Llama decoder layer as flat tensor ops on
a weights object, shared by the lean sampler (:mod:`derl_bench.policies.fast`), the static-cache
decoder (:mod:`derl_bench.policies.decode`) and populations
(:mod:`derl_bench.policies.population`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from derl_bench.policies.decoder import decoder_view, lean_allowed, lean_parameters

SUPPORTED_TYPES = ("qwen2", "llama")
"""``config.model_type`` values whose decoder layers this module reproduces exactly."""

def supports_config(config: Any) -> bool:
    """Whether a model of this HF ``config`` can run on the lean path."""
    if config is None or getattr(config, "model_type", None) not in SUPPORTED_TYPES:
        return False
    if getattr(config, "hidden_act", "silu") != "silu":
        return False
    return not getattr(config, "use_sliding_window", False)


def supports(model: Any) -> bool:
    """Whether ``model`` can run on the lean path (else callers use transformers)."""
    if not lean_allowed(model):
        return False
    model = decoder_view(model).model
    if not supports_config(getattr(model, "config", None)):
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


def _weight(w: Any) -> torch.Tensor:
    """A layer's weight: a tensor, or a callable that computes it (a merged LoRA weight)."""
    return w() if callable(w) else w


class Weights:
    """The decoder's parameters and shape, gathered once per model (the tensors stay live), and
    the four operations that touch them: embedding, linear maps, RMSNorm and the output
    projection. :class:`~derl_bench.policies.population.StackedWeights` gives the same
    operations for a population of models stacked along a leading axis, so the decoder layer,
    the forward pass and the sampler below serve both.

    ``named`` maps parameter names to tensors (default: the model's own parameters, tied ones
    under each of their names); the model supplies the shape, epsilons and rotary tables.
    """

    members = 1
    """Models whose rows a batch holds (rows are member-major)."""

    def __init__(self, model: Any, named: Mapping[str, Any] | None = None) -> None:
        if named is None:
            # A LoRA model's projections are read through ``linear_weight`` at every
            # ``packed()`` call, so the adapter's live ``W + scaling * B A`` is what runs (and
            # is trained).
            view = decoder_view(model)
            model = view.model
            named = lean_parameters(model, view.adapters)
        config = model.config
        inner = model.model
        self.embed = named["model.embed_tokens.weight"]
        self.norm_weight = named["model.norm.weight"]
        self.norm_eps = float(inner.norm.variance_epsilon)
        self.lm_head = named.get("lm_head.weight", self.embed)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None)
                            or config.hidden_size // config.num_attention_heads)
        self.rotary = inner.rotary_emb
        self.layers = []
        for i, layer in enumerate(inner.layers):
            def get(name: str, i: int = i) -> torch.Tensor | None:
                return named.get(f"model.layers.{i}.{name}")

            self.layers.append((
                get("input_layernorm.weight"), float(layer.input_layernorm.variance_epsilon),
                get("self_attn.q_proj.weight"), get("self_attn.q_proj.bias"),
                get("self_attn.k_proj.weight"), get("self_attn.k_proj.bias"),
                get("self_attn.v_proj.weight"), get("self_attn.v_proj.bias"),
                get("self_attn.o_proj.weight"), get("self_attn.o_proj.bias"),
                get("post_attention_layernorm.weight"),
                float(layer.post_attention_layernorm.variance_epsilon),
                get("mlp.gate_proj.weight"), get("mlp.up_proj.weight"),
                get("mlp.down_proj.weight"),
            ))

    def packed(self) -> list[tuple]:
        """Per layer: the q/k/v projections as one matrix and gate/up as another, so a layer
        runs 4 matrix products instead of 7 (``torch.cat`` keeps gradients flowing). Output
        features are the second-to-last axis of a weight and the last of a bias, whatever
        leads them."""
        out = []
        for (ln1, eps1, q, bq, k, bk, v, bv, o, bo, ln2, eps2, g, u, d) in self.layers:
            wq, wk, wv, wo, wg, wu, wd = (_weight(w) for w in (q, k, v, o, g, u, d))
            biases = (bq, bk, bv)
            bqkv = (None if all(b is None for b in biases) else torch.cat([
                b if b is not None else w.new_zeros(w.shape[:-1])
                for b, w in zip(biases, (wq, wk, wv), strict=True)], dim=-1))
            out.append((ln1, eps1, torch.cat((wq, wk, wv), dim=-2), bqkv, wo, bo, ln2, eps2,
                        torch.cat((wg, wu), dim=-2), wd))
        return out

    def rope(self, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables ``(length, head_dim)`` for positions ``0..length-1``."""
        positions = torch.arange(length, device=self.embed.device).unsqueeze(0)
        cos, sin = self.rotary(self.embed[:1], positions)
        return cos[0].to(dtype), sin[0].to(dtype)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Input embeddings of token ids ``(rows, T)``."""
        return F.embedding(ids, self.embed)

    def linear(self, x: torch.Tensor, weight: torch.Tensor,
               bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ weight.T + bias`` over the last axis."""
        return F.linear(x, weight, bias)

    def norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm over the last axis."""
        return _rms_norm(x, weight, eps)

    def final(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm (before the output projection)."""
        return self.norm(x, self.norm_weight, self.norm_eps)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of final hidden states."""
        return self.linear(hidden, self.lm_head)

    def step(self, layers: list[tuple], ids: torch.Tensor, cos: torch.Tensor,
             sin: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]], start: int,
             mask: torch.Tensor) -> torch.Tensor:
        """Run ``ids`` (rows, T) at cache columns ``start..start+T-1``, writing their keys and
        values into ``cache``; the logits ``(rows, V)`` of each row's last position."""
        x = self.embed_ids(ids)
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
                                                          enable_gqa=self.kv_heads != self.heads)
                return one_query_attention(self, q, keys, values, mask)

            x = _layer_forward(layer, x, cos, sin, self, attend)
        return self.head(self.final(x[:, -1]))


def one_query_attention(w: Weights, q: torch.Tensor, keys: torch.Tensor,
                        values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Attention of one query per row ``(B, heads, 1, D)`` over ``keys``/``values``
    ``(B, kv_heads, L, D)`` where ``mask`` ``(B, 1, 1, L)`` is true.

    Two small matmuls beat SDPA's CPU kernel here. Query heads are grouped under their
    key/value head instead of repeating the cache."""
    batch, groups = q.shape[0], w.heads // w.kv_heads
    qg = q.view(batch, w.kv_heads, groups, w.head_dim)
    scores = (qg @ keys.transpose(-1, -2)) * w.head_dim ** -0.5
    scores = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return (scores @ values).view(batch, w.heads, 1, w.head_dim)


def _layer_forward(w: tuple, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   ops: Weights,
                   attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
                   ) -> torch.Tensor:
    """One decoder layer on ``x`` ``(B, T, hidden)``; ``cos``/``sin`` are ``(B, T, 1, D)``."""
    (ln1, eps1, wqkv, bqkv, wo, bo, ln2, eps2, wgu, wd) = w
    heads, kv_heads, head_dim = ops.heads, ops.kv_heads, ops.head_dim
    batch, length, _ = x.shape
    qkv = ops.linear(ops.norm(x, ln1, eps1), wqkv, bqkv).view(
        batch, length, heads + 2 * kv_heads, head_dim)
    # Rotary embeddings on the query and key heads at once.
    qk = qkv[:, :, :heads + kv_heads]
    qk = qk * cos + _rotate_half(qk) * sin
    q = qk[:, :, :heads].transpose(1, 2)
    k = qk[:, :, heads:].transpose(1, 2)
    v = qkv[:, :, heads + kv_heads:].transpose(1, 2)
    out = attend(q, k, v).transpose(1, 2).reshape(batch, length, heads * head_dim)
    x = x + ops.linear(out, wo, bo)
    gate, up = ops.linear(ops.norm(x, ln2, eps2), wgu).chunk(2, dim=-1)
    return x + ops.linear(F.silu(gate) * up, wd)


