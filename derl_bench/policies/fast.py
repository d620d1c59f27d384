"""A lean forward pass and sampler for Qwen2/Llama-shaped causal LMs, reading the HF weights.

A small model on a CPU spends almost all of its time in per-call overhead: transformers'
``generate`` runs a logits-processor stack, rebuilds attention masks and a dynamic cache every
token, and the module tree adds hundreds of Python calls per forward. For decoders of the
Qwen2/Llama family (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP) this module
runs the same arithmetic as a flat sequence of tensor ops on the model's own parameters:

- :func:`causal_logits` — logits of right-padded rows (training), differentiable;
- :class:`FastSampler` — batched sampling with a preallocated key/value cache: one prefill of
  the left-padded prompts (once per distinct prompt: the G rows of a GRPO group share its
  keys and values), then one decode step per token over all rows, SDPA attention,
  temperature / top-p sampling from a seeded generator, rows stopping at their end token.
  On a GPU the decode steps run over a static cache as a captured CUDA graph
  (:mod:`derl_bench.policies.decode`).

The decoder layer, the forward pass and the sampler go through the operations of a weights
object (embedding, linear maps, RMSNorm, output projection), so the same code runs a
population of models stacked along a leading axis with batched matrix products
(:mod:`derl_bench.policies.population`).

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

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from derl_bench.policies.lean import (
    SUPPORTED_TYPES,
    Weights,
    _layer_forward,
    one_query_attention,
    supports,
    supports_config,
)

LogitsHook = Callable[[torch.Tensor, list[list[int]], torch.Tensor], torch.Tensor]
"""``hook(logits, completions_so_far, active_rows) -> logits``: constrained decoding."""

ForcedTokens = Callable[[int, list[int]], Sequence[int]]
"""``forced(row, completion_so_far) -> tokens``: what the row's constraint allows as its only
continuation (each token the single one allowed after the one before), possibly none."""


def _run_layer(layer: tuple, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               ops: Weights,
               attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
               recompute: bool) -> torch.Tensor:
    """:func:`_layer_forward`; with ``recompute`` (and gradients on) the layer keeps only its
    input for the backward pass and runs again there, instead of keeping every activation."""
    if recompute and torch.is_grad_enabled():
        out: torch.Tensor = checkpoint(_layer_forward, layer, x, cos, sin, ops, attend,
                                       use_reentrant=False)
        return out
    return _layer_forward(layer, x, cos, sin, ops, attend)


# Held weakly: a model's gathering (and the static decoders, caches and CUDA graphs kept on it)
# goes the moment its model does. A table of strong references kept the last 16 models alive,
# which on a GPU held every finished inner run of a meta loop in memory.
_WEIGHTS: weakref.WeakKeyDictionary[Any, Weights] = weakref.WeakKeyDictionary()


def _weights(model: Any) -> Weights:
    # Parameters are replaced only by loading another model, so one gathering per model object
    # serves every call; the tensors themselves are the live, trained ones.
    cached = _WEIGHTS.get(model)
    if cached is None:
        cached = _WEIGHTS[model] = Weights(model)
    return cached


def hidden_states(w: Weights, input_ids: torch.Tensor, recompute: bool = False,
                  ) -> torch.Tensor:
    """Final hidden states ``(rows, T, hidden)`` of right-padded rows under causal attention,
    through the operations of ``w`` (one model, or a stacked population: rows member-major).
    ``recompute`` keeps only each layer's input for the backward pass (:func:`_run_layer`)."""
    batch, length = input_ids.shape
    x = w.embed_ids(input_ids)
    cos, sin = w.rope(length, x.dtype)
    cos, sin = cos[None, :, None], sin[None, :, None]

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              enable_gqa=w.kv_heads != w.heads)

    for layer in w.packed():
        x = _run_layer(layer, x, cos, sin, w, attend, recompute)
    return w.final(x)


def prefixed_hidden(w: Weights, prefix_ids: torch.Tensor, prefix_lengths: torch.Tensor,
                    suffix_ids: torch.Tensor, owner: torch.Tensor, recompute: bool = False,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Final hidden states of rows that continue shared prefixes, each prefix run once.

    Row ``r`` is prefix ``owner[r]`` (the first ``prefix_lengths`` tokens of a right-padded
    ``prefix_ids`` row) followed by its own right-padded ``suffix_ids[r]``; the G completions
    of a GRPO group continue one prompt. Returns the prefixes' states ``(U, Tp, hidden)`` and
    the suffixes' ``(R, Ts, hidden)``: what :func:`hidden_states` gives the concatenated rows,
    with the prefix computed once instead of once per row. Gradients reach each prefix from
    every row that continues it. Rows (and prefixes) are member-major, as in
    :func:`hidden_states`; ``recompute`` as there. Differentiable.
    """
    prefix_width = prefix_ids.shape[1]
    suffix_width = suffix_ids.shape[1]
    layers = w.packed()
    x = w.embed_ids(prefix_ids)
    cos_table, sin_table = w.rope(prefix_width + suffix_width, x.dtype)
    gqa = w.kv_heads != w.heads
    keys_values: list[tuple[torch.Tensor, torch.Tensor]] = []

    cos, sin = cos_table[None, :prefix_width, None], sin_table[None, :prefix_width, None]
    for i, layer in enumerate(layers):
        def attend_prefix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          i: int = i) -> torch.Tensor:
            # By layer, not appended: a recomputed layer (``recompute``) runs this again in
            # the backward pass, after the suffix has read the keys and values.
            if i == len(keys_values):
                keys_values.append((k, v))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

        x = _run_layer(layer, x, cos, sin, w, attend_prefix, recompute)
    # A suffix token sees its prefix's real tokens and the suffix tokens up to itself.
    lengths = prefix_lengths[owner]
    positions = lengths[:, None] + torch.arange(suffix_width, device=lengths.device)
    seen = torch.cat([
        (torch.arange(prefix_width, device=lengths.device) < lengths[:, None])[:, None, :]
        .expand(-1, suffix_width, -1),
        torch.ones(suffix_width, suffix_width, dtype=torch.bool,
                   device=lengths.device).tril().expand(len(owner), -1, -1)], dim=2)
    mask = seen.unsqueeze(1)
    y = w.embed_ids(suffix_ids)
    cos, sin = cos_table[positions].unsqueeze(2), sin_table[positions].unsqueeze(2)
    for layer, (k_prefix, v_prefix) in zip(layers, keys_values, strict=True):
        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   k_prefix: torch.Tensor = k_prefix, v_prefix: torch.Tensor = v_prefix,
                   ) -> torch.Tensor:
            keys = torch.cat((k_prefix[owner], k), dim=2)
            values = torch.cat((v_prefix[owner], v), dim=2)
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                  enable_gqa=gqa)

        y = _run_layer(layer, y, cos, sin, w, attend, recompute)
    return w.final(x), w.final(y)


def causal_hidden(model: Any, input_ids: torch.Tensor, recompute: bool = False,
                  ) -> torch.Tensor:
    """Final hidden states ``(N, T, hidden)`` of right-padded rows under causal attention.

    Right padding never changes the states of the real tokens before it, so no mask is needed:
    positions are ``0..T-1`` for every row. Differentiable; ``recompute`` keeps only each
    layer's input for the backward pass.
    """
    return hidden_states(_weights(model), input_ids, recompute)


def lm_head(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """Logits of final hidden states (the model's output projection)."""
    return _weights(model).head(hidden)


def causal_logits(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits ``(N, T, V)`` of right-padded rows: ``model(input_ids).logits`` on every
    position before the padding, for a fraction of the call overhead. Differentiable."""
    return lm_head(model, causal_hidden(model, input_ids))


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  generator: torch.Generator | None,
                  uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row from ``logits`` ``(B, V)``: greedy at temperature 0, else
    temperature-scaled nucleus sampling (``top_p`` 1.0 keeps the whole distribution).

    ``uniforms`` ``(B, 1)`` are the row's draws when the caller made them (one generator per
    member of a population); otherwise one per row comes from ``generator``."""
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
    u = uniforms if uniforms is not None else torch.rand(
        (logits.shape[0], 1), generator=generator, device=logits.device)
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return token.squeeze(-1).clamp(max=logits.shape[-1] - 1)


def shared_prefixes(prompts: Sequence[Sequence[int]], members: int = 1,
                    ) -> tuple[list[int], list[int]] | None:
    """Rows to prefill and, for every row, the prefilled row whose keys and values it takes:
    ``None`` when no two rows of one member share their prompt.

    Rows are member-major, ``len(prompts) // members`` per member; a prompt is shared only
    within a member (members have their own weights). Every member prefills as many rows as
    the member with the most distinct prompts (repeating its last one), so the prefill stays
    a stack of equal blocks.

    >>> shared_prefixes([[1, 2], [1, 2], [3], [3]])
    ([0, 2], [0, 0, 1, 1])
    >>> shared_prefixes([[1], [1], [1], [2], [3], [3]], members=2)
    ([0, 0, 3, 4], [0, 0, 0, 2, 3, 3])
    """
    per = len(prompts) // members
    firsts: list[list[int]] = []
    owner: list[int] = []
    for m in range(members):
        seen: dict[tuple[int, ...], int] = {}
        rows: list[int] = []
        for row in range(m * per, (m + 1) * per):
            key = tuple(prompts[row])
            if key not in seen:
                seen[key] = len(rows)
                rows.append(row)
            owner.append(seen[key])
        firsts.append(rows)
    width = max(len(rows) for rows in firsts)
    if width == per:
        return None
    unique = [rows[min(i, len(rows) - 1)] for rows in firsts for i in range(width)]
    inverse = [row // per * width + owner[row] for row in range(len(prompts))]
    return unique, inverse


class PrefillCache:
    """Prompts prefilled under one model's weights, kept across sampling calls: each prompt's
    keys and values per layer and the logits of the token after it.

    An agent's rollout samples once per turn, and a prompt comes back on later turns (a
    group's members reach the same state at different turns, a weak policy walks in
    cycles). Within one call, rows that share a prompt prefill it once
    (:func:`shared_prefixes`); with a cache handed to :func:`sample_rows`, a prompt prefilled
    by an earlier call is not run again either, so a rollout prefills each distinct prompt
    once. Valid while the weights stay as they are: the cache notes the weights it was
    filled under (their tensors' in-place versions) and empties itself when they change, so
    one cache per rollout is the intended use. A model whose layer weights are computed at
    each call (a merged LoRA weight) is never cached. At most ``max_bytes`` of keys, values and
    logits are kept (1 GiB by default: about 40,000 prompt tokens of a 24-layer 0.5B model),
    the least recently used prompts dropped first.

    >>> from derl_bench.policies.tiny import build_tiny_model, build_tiny_tokenizer
    >>> tok = build_tiny_tokenizer()
    >>> sampler = FastSampler(build_tiny_model(tok), {tok.eos_token_id}, tok.pad_token_id)
    >>> cache = PrefillCache()
    >>> _ = sampler.sample([[5, 6, 7], [8]], 3, seed=0, prefill_cache=cache)
    >>> _ = sampler.sample([[8], [9, 10]], 3, seed=0, prefill_cache=cache)
    >>> len(cache), cache.prefilled, cache.reused
    (3, 3, 1)
    """

    def __init__(self, max_bytes: int = 1 << 30) -> None:
        self.max_bytes = max_bytes
        self._entries: dict[tuple[int, ...],
                            tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]] = {}
        self._bytes = 0
        self._weights: tuple[int, tuple[int, ...]] | None = None
        self.prefilled = 0
        """Prompts run through the model."""
        self.reused = 0
        """Prompts taken from the cache instead."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes of the keys, values and logits kept."""
        return self._bytes

    def usable(self, w: Weights) -> bool:
        """Whether prompts can be kept for ``w`` (emptying the cache if it was filled under
        other weights, or under these before an in-place change)."""
        tensors = [w.embed, w.norm_weight, w.lm_head]
        for layer in w.layers:
            for part in layer:
                if callable(part):
                    return False
                if isinstance(part, torch.Tensor):
                    tensors.append(part)
        weights = (id(w), tuple(t._version for t in tensors))
        if weights != self._weights:
            self._entries.clear()
            self._bytes = 0
            self._weights = weights
        return True

    def _keep(self, key: tuple[int, ...], layers: list[tuple[torch.Tensor, torch.Tensor]],
              logits: torch.Tensor) -> None:
        self._entries[key] = (layers, logits)
        self._bytes += _nbytes(layers, logits)

    def _use(self, key: tuple[int, ...],
             ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        entry = self._entries.pop(key)
        self._entries[key] = entry  # the most recently used last
        return entry

    def _trim(self) -> None:
        while self._bytes > self.max_bytes and self._entries:
            oldest = next(iter(self._entries))
            self._bytes -= _nbytes(*self._entries.pop(oldest))


def _nbytes(layers: list[tuple[torch.Tensor, torch.Tensor]], logits: torch.Tensor) -> int:
    return logits.nbytes + sum(k.nbytes + v.nbytes for k, v in layers)


def _left_padded(prompts: Sequence[Sequence[int]], width: int, total: int, pad_id: int,
                 device: torch.device,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A prefill's inputs for ``prompts`` left-padded to ``width``: the ids, which of
    ``total`` cache columns hold a real token, each token's position (a row's first real token
    has position 0) and the prefill's mask (causal and padding-aware; a padding query sees
    itself so no row is all -inf)."""
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    valid = torch.zeros((len(prompts), total), dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        if len(prompt):
            ids[row, width - len(prompt):] = torch.as_tensor(list(prompt), dtype=torch.long)
        valid[row, width - len(prompt):width] = True
    ids, valid = ids.to(device), valid.to(device)
    positions = (valid[:, :width].long().cumsum(-1) - 1).clamp(min=0)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    mask = ((causal & valid[:, None, :width]) | torch.eye(
        width, dtype=torch.bool, device=device)).unsqueeze(1)
    return ids, valid, positions, mask


def _prefill_cached(w: Weights, layers: list[tuple], prompts: Sequence[Sequence[int]],
                    width: int, cache: list[tuple[torch.Tensor, torch.Tensor]],
                    cos_table: torch.Tensor, sin_table: torch.Tensor,
                    kept: PrefillCache) -> torch.Tensor:
    """Fill ``cache``'s first ``width`` columns with the left-padded ``prompts``' keys and
    values (zeros at the padding), running only the prompts ``kept`` lacks (each once, as its
    own left-padded batch), and return each row's next-token logits."""
    device, dtype = w.embed.device, w.embed.dtype
    keys = [tuple(int(t) for t in p) for p in prompts]
    missing = list(dict.fromkeys(k for k in keys if k not in kept._entries))
    kept.prefilled += len(missing)
    kept.reused += len(set(keys)) - len(missing)
    if missing:
        run = max(len(k) for k in missing)
        ids, _, positions, mask = _left_padded(missing, run, run, 0, device)
        shape = (len(missing), w.kv_heads, run, w.head_dim)
        fresh = [(torch.empty(shape, dtype=dtype, device=device),
                  torch.empty(shape, dtype=dtype, device=device)) for _ in layers]
        logits = w.step(layers, ids, cos_table[positions], sin_table[positions], fresh, 0, mask)
        for row, key in enumerate(missing):
            start = run - len(key)
            kept._keep(key, [(k[row, :, start:].clone(), v[row, :, start:].clone())
                             for k, v in fresh], logits[row].clone())
    for k_cache, v_cache in cache:
        # A masked column still multiplies its value by a weight of 0: no garbage (NaN) there.
        k_cache[:, :, :width].zero_()
        v_cache[:, :, :width].zero_()
    used = {key: kept._use(key) for key in dict.fromkeys(keys)}
    for row, key in enumerate(keys):
        start = width - len(key)
        for (k_cache, v_cache), (k, v) in zip(cache, used[key][0], strict=True):
            k_cache[row, :, start:width] = k
            v_cache[row, :, start:width] = v
    kept._trim()  # after this call's rows took theirs
    return torch.stack([used[key][1] for key in keys])


def sample_rows(w: Weights, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                temperature: float, top_p: float,
                generators: Sequence[torch.Generator | None], eos_ids: Sequence[int],
                pad_id: int, logits_hook: LogitsHook | None = None,
                share_prefix: bool = True, static: bool | None = None,
                forced: ForcedTokens | None = None,
                prefill_cache: PrefillCache | None = None) -> list[list[int]]:
    """One completion per prompt from the model(s) of ``w`` (see :class:`FastSampler`).

    Rows are member-major, ``len(prompts) // w.members`` per member, and member ``m`` draws
    from ``generators[m]`` (``None``: the global torch RNG) exactly the uniforms its rows
    would draw sampled alone: one per row and model step, and none once all its rows have
    ended. ``static`` decodes over a static cache (:mod:`derl_bench.policies.decode`;
    ``None``: :func:`~derl_bench.policies.decode.use_static` decides, a CUDA graph on a GPU);
    the tokens are the same either way, up to float rounding.

    ``forced`` (one model, default step): after each drawn token, the tokens the row's
    constraint leaves no choice for (:data:`ForcedTokens`) are written at once and run through
    the model in the next step together with the drawn one, instead of one step each; a
    forced token's draw would have had probability one, so the completions' distribution is
    the same, for fewer steps. Elsewhere ``forced`` is not used (the hook still allows only
    those tokens, each then drawn in its own step).

    ``prefill_cache`` (one model, non-empty prompts): prompts it holds are not prefilled again,
    and those it lacks are added (:class:`PrefillCache`); the tokens are the same, up to float
    rounding (a prompt's keys come from the batch it was first run in).
    """
    from derl_bench.policies.decode import static_decoder, use_static

    members = w.members
    device, dtype = w.embed.device, w.embed.dtype
    batch = len(prompts)
    per = batch // members
    width = max(len(p) for p in prompts)
    total = width + max_new_tokens
    ids, valid, positions, prefill_mask = _left_padded(prompts, width, total, pad_id, device)
    next_position = positions[:, -1:] + 1
    layers = w.packed()
    cos_table, sin_table = w.rope(total, dtype)
    decoder = None
    if use_static(device, static) and max_new_tokens > 1:
        decoder, rows_at = static_decoder(w, batch, total)
    if decoder is not None or members > 1:
        forced = None

    # The static decoder has its own cache: the prompts' keys and values go there after the
    # prefill, which then needs only their columns.
    shape = (batch, w.kv_heads, total if decoder is None else width, w.head_dim)
    cache = [(torch.empty(shape, dtype=dtype, device=device),
              torch.empty(shape, dtype=dtype, device=device)) for _ in w.layers]
    shared = shared_prefixes(prompts, members) if share_prefix else None
    if (prefill_cache is not None and members == 1 and all(len(p) for p in prompts)
            and prefill_cache.usable(w)):
        logits = _prefill_cached(w, layers, prompts, width, cache, cos_table, sin_table,
                                 prefill_cache)
    elif shared is None:
        logits = w.step(layers, ids, cos_table[positions], sin_table[positions], cache, 0,
                        prefill_mask)
    else:
        # The rows of a group share their prompt: prefill it once, then copy its keys and
        # values to every row of the group.
        unique = torch.tensor(shared[0], device=device)
        inverse = torch.tensor(shared[1], device=device)
        pre_shape = (len(shared[0]), w.kv_heads, width, w.head_dim)
        prefix = [(torch.empty(pre_shape, dtype=dtype, device=device),
                   torch.empty(pre_shape, dtype=dtype, device=device)) for _ in w.layers]
        logits = w.step(layers, ids[unique], cos_table[positions[unique]],
                        sin_table[positions[unique]], prefix, 0, prefill_mask[unique])[inverse]
        for (k_cache, v_cache), (k_pre, v_pre) in zip(cache, prefix, strict=True):
            k_cache[:, :, :width] = k_pre[inverse]
            v_cache[:, :, :width] = v_pre[inverse]

    if decoder is not None:
        decoder.begin(layers, cache, valid[:, :width], rows_at)

    completions: list[list[int]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=device)
    eos_set = set(eos.tolist())
    tokens_out = []
    column = width  # the next cache column (forced chunks can use more than a column a token)
    for t in range(max_new_tokens):
        active = (~done).nonzero().squeeze(-1)
        if logits_hook is not None:
            logits = logits_hook(logits, completions, active)
        uniforms = None
        if temperature > 0 and members > 1:
            running = (~done.view(members, per).all(1)).tolist()
            uniforms = torch.cat([
                torch.rand((per, 1), generator=g, device=device) if live
                else torch.zeros((per, 1), device=device)
                for g, live in zip(generators, running, strict=True)])
        token = sample_tokens(logits, temperature, top_p, generators[0], uniforms)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        tokens_out.append(token)
        if logits_hook is not None or forced is not None:
            for row in active.tolist():
                completions[row].append(int(token[row]))
        done = done | torch.isin(token, eos)
        chunks: dict[int, list[int]] = {}
        if forced is not None:
            for row in active.tolist():
                written = completions[row]
                if written[-1] in eos_set or len(written) >= max_new_tokens:
                    done[row] = True
                    continue
                extra = list(forced(row, written))[:max_new_tokens - len(written)]
                if extra:
                    drawn = written[-1]
                    written += extra
                    if extra[-1] in eos_set or len(written) >= max_new_tokens:
                        done[row] = True
                    else:
                        chunks[row] = [drawn, *extra]
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        if decoder is not None:
            logits = decoder.step(token, cos_table[next_position], sin_table[next_position],
                                  column)
        elif chunks:
            if column + max(len(c) for c in chunks.values()) > valid.shape[1]:
                cache, valid = _grown(cache, valid, max_new_tokens)
            logits = _chunk_step(w, layers, token, chunks, done, cache, valid, column,
                                 next_position, cos_table, sin_table, pad_id)
            taken = torch.tensor([len(chunks.get(r, (0,))) for r in range(batch)],
                                 device=device)[:, None]
            column += int(taken.max())
            next_position = next_position + taken
            continue
        else:
            if column >= valid.shape[1]:  # forced chunks took more columns than tokens
                cache, valid = _grown(cache, valid, max_new_tokens)
            valid[:, column] = True
            logits = w.step(layers, token.unsqueeze(1), cos_table[next_position],
                            sin_table[next_position], cache, column,
                            valid[:, None, None, :column + 1])
        column += 1
        next_position = next_position + 1
    if forced is not None:
        return [c[:next((i + 1 for i, x in enumerate(c) if x in eos_set), len(c))]
                for c in completions]
    out = torch.stack(tokens_out, 1).tolist() if tokens_out else [[] for _ in range(batch)]
    result = []
    for row in out:
        kept: list[int] = []
        for token in row:
            kept.append(int(token))
            if token in eos_set:
                break
        result.append(kept)
    return result


def _grown(cache: list[tuple[torch.Tensor, torch.Tensor]], valid: torch.Tensor, more: int,
           ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The key/value cache and its valid mask with ``more`` empty columns after theirs."""
    def wider(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x.new_empty(*x.shape[:2], more, x.shape[3])], 2)

    return ([(wider(k), wider(v)) for k, v in cache],
            torch.cat([valid, valid.new_zeros(valid.shape[0], more)], 1))


def _chunk_step(w: Weights, layers: list[tuple], token: torch.Tensor,
                chunks: dict[int, list[int]], done: torch.Tensor,
                cache: list[tuple[torch.Tensor, torch.Tensor]], valid: torch.Tensor,
                column: int, next_position: torch.Tensor, cos_table: torch.Tensor,
                sin_table: torch.Tensor, pad_id: int) -> torch.Tensor:
    """One model step over each row's drawn token and the forced tokens after it (``chunks``;
    other running rows: the drawn token alone), right-aligned in ``k`` new cache columns from
    ``column`` so that every row's last position is its last token; the columns a shorter row
    leaves empty are masked out as keys. Returns the rows' next logits."""
    batch, device = token.shape[0], token.device
    k = max(len(c) for c in chunks.values())
    ids = torch.full((batch, k), pad_id, dtype=torch.long, device=device)
    real = torch.zeros((batch, k), dtype=torch.bool, device=device)
    running = (~done).tolist()
    for row in range(batch):
        tokens = chunks.get(row)
        if tokens is None:
            if not running[row]:
                continue
            tokens = [int(token[row])]
        ids[row, k - len(tokens):] = torch.tensor(tokens, device=device)
        real[row, k - len(tokens):] = True
    end = column + k
    valid[:, column:end] = real
    # A row's real tokens take its next positions; empty columns any (they are never keys).
    offsets = torch.arange(k, device=device)[None] - (k - real.sum(1, keepdim=True))
    positions = (next_position + offsets).clamp(min=0)
    mask = valid[:, None, None, :end].expand(batch, 1, k, end).clone()
    block = torch.ones(k, k, dtype=torch.bool, device=device).tril()
    mask[..., column:end] &= block
    # An empty column's query sees itself, so that no query row is all masked.
    mask[..., column:end] |= torch.eye(k, dtype=torch.bool, device=device)
    return w.step(layers, ids, cos_table[positions], sin_table[positions], cache, column, mask)


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
               logits_hook: LogitsHook | None = None,
               share_prefix: bool = True, static: bool | None = None,
               forced: ForcedTokens | None = None,
               prefill_cache: PrefillCache | None = None) -> list[list[int]]:
        """One completion per prompt, each ending at (and including) its first end token.

        The same ``seed`` (or the same state of the global torch RNG when no seed or generator
        is given) and the same prompts give the same completions. Rows with the same prompt
        (a GRPO group) prefill it once unless ``share_prefix`` is off; the draws are the same
        either way. ``static`` picks the decode step and ``forced`` writes tokens a
        constraint leaves no choice for without a step each, and ``prefill_cache`` keeps
        prompts across calls (see :func:`sample_rows`).
        """
        if not prompts:
            return []
        w = _weights(self.model)
        if generator is None and seed is not None:
            generator = torch.Generator(device=w.embed.device).manual_seed(int(seed))
        return sample_rows(w, prompts, max_new_tokens, temperature, top_p, [generator],
                           self.eos.tolist(), self.pad_id, logits_hook, share_prefix, static,
                           forced, prefill_cache)


__all__ = ["SUPPORTED_TYPES", "FastSampler", "ForcedTokens", "PrefillCache", "Weights",
           "causal_hidden", "causal_logits", "hidden_states", "lm_head", "one_query_attention",
           "prefixed_hidden", "sample_rows", "sample_tokens", "shared_prefixes", "supports",
           "supports_config"]
