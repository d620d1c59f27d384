"""The vLLM backend (GPU only): same interface, same token ids as the tiny model's tokenizer."""

from __future__ import annotations

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vllm is an optional GPU extra")

pytestmark = [pytest.mark.vllm, pytest.mark.gpu]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="vllm needs a CUDA device")
def test_vllm_backend_samples_and_syncs_weights(tmp_path):
    from derl_bench.policies import SamplingConfig, VLLMBackend, init_tiny_model
    from derl_bench.policies.loading import load_model_and_tokenizer

    path = init_tiny_model(tmp_path / "tiny")
    model, tokenizer = load_model_and_tokenizer(path, device="cuda")
    backend = VLLMBackend(str(path), gpu_memory_utilization=0.2)
    prompt = tokenizer("What is 2 + 2?")["input_ids"]
    out = backend.generate([prompt, prompt], SamplingConfig(max_new_tokens=8, seed=0))
    assert len(out) == 2 and all(1 <= len(c) <= 8 for c in out)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    backend.sync_weights(model)  # all-zero logits: every token equally likely, still valid ids
    out = backend.generate([prompt], SamplingConfig(max_new_tokens=8, seed=0))
    assert all(0 <= t < len(tokenizer) for t in out[0])
