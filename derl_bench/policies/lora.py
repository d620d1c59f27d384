"""LoRA adapters (peft) on a causal LM: settings, wrapping, merging an adapter checkpoint.

A LoRA run trains only low-rank matrices ``A`` (``r x in``) and ``B`` (``out x r``) beside each
targeted projection ``W``; the layer computes ``x W^T + (alpha / r) x A^T B^T``. The rest of
the project sees the adapted model through two other modules:

- :func:`~derl_bench.policies.loading.load_model_and_adapter` loads an adapter checkpoint (a
  folder with ``adapter_config.json``) as its base model plus the adapter, trainable;
- :mod:`derl_bench.policies.decoder` gives the lean forward pass the MERGED weight
  ``W + (alpha / r) B A`` of every adapted projection, and
  :class:`~derl_bench.policies.decoder.FrozenBase`, the KL reference of a LoRA run (the
  adapter switched off).

    >>> LoraSpec.from_dict({"r": 8, "alpha": 16}).scaling
    2.0
    >>> LoraSpec.from_dict({"r": 0})
    Traceback (most recent call last):
    ...
    ValueError: lora.r must be a positive integer, got 0
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from derl_bench.policies.loading import ADAPTER_CONFIG, is_adapter_dir, load_model_and_adapter

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Projections a LoRA adapter may target: every linear layer of a Qwen2/Llama decoder block."""

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


def merge_adapter(path: str | Path, output: str | Path, overwrite: bool = False) -> Path:
    """Fold the adapter checkpoint at ``path`` into its base and write a whole model folder
    (weights in the base's dtype) to ``output``, atomically. A ``path`` that does not exist is a
    ``FileNotFoundError``, one that holds no adapter a ``ValueError``."""
    from derl_bench.policies.tiny import write_model_dir

    if not Path(path).exists():
        raise FileNotFoundError(f"no such checkpoint folder: {path}")
    if not is_adapter_dir(path):
        raise ValueError(f"{path} is not a LoRA adapter checkpoint (no {ADAPTER_CONFIG})")

    def build() -> tuple[Any, Any]:
        config = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
        dtype = json.loads((Path(config["base_model_name_or_path"]) / "config.json").read_text(
        )).get("dtype") if Path(config["base_model_name_or_path"]).exists() else None
        model, tokenizer = load_model_and_adapter(path, dtype=dtype)
        return model.merge_and_unload(), tokenizer

    return write_model_dir(output, build, {}, overwrite=overwrite)


__all__ = ["LORA_TARGETS", "LoraSpec", "adapter_spec", "apply_lora", "merge_adapter"]
