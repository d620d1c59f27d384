"""What the lean forward pass reads of a model: the decoder's modules and live weights.

The lean forward pass (:mod:`derl_bench.policies.fast`) runs a plain HF model, a peft (LoRA)
model or the frozen base of one through the same code:

- :func:`decoder_view` says which HF causal LM holds the modules and whether LoRA deltas are
  added to its weights;
- :func:`lean_parameters` and :func:`linear_weight` give the MERGED weight
  ``W + (alpha / r) B A`` of an adapted projection, computed each time the weights are read, so
  sampling and training see the live adapter (and gradients reach ``A`` and ``B``) without a
  merged copy of the model;
- :class:`FrozenBase` is the KL reference of a LoRA run: the same modules with the adapter
  switched off, so the reference costs no second copy of the base weights;
- :func:`lean_allowed` says when the lean pass may not run a model (``DERL_BENCH_LEAN=0``).

It imports nothing else of the project, so every module of the lean path can import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch


def is_peft_model(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is in the train extra
        return False
    return isinstance(model, PeftModel)


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


__all__ = ["LEAN_ENV", "DecoderView", "FrozenBase", "decoder_view", "is_peft_model",
           "lean_allowed", "lean_parameters", "linear_weight"]
