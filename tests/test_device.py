"""Every tensor the forward passes create follows the model's device and dtype.

A CPU machine cannot run a GPU, but it can run the same code on the ``meta`` device: an op
mixing a ``meta`` tensor with a CPU one raises, so a tensor created without ``device=`` fails
here exactly as it would fail (or silently copy) on a GPU. bfloat16 runs catch tensors created
in float32 beside bfloat16 weights.
"""

from __future__ import annotations

import copy

import pytest
import torch

from derl_bench.policies.backends import SamplingConfig, TransformersBackend
from derl_bench.policies.decoder import FrozenBase
from derl_bench.policies.fast import FastSampler, causal_logits, lm_head
from derl_bench.policies.lora import LoraSpec, apply_lora
from derl_bench.policies.tiny import build_tiny_model, build_tiny_tokenizer


@pytest.fixture(scope="module")
def tiny():
    tokenizer = build_tiny_tokenizer()
    return build_tiny_model(tokenizer), tokenizer


def on_meta(model):
    with torch.device("meta"):
        meta = type(model)(model.config)
    return meta


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_lean_forward_creates_every_tensor_on_the_models_device(tiny, lora):
    model = on_meta(tiny[0])
    if lora:
        model = apply_lora(model, LoraSpec.from_dict({"r": 4}))
    ids = torch.randint(3, 300, (2, 7)).to("meta")
    logits = causal_logits(model, ids)
    assert logits.device.type == "meta" and logits.shape == (2, 7, tiny[0].config.vocab_size)
    if lora:
        assert causal_logits(FrozenBase(model), ids).device.type == "meta"


def test_a_cpu_tensor_in_a_meta_computation_is_caught():
    # The premise of the test above: an op on a meta and a CPU tensor raises (as a CUDA and a
    # CPU tensor do) instead of passing silently.
    with pytest.raises(RuntimeError, match="device"):
        torch.ones(2, 7, device="meta") * torch.ones(2, 7)
    with pytest.raises(RuntimeError):
        torch.nn.functional.scaled_dot_product_attention(
            *(torch.ones(1, 2, 3, 4, device="meta"),) * 3,
            attn_mask=torch.ones(3, 3, dtype=torch.bool))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_bfloat16_stays_bfloat16(tiny, lora):
    base, tokenizer = tiny
    model = copy.deepcopy(base).to(torch.bfloat16)
    if lora:
        # peft keeps adapter weights in float32 beside a bfloat16 base; the merged weight the
        # lean path reads must come back in the base's dtype.
        model = apply_lora(model, LoraSpec.from_dict({"r": 4}))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.05)
        assert any(p.dtype == torch.float32 for n, p in model.named_parameters() if "lora_" in n)
    model.eval()
    ids = torch.randint(3, 300, (2, 7))
    logits = causal_logits(model, ids)
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()
    assert lm_head(model, torch.zeros(1, base.config.hidden_size, dtype=torch.bfloat16)
                   ).dtype == torch.bfloat16
    reference = model(input_ids=ids).logits
    assert torch.allclose(logits.float(), reference.float(), atol=0.1)
    sampler = FastSampler(model, {tokenizer.eos_token_id}, tokenizer.pad_token_id)
    rows = sampler.sample([[5, 6, 7], [8]], max_new_tokens=5, seed=0)
    assert rows == sampler.sample([[5, 6, 7], [8]], max_new_tokens=5, seed=0)
    backend = TransformersBackend(model, tokenizer)
    assert len(backend.generate([[5, 6, 7]], SamplingConfig(max_new_tokens=4, seed=1))) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_seeded_sampling_on_a_gpu(tiny):
    # A seeded backend makes its generator on the model's device (torch.rand on CUDA refuses
    # a CPU generator).
    base, tokenizer = tiny
    model = copy.deepcopy(base).to("cuda")
    backend = TransformersBackend(model, tokenizer)
    first = backend.generate([[5, 6, 7]], SamplingConfig(max_new_tokens=4, seed=1))
    assert first == backend.generate([[5, 6, 7]], SamplingConfig(max_new_tokens=4, seed=1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("batch_inner", ["true", "false"])
def test_a_derl_generation_on_a_gpu(tmp_path, batch_inner):
    # The Meta-Optimizer follows inner.device: its cold start, its cache key (a digest of its
    # weights, read where they live), its proposals and its update all run on the GPU, and so
    # do the inner runs, one by one or as one population.
    import json
    from pathlib import Path

    from derl_bench.meta import MetaConfig, run_meta

    config = MetaConfig(name="gpu", method="derl", outer_steps=2, population=2,
                        validation_episodes=4, seed=0,
                        optimizer={"sft_examples": 16, "sft_steps": 2}, progress=False,
                        executor="local",
                        batch_inner=batch_inner, output_dir=str(tmp_path),
                        inner={"env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 1,
                               "group_size": 4, "prompts_per_step": 2, "max_new_tokens": 8,
                               "device": "cuda", "tensorboard": False})
    candidates = run_meta(config).candidates
    assert len(candidates) == 4
    assert all(c["status"] in ("scored", "constant") for c in candidates), candidates
    trained = [c for c in candidates if c["status"] == "scored"]
    for c in trained:
        metrics = json.loads((Path(c["run"]) / "metrics.jsonl").read_text().splitlines()[0])
        assert metrics["memory/device_peak_gib"] > 0
