"""The real-shape rehearsal: train, meta and evaluate at Qwen2.5-0.5B's width and vocabulary
(2 layers), full and LoRA, on both forward paths, in float32 and bfloat16."""

from __future__ import annotations

import json

import pytest

from derl_bench.experiments.rehearse import kv_cache_bytes, rehearse
from derl_bench.policies.shapes import SHAPES, qwen_config


def test_kv_cache_size_is_the_samplers_allocation():
    config = qwen_config(SHAPES["qwen2.5-0.5b"]).to_dict()
    # 24 layers x (K and V) x 8 rows x 2 KV heads x 256 positions x 64 dims x 2 bytes.
    assert kv_cache_bytes(config, rows=8, length=256, dtype="bfloat16") == \
        24 * 2 * 8 * 2 * 256 * 64 * 2
    assert kv_cache_bytes(config, 8, 256, "float32") == 2 * kv_cache_bytes(config, 8, 256,
                                                                            "bfloat16")


# Each setting (LoRA off and on, both forward paths, both dtypes) once, in two runs of a few
# CPU minutes each; `derl-bench model rehearse` runs all eight combinations. The bfloat16 run
# is at the narrow shape: on a CPU without a native bfloat16 GEMM (AVX2 only) torch's backward
# at 896 wide takes over 30 minutes, at 128 wide under 3 on the same CPU.
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("shape", "lora", "path", "dtype"), [
    ("qwen2.5-0.5b-short", False, "transformers", "float32"),
    ("qwen2.5-narrow", True, "lean", "bfloat16")],
    ids=["full-transformers-float32", "lora-lean-bfloat16"])
def test_rehearsal_at_a_real_vocabulary(data_root, tmp_path_factory, shape, lora, path, dtype):
    output = tmp_path_factory.mktemp("rehearsal")
    results = rehearse(shape, output, loras=(lora,), paths=(path,), dtypes=(dtype,))
    failed = [(r.name, r.error) for r in results if not r.ok]
    assert not failed
    assert [r.name for r in results] == ["train-gsm8k", "train-alfworld", "meta", "evaluate"]
    for r in results[:2]:
        assert r.s_per_step is not None and r.s_per_step > 0 and r.peak_rss_mb > 0
        assert len(r.detail["loss"]) == 2
        if lora:
            assert r.detail["kl"][0] == 0.0  # a fresh adapter is the base
    assert results[2].detail["candidates"] == 2
    report = json.loads((output / "rehearsal.json").read_text())
    agreement = report["greedy_agreement"][dtype]
    if dtype == "float32":
        # The lean sampler and transformers' generate compute the same float32 arithmetic.
        assert agreement["identical"] == agreement["rows"]
    checkpoint = output / f"{'lora' if lora else 'full'}-{path}-{dtype}" / "train-gsm8k" / \
        "checkpoints" / "step-2"
    assert (checkpoint / ("adapter_config.json" if lora else "config.json")).is_file()
