"""LoRA inner runs: only the adapter trains, the lean path computes W + (alpha/r) B A exactly,
the reference is the frozen base, adapter checkpoints resume, merge and warm-start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from derl_bench.cli import main
from derl_bench.grpo import train
from derl_bench.grpo.config import ConfigError, TrainConfig, replace
from derl_bench.grpo.loss import token_logprobs
from derl_bench.grpo.runlog import read_metrics
from derl_bench.policies import load_model_and_tokenizer
from derl_bench.policies.decoder import FrozenBase, is_peft_model
from derl_bench.policies.fast import FastSampler, causal_logits, supports
from derl_bench.policies.lora import LoraSpec, apply_lora
from derl_bench.policies.tiny import build_tiny_model, build_tiny_tokenizer
from tests.numerics import assert_close_reordered

LORA = {"r": 4, "alpha": 8, "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                           "down_proj"]}
VARYING = "outcome - 0.01 * response_length"


def arith(tmp_path: Path, **changes) -> TrainConfig:
    values = {"env_id": "derl/Arithmetic-v0", "steps": 2, "group_size": 4,
              "prompts_per_step": 2, "max_new_tokens": 8, "learning_rate": 1e-2,
              "meta_reward": VARYING, "lora": LORA, "output_dir": str(tmp_path / "run"),
              "progress": False, "tensorboard": False, **changes}
    return TrainConfig(**values)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = build_tiny_tokenizer()
    return build_tiny_model(tokenizer), tokenizer


def lora_model(base, seed=0):
    """A LoRA model whose B is non-zero, so the adapter changes the output."""
    import copy

    model = apply_lora(copy.deepcopy(base), LoraSpec.from_dict(LORA))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return model


def explicit_logprobs(base, adapters, ids):
    """Log-probs from HF's own forward of ``base`` with every targeted weight replaced by
    W + (alpha / r) B A, written out here independently of peft and of the lean path."""
    params = dict(base.named_parameters())
    scale = LORA["alpha"] / LORA["r"]
    for name, (a, b) in adapters.items():
        params[name] = params[name].detach() + scale * b @ a
    logits = torch.func.functional_call(base, params, (ids,)).logits[:, :-1].float()
    return logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def adapter_leaves(model):
    """``{base weight name: (A, B)}`` as fresh leaf tensors, for the explicit computation."""
    out = {}
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            key = name.removeprefix("base_model.model.") + ".weight"
            out[key] = (module.lora_A["default"].weight.detach().clone().requires_grad_(),
                        module.lora_B["default"].weight.detach().clone().requires_grad_())
    return out


def test_lora_settings_are_validated():
    with pytest.raises(ConfigError, match="lora.r"):
        TrainConfig(lora={"r": -1})
    with pytest.raises(ConfigError, match="unknown lora keys: rank"):
        TrainConfig(lora={"rank": 8})
    with pytest.raises(ConfigError, match="target_modules"):
        TrainConfig(lora={"target_modules": ["lm_head"]})
    with pytest.raises(ConfigError, match="dropout"):
        TrainConfig(lora={"dropout": 1.0})
    with pytest.raises(ConfigError, match="vllm"):
        TrainConfig(lora={}, backend="vllm")
    assert TrainConfig(lora={"r": 8}).lora == {**LoraSpec().to_dict(), "r": 8}


def _terms(model, logits: bool = False) -> int:
    """The longest sum behind a logit (the MLP's inner dimension) or behind a log-prob or a
    gradient (the log-softmax over the vocabulary)."""
    return model.config.intermediate_size if logits else model.config.vocab_size


@pytest.mark.numerics
def test_lean_path_logprobs_and_gradients_match_an_explicit_lora_forward(tiny):
    base, _ = tiny
    model = lora_model(base)
    model.train()
    ids = torch.randint(3, 300, (3, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    assert supports(model)  # dropout 0: the lean path runs the adapter
    logp, _ = token_logprobs(model, ids, mask)
    logp[:, 1:].sum().backward()

    leaves = adapter_leaves(model)
    assert len(leaves) == 7 * base.config.num_hidden_layers
    reference = explicit_logprobs(base, leaves, ids)
    reference.sum().backward()
    assert_close_reordered(logp[:, 1:], reference, _terms(base))
    grads = {n.removeprefix("base_model.model.").split(".lora_")[0]: p.grad
             for n, p in model.named_parameters() if p.grad is not None and "lora_B" in n}
    assert len(grads) == len(leaves)
    for key, (_, b) in leaves.items():
        assert_close_reordered(grads[key.removesuffix(".weight")], b.grad, _terms(base), msg=key)
    # The base weights get no gradient at all.
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)
    # peft's own module forward computes the same log-probs.
    logits = model(input_ids=ids).logits[:, :-1].float()
    hf = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert_close_reordered(hf, reference, _terms(base))


def test_adapter_dropout_takes_the_module_forward_while_training(tiny):
    base, _ = tiny
    import copy

    model = apply_lora(copy.deepcopy(base), LoraSpec.from_dict({**LORA, "dropout": 0.1}))
    model.train()
    assert not supports(model)  # the lean path has no dropout, so it is not used
    model.eval()
    assert supports(model)


@pytest.mark.numerics
def test_frozen_base_is_the_model_without_its_adapter(tiny):
    base, _ = tiny
    model = lora_model(base)
    reference = FrozenBase(model)
    ids = torch.randint(3, 300, (2, 10), generator=torch.Generator().manual_seed(2))
    expected = causal_logits(base, ids)
    assert torch.equal(causal_logits(reference, ids), expected)
    assert_close_reordered(reference(ids).logits, expected, _terms(base, logits=True))
    assert not torch.allclose(causal_logits(model, ids), expected, atol=1e-3)
    # The reference shares the policy's weights and owns none of its own.
    assert list(reference.parameters()) == []


@pytest.mark.numerics
def test_sampling_reads_the_merged_weights(tiny):
    base, tokenizer = tiny
    import copy

    model = lora_model(base).eval()
    merged = copy.deepcopy(model).merge_and_unload().eval()
    ids = torch.randint(3, 300, (2, 10), generator=torch.Generator().manual_seed(5))
    assert_close_reordered(causal_logits(model, ids), causal_logits(merged, ids),
                           _terms(base, logits=True))
    eos = {tokenizer.eos_token_id}
    prompts = [[5, 6, 7], [8, 9]]

    def greedy(m):
        return FastSampler(m, eos, tokenizer.pad_token_id).sample(prompts, 12, temperature=0)

    plain_rows = greedy(base)
    assert greedy(model) == greedy(merged) != plain_rows
    # An optimiser step on the adapter is seen by the next call (no stale merged copy).
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.zero_()
    assert greedy(model) == plain_rows


def test_lora_run_trains_only_the_adapter_and_resumes_identically(data_root, tmp_path):
    split = arith(tmp_path, output_dir=str(tmp_path / "split"))
    train(split)
    checkpoint = tmp_path / "split" / "checkpoints" / "step-2"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert not (checkpoint / "model.safetensors").exists()
    adapter = load_file(checkpoint / "adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)
    # The base is untouched: the loaded checkpoint's base weights equal the initial model's.
    model, _ = load_model_and_tokenizer(checkpoint)
    assert is_peft_model(model)
    initial = load_file(tmp_path / "split" / "init-model" / "model.safetensors")
    for name, value in model.get_base_model().state_dict().items():
        key = name.replace(".base_layer", "")
        if "lora_" not in name and key in initial:
            assert torch.equal(value, initial[key]), name
    metrics = read_metrics(tmp_path / "split")
    assert metrics[0]["kl"] == 0.0 and metrics[1]["kl"] > 0  # fresh adapter: B = 0

    train(replace(split, steps=4), resume=True)
    straight = train(arith(tmp_path, steps=4, output_dir=str(tmp_path / "straight")))
    resumed = read_metrics(tmp_path / "split")
    for a, b in zip(straight, resumed, strict=True):
        assert a["reward/mean"] == b["reward/mean"] and a["loss"] == pytest.approx(b["loss"])
    final = load_file(tmp_path / "split" / "checkpoints" / "step-4" / "adapter_model.safetensors")
    other = load_file(tmp_path / "straight" / "checkpoints" / "step-4" /
                      "adapter_model.safetensors")
    assert all(torch.equal(final[k], other[k]) for k in final)


def test_merge_writes_a_whole_model_with_the_adapters_outputs(data_root, tmp_path, capsys):
    train(arith(tmp_path, steps=1))
    checkpoint = tmp_path / "run" / "checkpoints" / "step-1"
    out = tmp_path / "merged"
    assert main(["model", "merge", str(checkpoint), str(out)]) == 0
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    merged, _ = load_model_and_tokenizer(out)
    adapted, _ = load_model_and_tokenizer(checkpoint)
    ids = torch.randint(3, 300, (2, 9), generator=torch.Generator().manual_seed(4))
    assert_close_reordered(causal_logits(merged, ids), causal_logits(adapted.eval(), ids),
                           _terms(merged, logits=True))
    assert main(["model", "merge", str(tmp_path / "run" / "init-model"), str(tmp_path / "x")]) == 2
    assert "not a LoRA adapter" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_merge_names_a_missing_checkpoint_folder(tmp_path, capsys):
    gone = tmp_path / "nope"
    assert main(["model", "merge", str(gone), str(tmp_path / "merged")]) == 2
    assert capsys.readouterr().err == f"error: no such checkpoint folder: {gone}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_warm_started_lora_run_continues_the_adapter(data_root, tmp_path):
    from derl_bench.meta import MetaConfig, run_meta

    inner = {"env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 1, "group_size": 2,
             "prompts_per_step": 1, "max_new_tokens": 8, "tensorboard": False,
             "learning_rate": 1e-2, "lora": LORA}
    config = MetaConfig(name="f", method="fixed", reward=VARYING, warm_start=True,
                        outer_steps=2, population=1, validation_episodes=2, inner=inner,
                        output_dir=str(tmp_path), progress=False, executor="local")
    first, second = run_meta(config).candidates
    assert second["start_model"] == first["checkpoint"]
    start = Path(first["checkpoint"])
    assert (start / "adapter_config.json").is_file()
    base = json.loads((start / "adapter_config.json").read_text())["base_model_name_or_path"]
    end = Path(second["checkpoint"])
    assert json.loads((end / "adapter_config.json").read_text())[
        "base_model_name_or_path"] == base
    # The first run starts from a fresh adapter (B = 0: no KL to the base at its first step);
    # the warm-started one from the first run's adapter (its policy already differs).
    assert read_metrics(start.parent.parent)[0]["kl"] == 0.0
    assert read_metrics(end.parent.parent)[0]["kl"] > 0.0


def test_the_lean_path_can_be_switched_off(tiny, monkeypatch):
    base, _ = tiny
    assert supports(base)
    monkeypatch.setenv("DERL_BENCH_LEAN", "0")
    assert not supports(base)


def test_the_trl_path_trains_an_adapter(data_root, tmp_path):
    from derl_bench.grpo.dispatch import run_training

    config = TrainConfig(env_id="derl/GSM8K-v0", trainer="trl", steps=1, group_size=2,
                         prompts_per_step=1, max_new_tokens=8, lora=LORA,
                         output_dir=str(tmp_path / "trl"), progress=False, tensorboard=False)
    history, path = run_training(config)
    assert len(history) == 1
    assert (path / "adapter_config.json").is_file() and not (path / "model.safetensors").exists()
    model, _ = load_model_and_tokenizer(path)
    assert is_peft_model(model)
