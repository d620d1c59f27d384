"""Decoding over a static key/value cache: one fixed-shape step, a CUDA graph on a GPU.

The lean sampler (:func:`~derl_bench.policies.fast.sample_rows`) decodes one token per row per
step. Its default step attends to the cache columns written so far, so every step has new
shapes; on a GPU each of its few hundred small kernels is then launched from Python, and a
0.5B model's step costs the same ~14 ms at 16 rows as at 256: launch-bound. A
:class:`StaticDecoder` runs the step on fixed shapes instead:

- the cache has a bucketed number of rows (a power of two per member: rows past the real ones
  are padding that decodes and is never read) and of columns (a multiple of
  :data:`LENGTH_BUCKET`);
- the token, its rotary angles, the column written and the mask of valid columns live in
  buffers the step reads; attention spans every column and the mask hides the unused ones;
- so the step's shapes never change, and on a CUDA device it is captured once as a CUDA graph
  (``torch.cuda.CUDAGraph``) and replayed: one launch per token instead of hundreds.

A decoder is kept per weights object and bucket (:func:`static_decoder`), so later calls with
the same bucket replay the same graph; before each call it copies the weights it reads into
its own buffers (a graph reads fixed addresses), so the optimiser's steps are seen.

On a CPU the same step runs eagerly (no graph): slower than the default step there (attention
over every column of the bucket), so the CPU keeps the default step, but it is how the static
path is tested against the default path and ``generate``. :func:`use_static` says which runs.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from derl_bench.policies.lean import Weights, _layer_forward, one_query_attention

STATIC_ENV = "DERL_BENCH_STATIC_DECODE"
"""``0``: every device decodes with the default step; ``1``: every device decodes over the
static cache (a CPU eagerly); unset: the static cache (and its CUDA graph) on a GPU only."""

LENGTH_BUCKET = 128
"""Cache columns are a multiple of this: prompts plus new tokens of nearby lengths share one
captured graph."""

KEPT_DECODERS = 2
"""Decoders (buckets) kept per weights object; each holds a cache and a graph's memory."""


def use_static(device: torch.device, static: bool | None = None) -> bool:
    """Whether decoding on ``device`` runs over the static cache: ``static`` when given, else
    as :data:`STATIC_ENV` says (default: on CUDA devices only)."""
    if static is not None:
        return static
    setting = os.environ.get(STATIC_ENV)
    if setting is not None:
        return setting != "0"
    return device.type == "cuda"


COMPILE_ENV = "DERL_BENCH_COMPILE_DECODE"
"""``1``: the static step is compiled by ``torch.compile`` (inductor) before its capture;
unset or ``0``: captured as it is."""


def compile_step() -> bool:
    """Whether the static step is compiled before its capture (:data:`COMPILE_ENV`)."""
    return os.environ.get(COMPILE_ENV, "0") not in ("", "0")


def row_bucket(rows: int) -> int:
    """Rows of a member's block in the static cache: the next power of two.

    >>> [row_bucket(n) for n in (1, 3, 8, 9, 200)]
    [1, 4, 8, 16, 256]
    """
    return 1 << max(0, rows - 1).bit_length()


def length_bucket(columns: int) -> int:
    """Columns of the static cache: the next multiple of :data:`LENGTH_BUCKET`.

    >>> [length_bucket(n) for n in (1, 128, 129)]
    [128, 128, 256]
    """
    return -(-columns // LENGTH_BUCKET) * LENGTH_BUCKET


class StaticDecoder:
    """One decode step over a static cache of ``rows`` rows and ``length`` columns for the
    model(s) of ``w`` (see the module docstring); ``graph`` captures it as a CUDA graph."""

    def __init__(self, w: Weights, rows: int, length: int, graph: bool) -> None:
        device, dtype = w.embed.device, w.embed.dtype
        # A proxy: the decoder lives on its weights (static_decoder), so a strong reference
        # back would make a cycle that frees the cache and the graph only when the garbage
        # collector next runs, not when the model goes.
        self.w = weakref.proxy(w)
        self.rows, self.length, self.graph = rows, length, graph
        shape = (rows, w.kv_heads, length, w.head_dim)
        # Zeros, not empty: a masked column gets weight 0, and 0 * NaN would still be NaN.
        self.cache = [(torch.zeros(shape, dtype=dtype, device=device),
                       torch.zeros(shape, dtype=dtype, device=device)) for _ in w.layers]
        self.token = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.cos = torch.zeros((rows, 1, w.head_dim), dtype=dtype, device=device)
        self.sin = torch.zeros_like(self.cos)
        self.valid = torch.zeros((rows, length), dtype=torch.bool, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.layers: list[tuple] = []
        self.index = torch.zeros(0, dtype=torch.long, device=device)
        self._graph: Any = None
        self._compiled: Any = None
        self._output: torch.Tensor | None = None

    def begin(self, layers: list[tuple], prefill: Sequence[tuple[torch.Tensor, torch.Tensor]],
              valid: torch.Tensor, index: torch.Tensor) -> None:
        """Start a call: the packed ``layers`` to run, the prompts' keys and values
        ``prefill`` (per layer, ``(real rows, kv_heads, width, D)``), their valid columns
        ``(real rows, width)``, and where each real row sits in the cache (``index``)."""
        if self.graph and self.layers:
            # The graph reads these addresses: copy this call's weights into them.
            for mine, theirs in zip(self.layers, layers, strict=True):
                for a, b in zip(mine, theirs, strict=True):
                    if isinstance(a, torch.Tensor) and a is not b:
                        a.copy_(b)
        elif self.graph:
            self.layers = [tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in layer)
                           for layer in layers]
        else:
            self.layers = layers
        width = valid.shape[1]
        self.index = index
        self.valid.zero_()
        self.valid[:, 0] = True  # padding rows attend to one column (no all-masked softmax)
        self.valid[index, :width] = valid
        for (k, v), (k_pre, v_pre) in zip(self.cache, prefill, strict=True):
            k[index, :, :width] = k_pre
            v[index, :, :width] = v_pre

    def step(self, token: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             column: int) -> torch.Tensor:
        """Write ``token`` ``(real rows,)`` at cache ``column`` with rotary angles ``cos`` and
        ``sin`` ``(real rows, 1, D)``; the logits ``(real rows, V)`` of the next token."""
        self.token[self.index, 0] = token
        self.cos[self.index] = cos
        self.sin[self.index] = sin
        self.valid[self.index, column] = True
        self.column.fill_(column)
        return self._run()[self.index]

    def _run(self) -> torch.Tensor:
        if self._compiled is None:
            # Inductor fuses the step's elementwise work (norms, rotary, the masked softmax):
            # captured as it is, the step replays one small kernel per operation.
            self._compiled = (torch.compile(self._forward, dynamic=False) if compile_step()
                              else self._forward)
        if not self.graph:
            return self._compiled()
        if self._graph is None:
            # Warm-up off the capture stream (kernels pick their plans), then capture; each
            # run rewrites the same column with the same values, so nothing is disturbed.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._compiled()
            torch.cuda.current_stream().wait_stream(stream)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._output = self._compiled()
        self._graph.replay()
        assert self._output is not None
        return self._output

    def _forward(self) -> torch.Tensor:
        w = self.w
        x = w.embed_ids(self.token)
        cos, sin = self.cos.unsqueeze(2), self.sin.unsqueeze(2)
        mask = self.valid[:, None, None, :]
        for layer, (k_cache, v_cache) in zip(self.layers, self.cache, strict=True):
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       k_cache: torch.Tensor = k_cache, v_cache: torch.Tensor = v_cache,
                       ) -> torch.Tensor:
                k_cache.index_copy_(2, self.column, k)
                v_cache.index_copy_(2, self.column, v)
                return one_query_attention(w, q, k_cache, v_cache, mask)

            x = _layer_forward(layer, x, cos, sin, w, attend)
        return w.head(w.final(x[:, -1]))


def static_decoder(w: Weights, rows: int, columns: int,
                   ) -> tuple[StaticDecoder, torch.Tensor]:
    """The decoder of ``w``'s bucket for ``rows`` real rows (member-major, ``w.members``
    blocks) and ``columns`` cache columns, and where each real row sits in its cache."""
    members = w.members
    per = rows // members
    block = row_bucket(per)
    length = length_bucket(columns)
    device = w.embed.device
    # Kept on the weights object, so they go with it (a decoder refers to its weights, so a
    # table keyed by weights would keep every model it ever decoded alive).
    kept: dict[tuple[int, int], StaticDecoder] = w.__dict__.setdefault("static_decoders", {})
    key = (members * block, length)
    decoder = kept.pop(key, None)
    if decoder is None:
        decoder = StaticDecoder(w, members * block, length, graph=device.type == "cuda")
    kept[key] = decoder  # the most recently used last
    while len(kept) > KEPT_DECODERS:
        kept.pop(next(iter(kept)))
    index = (torch.arange(members, device=device).repeat_interleave(per) * block
             + torch.arange(per, device=device).repeat(members))
    return decoder, index


__all__ = ["COMPILE_ENV", "KEPT_DECODERS", "LENGTH_BUCKET", "STATIC_ENV", "StaticDecoder",
           "compile_step", "length_bucket", "row_bucket", "static_decoder", "use_static"]
