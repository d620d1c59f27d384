"""LoRA adapters (peft) on a causal LM: settings, wrapping, adapter checkpoints, merged weights.

A LoRA run trains only low-rank matrices ``A`` (``r x in``) and ``B`` (``out x r``) beside each
targeted projection ``W``; the layer computes ``x W^T + (alpha / r) x A^T B^T``. Everything
else in the project sees the adapted model through three functions here:

- :func:`load_model_and_adapter` loads an adapter checkpoint (a folder with
  ``adapter_config.json``) as its base model plus the adapter, trainable;
- :func:`decoder_view` and :func:`linear_weight` give the lean forward pass
  (:mod:`derl_bench.policies.fast`) the MERGED weight ``W + (alpha / r) B A``, computed each
  time the weights are read, so sampling and training see the live adapter (and gradients reach
  ``A`` and ``B``) without a merged copy of the model;
- :class:`FrozenBase` is the KL reference of a LoRA run: the same modules with the adapter
  switched off, so the reference costs no second copy of the base weights.

    >>> LoraSpec.from_dict({"r": 8, "alpha": 16}).scaling
    2.0
    >>> LoraSpec.from_dict({"r": 0})
    Traceback (most recent call last):
    ...
    ValueError: lora.r must be a positive integer, got 0
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Projections a LoRA adapter may target: every linear layer of a Qwen2/Llama decoder block."""

ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class LoraSpec:
    """The ``lora:`` mapping of a recipe."""

    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = LORA_TARGETS

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"lora.r must be a positive integer, got {self.r!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float) or \
                self.alpha <= 0:
            raise ValueError(f"lora.alpha must be a positive number, got {self.alpha!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, int | float) or \
                not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout must be in [0, 1), got {self.dropout!r}")
        targets = self.target_modules
        if isinstance(targets, str) or not targets or \
                any(t not in LORA_TARGETS for t in targets) or len(set(targets)) != len(targets):
            raise ValueError(f"lora.target_modules must be a non-empty list of distinct names "
                             f"from {list(LORA_TARGETS)}, got {targets!r}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LoraSpec:
        """Validate a recipe's ``lora:`` mapping (unknown keys are an error)."""
        if not isinstance(values, dict):
            raise ValueError(f"lora must be a mapping of r, alpha, dropout, target_modules, "
                             f"got {values!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown lora keys: {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        values = dict(values)
        if isinstance(values.get("target_modules"), list):
            values["target_modules"] = tuple(values["target_modules"])
        return cls(**values)

    @property
    def scaling(self) -> float:
        """``alpha / r``: the factor on ``B A``."""
        return float(self.alpha) / self.r

    def peft_config(self) -> Any:
        from peft import LoraConfig

        # peft annotates lora_alpha as int but scales by it as a float
        return LoraConfig(r=self.r, lora_alpha=self.alpha,  # type: ignore[arg-type]
                          lora_dropout=float(self.dropout),
                          target_modules=list(self.target_modules), bias="none",
                          task_type="CAUSAL_LM")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["target_modules"] = list(self.target_modules)
        return out


def is_peft_model(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is in the train extra
        return False
    return isinstance(model, PeftModel)


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a local folder holding a LoRA adapter (not a whole model)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_spec(model: Any) -> LoraSpec:
    """The :class:`LoraSpec` of a peft model's active adapter."""
    config = model.peft_config[model.active_adapter]
    return LoraSpec(r=int(config.r), alpha=config.lora_alpha, dropout=config.lora_dropout,
                    target_modules=tuple(t for t in LORA_TARGETS if t in config.target_modules))


def apply_lora(model: Any, spec: LoraSpec, base_path: str | Path | None = None) -> Any:
    """Wrap ``model`` with a fresh adapter (``B = 0``, so the output is unchanged); the base
    weights are frozen. ``base_path`` (made absolute when it is a local folder) is recorded in
    the adapter's config so an adapter checkpoint finds its base from any directory."""
    from peft import get_peft_model

    peft_model = get_peft_model(model, spec.peft_config())
    if base_path is not None:
        base = Path(base_path)
        peft_model.peft_config[peft_model.active_adapter].base_model_name_or_path = (
            str(base.resolve()) if base.exists() else str(base_path))
    return peft_model


def load_model_and_adapter(path: str | Path, device: str = "cpu", dtype: str | None = None,
                           ) -> tuple[Any, Any]:
    """An adapter checkpoint as base model + adapter (trainable) and the checkpoint's tokenizer."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    from derl_bench.policies.policy import load_model_and_tokenizer

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


def merge_adapter(path: str | Path, output: str | Path, overwrite: bool = False) -> Path:
    """Fold the adapter checkpoint at ``path`` into its base and write a whole model folder
    (weights in the base's dtype) to ``output``, atomically."""
    from derl_bench.policies.tiny import write_model_dir

    if not is_adapter_dir(path):
        raise ValueError(f"{path} is not a LoRA adapter checkpoint (no {ADAPTER_CONFIG})")

    def build() -> tuple[Any, Any]:
        config = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
        dtype = json.loads((Path(config["base_model_name_or_path"]) / "config.json").read_text(
        )).get("dtype") if Path(config["base_model_name_or_path"]).exists() else None
        model, tokenizer = load_model_and_adapter(path, dtype=dtype)
        return model.merge_and_unload(), tokenizer

    return write_model_dir(output, build, {}, overwrite=overwrite)


class FrozenBase(torch.nn.Module):
    """A peft model with its adapter switched off: the frozen base, sharing its weights.

    It is the KL reference of a LoRA run; calling it never changes the wrapped model.
    """

    peft_model: Any

    def __init__(self, peft_model: Any) -> None:
        super().__init__()
        # Not registered as a submodule: the reference must not own (or move, or save) the
        # policy's parameters.
        object.__setattr__(self, "peft_model", peft_model)

    @property
    def config(self) -> Any:
        return self.peft_model.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                ) -> Any:
        with self.peft_model.disable_adapter():
            return self.peft_model(input_ids=input_ids, attention_mask=attention_mask)


@dataclass(frozen=True)
class DecoderView:
    """What the lean forward pass reads: the HF causal LM holding the modules, and whether the
    LoRA deltas of its adapted projections are added to the weights."""

    model: Any
    adapters: bool


LEAN_ENV = "DERL_BENCH_LEAN"
"""Set to ``0`` to run every model through transformers (``generate`` for sampling, the
module forward for training): the reference the lean path is checked against."""


def lean_allowed(model: Any) -> bool:
    """Whether the lean forward pass may run ``model``: not when it is switched off
    (``DERL_BENCH_LEAN=0``), nor for a LoRA model in training mode with dropout on its adapter
    input (a merged weight cannot express that dropout)."""
    if os.environ.get(LEAN_ENV, "1") == "0":
        return False
    if is_peft_model(model) and model.training:
        return not any(float(getattr(c, "lora_dropout", 0.0)) > 0
                       for c in model.peft_config.values())
    return True


def decoder_view(model: Any) -> DecoderView:
    """What the lean forward pass reads for ``model`` (a plain HF model, a peft model, or a
    :class:`FrozenBase`)."""
    if isinstance(model, FrozenBase):
        return DecoderView(model.peft_model.get_base_model(), False)
    if is_peft_model(model):
        return DecoderView(model.get_base_model(), True)
    return DecoderView(model, False)


def lean_parameters(model: Any, adapters: bool) -> dict[str, Any]:
    """``model``'s parameters under the names of the plain HF model, for the lean pass; each
    LoRA-adapted projection's ``.weight`` is a function returning :func:`linear_weight` (read
    at every forward, so it follows the adapter's training)."""
    from functools import partial

    named: dict[str, Any] = {
        name.replace(".base_layer.", "."): param
        for name, param in model.named_parameters(remove_duplicate=False) if "lora_" not in name}
    for name, module in model.named_modules():
        if getattr(module, "lora_A", None) is not None:
            named[f"{name}.weight"] = partial(linear_weight, module, adapters)
    return named


def linear_weight(module: Any, adapters: bool) -> torch.Tensor:
    """The weight ``module`` applies: ``W``, or for a LoRA layer with live adapters
    ``W + scaling * B A`` (summed over its active adapters, in ``W``'s dtype)."""
    lora_a = getattr(module, "lora_A", None)
    if lora_a is None:
        return module.weight
    weight = module.get_base_layer().weight
    if not adapters or module.disable_adapters or module.merged:
        return weight
    for name in module.active_adapters:
        if name in lora_a:
            delta = module.lora_B[name].weight @ lora_a[name].weight
            weight = weight + (delta * module.scaling[name]).to(weight.dtype)
    return weight


__all__ = ["LEAN_ENV", "LORA_TARGETS", "DecoderView", "FrozenBase", "LoraSpec", "adapter_spec",
           "apply_lora", "decoder_view", "lean_allowed", "is_adapter_dir", "is_peft_model",
           "lean_parameters", "linear_weight", "load_model_and_adapter", "merge_adapter"]
