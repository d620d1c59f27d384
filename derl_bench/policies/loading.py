"""Loading a causal LM and its tokenizer: a HF name or folder, or a LoRA adapter checkpoint.

A folder holding ``adapter_config.json`` is a LoRA adapter checkpoint: it loads as its base
model (the path recorded in the adapter's config) plus the adapter, trainable.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from derl_bench.progress import quiet_transformers

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a local folder holding a LoRA adapter (not a whole model)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


class ModelNotFoundError(FileNotFoundError):
    """A model given as a local path that does not exist (no hub lookup is tried for it)."""


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def model_problem(name_or_path: str | Path) -> str | None:
    """Why ``name_or_path`` cannot be a model, or None: an existing folder, or a name shaped
    like a hub id (``gpt2``, ``Qwen/Qwen2.5-1.5B-Instruct``), may be one; anything else that
    does not exist is a missing folder, not something to look up on the hub.

        >>> model_problem("/no/such/run/final-model")
        'no such model folder: /no/such/run/final-model'
        >>> model_problem("Qwen/Qwen2.5-1.5B-Instruct") is None
        True
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        return None if path.is_dir() else f"the model {text} is a file, not a model folder"
    return None if _HUB_ID.fullmatch(text) else f"no such model folder: {text}"


def load_model_and_tokenizer(name_or_path: str | Path, device: str = "cpu",
                             dtype: str | None = None) -> tuple[Any, Any]:
    """``AutoModelForCausalLM`` and ``AutoTokenizer`` from a name or path, ready for GRPO:
    left padding for generation and a pad token (the end token when the model has none).

    A LoRA adapter checkpoint loads as its base model plus the adapter, trainable
    (:func:`load_model_and_adapter`). A path that does not exist is a
    :class:`ModelNotFoundError`, never a hub lookup."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    problem = model_problem(name_or_path)
    if problem:
        raise ModelNotFoundError(problem)
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


__all__ = ["ADAPTER_CONFIG", "ModelNotFoundError", "is_adapter_dir", "load_model_and_adapter",
           "load_model_and_tokenizer", "model_problem"]
