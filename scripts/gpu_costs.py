"""The COMPUTED cost table of docs/gpu.md ("What an inner run costs"): FLOPs and memory of one
GRPO step of the baseline recipes at Qwen2.5's real shapes, from the shapes alone. Usage::

    python scripts/gpu_costs.py     # prints the table docs/gpu.md shows
"""

from __future__ import annotations

from derl_bench.policies.shapes import SHAPES, ModelShape

RECIPES = (("gsm8k-outcome", 8, 32), ("meta-derl-gsm8k inner", 2, 16))
"""Each recipe's rows per step (problems x group) and new tokens."""
PROMPT_TOKENS = 224
"""The built tokenizer's length of a GSM8K prompt (Qwen's tokenizer gives fewer)."""
LORA_R = 16


def linear_parameters(shape: ModelShape) -> int:
    """Weights of the decoder blocks' linear projections (what a forward multiplies per
    token, besides the output projection)."""
    h, i, kv = shape.hidden_size, shape.intermediate_size, shape.num_key_value_heads
    return shape.num_hidden_layers * (2 * h * h + 2 * h * kv * shape.head_dim + 3 * h * i)


def lora_parameters(shape: ModelShape, r: int) -> int:
    """Weights of a rank-``r`` adapter on all seven projections of every block."""
    h, i, kv = shape.hidden_size, shape.intermediate_size, shape.num_key_value_heads
    kv_dim = kv * shape.head_dim
    per_layer = r * ((h + h) * 2 + (h + kv_dim) * 2 + (h + i) * 2 + (i + h))
    return shape.num_hidden_layers * per_layer


def step_cost(shape: ModelShape, rows: int, prompt_tokens: int, new_tokens: int,
              dtype: str = "bfloat16", lora_r: int | None = None, kl: bool = True,
              logprob_chunk: int | None = 1024, recompute: bool = False) -> dict:
    """COMPUTED cost of one GRPO step (one update per batch) of :mod:`derl_bench.grpo`.

    ``rows`` sequences of ``prompt_tokens + new_tokens`` positions. Sampling runs a prefill of
    the prompts and one step per new token (KV cache); the update runs one forward and backward
    over every position, the output projection only on the ``new_tokens`` positions the loss
    reads; the KL reference one more forward. Matrix-product FLOPs only (2 per multiply-add;
    attention's score and value products included). Memory in bytes: weights, gradients and
    AdamW's two moments (in the parameters' dtype, as torch keeps them), the reference (a
    second copy of the weights for full fine-tuning, none for LoRA: the adapter switched
    off), the sampler's KV cache, the loss's logits (plus their float32 copy) of at most
    ``logprob_chunk`` positions at a time (``None``: every completion token's at once; more
    positions than a chunk make the logits again in the backward pass) and the
    activations the backward keeps (inputs of every projection, the attention's q/k/v and
    output, the MLP's gate and up: ``5h + 3i + 2 kv_dim`` values per token per layer; SDPA
    keeps no ``T x T`` matrix; with ``recompute`` only every layer's input, and one layer's
    activations at a time) and the lean forward's packed weight copies. ``recompute`` adds a
    forward pass of the layers to the update's FLOPs.

        >>> cost = step_cost(SHAPES["qwen2.5-0.5b"], rows=8, prompt_tokens=224, new_tokens=32)
        >>> round(cost["kv_cache_bytes"] / 2**20)
        24
    """
    width = 4 if dtype == "float32" else 2
    h, layers, vocab = shape.hidden_size, shape.num_hidden_layers, shape.vocab_size
    kv_dim = shape.num_key_value_heads * shape.head_dim
    length = prompt_tokens + new_tokens
    tokens = rows * length
    linear = 2 * linear_parameters(shape)
    head = 2 * h * vocab
    # Attention products: q.k and p.v for each of h query dims, over the causal context.
    attention = 2 * 2 * layers * h * length / 2
    sample = rows * (length * (linear + attention) + new_tokens * head)
    forward = tokens * (linear + attention) + rows * new_tokens * head
    adapters = 0 if lora_r is None else lora_parameters(shape, lora_r)
    if lora_r is None:
        backward = 2 * forward
    else:
        # Gradients flow through every frozen weight to the activations (one product), but no
        # weight gradient is formed except the adapters' (small).
        backward = forward + tokens * 2 * 2 * adapters
        forward += tokens * 2 * adapters
    reference = forward if kl else 0
    params = shape.parameters()
    if lora_r is None:
        weights = params * width
        train_state = params * width * 3  # gradient + two AdamW moments
        ref_bytes = params * width if kl else 0
    else:
        weights = params * width
        train_state = adapters * 4 * 4  # float32 adapter, its gradient and two moments
        ref_bytes = 0
    per_layer = tokens * (5 * h + 3 * shape.intermediate_size + 2 * kv_dim) * width
    activations = (tokens * layers * h * width + per_layer if recompute
                   else per_layer * layers)
    if recompute:
        backward += tokens * (linear + attention)
    if logprob_chunk is not None and rows * new_tokens > logprob_chunk:
        backward += rows * new_tokens * head  # each chunk's logits made again
    positions = rows * new_tokens if logprob_chunk is None else min(rows * new_tokens,
                                                                     logprob_chunk)
    logits = positions * vocab * (width + (0 if width == 4 else 4))
    kv_cache = 2 * layers * rows * length * kv_dim * width
    # The lean forward concatenates q/k/v and gate/up into new matrices (with LoRA every
    # projection is a new ``W + scaling B A``); autograd keeps them until the backward.
    i = shape.intermediate_size
    packed = layers * width * (linear_parameters(shape) // layers if lora_r is not None
                               else h * h + 2 * h * kv_dim + 2 * h * i)
    return {
        "sample_flops": sample, "update_flops": forward + backward,
        "reference_flops": reference, "step_flops": sample + forward + backward + reference,
        "weights_bytes": weights, "train_state_bytes": train_state,
        "reference_bytes": ref_bytes, "kv_cache_bytes": kv_cache,
        "activation_bytes": activations, "logits_bytes": logits,
        "packed_bytes": packed,
        "peak_bytes": weights + train_state + ref_bytes + max(kv_cache,
                                                              activations + logits + packed),
        "trainable_parameters": params if lora_r is None else adapters,
    }


def table() -> str:
    """docs/gpu.md's table, a row per shape, recipe, mode and dtype."""
    gib, mib = 2**30, 2**20
    lines = [
        "| shape | recipe | mode | dtype | trainable | TFLOP per step: total (sample / update / "
        "reference) | weights + grads & AdamW + reference, GiB | KV cache, MiB | activations + "
        "logits + packed weights, MiB | peak, GiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"):
        for recipe, rows, new_tokens in RECIPES:
            for lora_r in (None, LORA_R):
                for dtype in ("bfloat16", "float32"):
                    c = step_cost(SHAPES[name], rows, PROMPT_TOKENS, new_tokens, dtype, lora_r)
                    mode = "full" if lora_r is None else f"LoRA r={lora_r}"
                    tflop = {k: c[f"{k}_flops"] / 1e12
                             for k in ("step", "sample", "update", "reference")}
                    lines.append(
                        f"| {name} | {recipe} | {mode} | {dtype} | "
                        f"{c['trainable_parameters'] / 1e6:.1f}M | {tflop['step']:.2f} "
                        f"({tflop['sample']:.2f} / {tflop['update']:.2f} / "
                        f"{tflop['reference']:.2f}) | {c['weights_bytes'] / gib:.2f} + "
                        f"{c['train_state_bytes'] / gib:.2f} + {c['reference_bytes'] / gib:.2f} | "
                        f"{c['kv_cache_bytes'] / mib:.0f} | {c['activation_bytes'] / mib:.0f} + "
                        f"{c['logits_bytes'] / mib:.0f} + {c['packed_bytes'] / mib:.0f} | "
                        f"{c['peak_bytes'] / gib:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
