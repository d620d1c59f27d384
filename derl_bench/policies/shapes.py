"""Real-shape models built in code: Qwen2.5's architectures with random weights.

Neither the released weights nor the released tokenizer can be fetched everywhere (CI, an
air-gapped cluster), yet memory, speed and shape bugs only show at the real size. This module
writes a HF model folder with the exact Qwen2.5 configuration of a named shape, random weights
in safetensors, and a tokenizer built in code that has the real vocabulary size and the real
special tokens at their real ids, so it loads through
:func:`~derl_bench.policies.policy.load_model_and_tokenizer` exactly like
``Qwen/Qwen2.5-0.5B-Instruct``::

    >>> SHAPES["qwen2.5-0.5b"].hidden_size, SHAPES["qwen2.5-0.5b"].num_hidden_layers
    (896, 24)
    >>> SHAPES["qwen2.5-0.5b-short"].num_hidden_layers
    2
    >>> QWEN_SPECIAL_TOKENS[0], QWEN_SPECIAL_TOKENS[2]
    (('<|endoftext|>', 151643, True), ('<|im_end|>', 151645, True))

What differs from the released tokenizer: the byte-level BPE below id 151643 is trained on this
project's generated corpus (a few thousand merges; the remaining ids up to 151642 are filler
tokens that no text encodes to, though they decode to bytes), so token ids of ordinary text
differ from Qwen's and a sequence is longer in tokens. The 22 added tokens (151643-151664),
their ``special`` flags, the end and pad tokens, the embedding size (151936 rows) and the chat
template (ChatML with tool calls) are Qwen2.5-Instruct's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

QWEN_VOCAB_SIZE = 151936
"""Rows of Qwen2.5's embedding matrix (the tokenizer uses the first 151665)."""
QWEN_BPE_SIZE = 151643
"""Ids below this are the byte-level BPE's; the added tokens follow."""

QWEN_SPECIAL_TOKENS: tuple[tuple[str, int, bool], ...] = (
    ("<|endoftext|>", 151643, True), ("<|im_start|>", 151644, True),
    ("<|im_end|>", 151645, True), ("<|object_ref_start|>", 151646, True),
    ("<|object_ref_end|>", 151647, True), ("<|box_start|>", 151648, True),
    ("<|box_end|>", 151649, True), ("<|quad_start|>", 151650, True),
    ("<|quad_end|>", 151651, True), ("<|vision_start|>", 151652, True),
    ("<|vision_end|>", 151653, True), ("<|vision_pad|>", 151654, True),
    ("<|image_pad|>", 151655, True), ("<|video_pad|>", 151656, True),
    ("<tool_call>", 151657, False), ("</tool_call>", 151658, False),
    ("<|fim_prefix|>", 151659, False), ("<|fim_middle|>", 151660, False),
    ("<|fim_suffix|>", 151661, False), ("<|fim_pad|>", 151662, False),
    ("<|repo_name|>", 151663, False), ("<|file_sep|>", 151664, False),
)
"""Qwen2.5's added tokens: text, id, and whether it is special (skipped when decoding)."""

QWEN_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}"
    "{%- endif %}"
    "{{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query."
    "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\\n<tools>\" }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "
    "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}"
    "{%- else %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}"
    "{{- '\", \"arguments\": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5-Instruct's chat template: ChatML, a default system prompt, tools and tool calls."""


@dataclass(frozen=True)
class ModelShape:
    """A decoder's architecture: the fields of its HF ``Qwen2Config`` that set its size."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int = QWEN_VOCAB_SIZE
    max_position_embeddings: int = 32768
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_window_layers: int = 21

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def parameters(self) -> int:
        """Number of weights (the embedding counted once when tied)."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.num_key_value_heads
        attn = h * h + h + 2 * (h * kv * self.head_dim + kv * self.head_dim) + h * h
        layer = attn + 3 * h * i + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * layer + h + head


_FULL = {
    "qwen2.5-0.5b": ModelShape(896, 4864, 24, 14, 2),
    "qwen2.5-1.5b": ModelShape(1536, 8960, 28, 12, 2, max_window_layers=21),
    "qwen2.5-3b": ModelShape(2048, 11008, 36, 16, 2, max_window_layers=70),
}

SHAPES: dict[str, ModelShape] = {
    **_FULL,
    **{f"{name}-short": replace(shape, num_hidden_layers=2) for name, shape in _FULL.items()},
    # torch's CPU bfloat16 GEMM without AVX512-BF16/AMX runs some layouts (the backward's
    # grad @ weight) at under 1 GFLOP/s, so a bfloat16 update at 896 wide takes tens of minutes
    # on such a CPU; the vocabulary, tokenizer, head size and dtype paths stay real here.
    "qwen2.5-narrow": ModelShape(128, 704, 2, 2, 1),
}
"""Named shapes: Qwen2.5 0.5B/1.5B/3B as released, ``-short`` variants (same width, heads and
vocabulary, 2 layers) that run on a CPU in CI, and ``qwen2.5-narrow`` (the vocabulary and the
64-wide heads at width 128, 2 layers) for bfloat16 training on any CPU."""

SHAPE_FILE = "model_shape.json"


def qwen_config(shape: ModelShape) -> Any:
    """The ``Qwen2Config`` of ``shape`` with Qwen2.5-Instruct's token ids."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size, num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
        rms_norm_eps=shape.rms_norm_eps, tie_word_embeddings=shape.tie_word_embeddings,
        use_sliding_window=False, sliding_window=shape.max_position_embeddings,
        max_window_layers=min(shape.max_window_layers, shape.num_hidden_layers),
        hidden_act="silu", initializer_range=0.02, attention_dropout=0.0,
        bos_token_id=151643, eos_token_id=151645, pad_token_id=151643,
    )


def _filler(count: int, taken: set[str]) -> list[str]:
    """``count`` byte-level strings of 2 and then 3 symbols absent from ``taken``. No merge
    produces them, so no text encodes to them; each still decodes to its bytes."""
    from itertools import product

    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    out: list[str] = []
    for n in (2, 3):
        for combo in product(alphabet, repeat=n):
            token = "".join(combo)
            if token not in taken:
                out.append(token)
                if len(out) == count:
                    return out
    raise ValueError(f"cannot make {count} filler tokens")


def build_qwen_tokenizer(seed: int = 0, merges_vocab: int = 4096) -> Any:
    """A tokenizer with Qwen2.5's vocabulary layout (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    from derl_bench.policies.tiny import train_byte_bpe

    trained = json.loads(train_byte_bpe(merges_vocab, seed, special_tokens=()).to_str())
    vocab: dict[str, int] = trained["model"]["vocab"]
    for token in _filler(QWEN_BPE_SIZE - len(vocab), set(vocab)):
        vocab[token] = len(vocab)
    bpe = Tokenizer.from_str(json.dumps(trained))
    for text, token_id, special in QWEN_SPECIAL_TOKENS:
        added = AddedToken(text, special=special, normalized=False)
        (bpe.add_special_tokens if special else bpe.add_tokens)([added])
        if bpe.token_to_id(text) != token_id:
            raise AssertionError(f"{text} got id {bpe.token_to_id(text)}, not {token_id}")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        padding_side="left", clean_up_tokenization_spaces=False,
        additional_special_tokens=[t for t, _, special in QWEN_SPECIAL_TOKENS[1:] if special],
        model_max_length=131072,
    )
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    return tokenizer


def build_shape_model(shape: ModelShape, seed: int = 0, dtype: str = "bfloat16") -> Any:
    """A ``Qwen2ForCausalLM`` of ``shape`` with random weights (HF's initialisation)."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(qwen_config(shape)).to(getattr(torch, dtype))
    model.generation_config.pad_token_id = 151643
    model.generation_config.eos_token_id = [151645, 151643]
    model.generation_config.bos_token_id = 151643
    return model


def init_shape_model(path: str | Path, shape: str, seed: int = 0, dtype: str = "bfloat16",
                     overwrite: bool = False) -> Path:
    """Write the model of shape ``shape`` (a key of :data:`SHAPES`) and its tokenizer to
    ``path``; the folder appears whole or not at all. Weights are stored in ``dtype``
    (``bfloat16`` as released, or ``float32``)."""
    from derl_bench.policies.tiny import write_model_dir

    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(sorted(SHAPES))}")
    if dtype not in ("bfloat16", "float32", "float16"):
        raise ValueError(f"dtype must be bfloat16, float16 or float32, got {dtype!r}")
    return write_model_dir(
        path, lambda: (build_shape_model(SHAPES[shape], seed, dtype), build_qwen_tokenizer(seed)),
        {SHAPE_FILE: {"shape": shape, "seed": seed, "dtype": dtype, **asdict(SHAPES[shape])}},
        overwrite=overwrite)


__all__ = ["QWEN_CHAT_TEMPLATE", "QWEN_SPECIAL_TOKENS", "QWEN_VOCAB_SIZE", "SHAPES",
           "ModelShape", "build_qwen_tokenizer", "build_shape_model",
           "init_shape_model", "qwen_config"]
