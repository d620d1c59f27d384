"""Loading a causal LM and its tokenizer: a HF name or folder, or a LoRA adapter checkpoint.

A folder holding ``adapter_config.json`` is a LoRA adapter checkpoint: it loads as its base
model (the path recorded in the adapter's config) plus the adapter, trainable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from derl_bench.progress import quiet_transformers

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a local folder holding a LoRA adapter (not a whole model)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def load_model_and_tokenizer(name_or_path: str | Path, device: str = "cpu",
                             dtype: str | None = None) -> tuple[Any, Any]:
    """``AutoModelForCausalLM`` and ``AutoTokenizer`` from a name or path, ready for GRPO:
    left padding for generation and a pad token (the end token when the model has none).

    A LoRA adapter checkpoint loads as its base model plus the adapter, trainable
    (:func:`load_model_and_adapter`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if is_adapter_dir(name_or_path):
        return load_model_and_adapter(name_or_path, device, dtype)

    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch_dtype = getattr(torch, dtype) if dtype and dtype != "auto" else (
        "auto" if dtype == "auto" else torch.float32)
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=torch_dtype)
    # transformers annotates PreTrainedModel.to through a decorator mypy cannot follow
    return model.to(device), tokenizer  # type: ignore[arg-type]


def load_model_and_adapter(path: str | Path, device: str = "cpu", dtype: str | None = None,
                           ) -> tuple[Any, Any]:
    """An adapter checkpoint as base model + adapter (trainable) and the checkpoint's tokenizer."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    config = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
    base_path = config.get("base_model_name_or_path")
    if not base_path:
        raise ValueError(f"{path}: {ADAPTER_CONFIG} names no base model")
    if not Path(base_path).exists() and Path(base_path).is_absolute():
        raise FileNotFoundError(f"{path}: the adapter's base model {base_path} is gone")
    base, tokenizer = load_model_and_tokenizer(base_path, device, dtype)
    if (Path(path) / "tokenizer_config.json").exists():
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    model = PeftModel.from_pretrained(base, str(path), is_trainable=True)
    return model.to(device), tokenizer


__all__ = ["ADAPTER_CONFIG", "is_adapter_dir", "load_model_and_adapter",
           "load_model_and_tokenizer"]
