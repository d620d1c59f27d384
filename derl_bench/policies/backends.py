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
a completion that hits ``max_new_tokens`` first has no end token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


class VLLMBackend:
    """Sample with vLLM on a GPU, colocated with training; weights are pushed after each step.

    vLLM is an optional dependency (``pip install derl-bench[vllm]``) imported only here.
    """

    def __init__(self, model_name_or_path: str, gpu_memory_utilization: float = 0.3,
                 dtype: str = "auto", max_model_len: int | None = None,
                 seed: int = 0) -> None:
        try:
            from vllm import LLM
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError(
                "the vllm backend needs vllm on a CUDA machine: pip install 'derl-bench[vllm]'"
            ) from err
        self.llm = LLM(model=str(model_name_or_path), gpu_memory_utilization=gpu_memory_utilization,
                       dtype=dtype, max_model_len=max_model_len, seed=seed,
                       enable_prefix_caching=True)
        tokenizer = self.llm.get_tokenizer()
        self.eos_ids = {tokenizer.eos_token_id}

    def generate(self, prompts: Sequence[Sequence[int]],
                 sampling: SamplingConfig) -> list[list[int]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                                max_tokens=sampling.max_new_tokens, seed=sampling.seed)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                    params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outputs]

    def sync_weights(self, model: Any) -> None:
        runner_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        for name, param in model.state_dict().items():
            runner_model.load_weights([(name, param.data)])
        self.llm.reset_prefix_cache()


BACKENDS = ("transformers", "vllm")
"""The generation backends a recipe may name (``backend``)."""


def backend_missing(name: str) -> str | None:
    """Why this machine cannot run the generation backend ``name``, else None."""
    import importlib.util

    if name == "vllm" and importlib.util.find_spec("vllm") is None:
        return ("backend 'vllm' needs the vllm package, which is not installed here: pip "
                "install 'derl-bench[vllm]' on a CUDA machine (or backend: transformers)")
    return None


def make_backend(name: str, model: Any, tokenizer: Any, model_path: str | None = None,
                 **kwargs: Any) -> GenerationBackend:
    """Build the backend called ``name`` ("transformers" or "vllm")."""
    if name == "transformers":
        return TransformersBackend(model, tokenizer, **kwargs)
    if name == "vllm":
        if model_path is None:
            raise ValueError("the vllm backend needs the model's name or path")
        backend = VLLMBackend(model_path, **kwargs)
        backend.sync_weights(model)
        return backend
    raise ValueError(f"unknown generation backend {name!r}; use 'transformers' or 'vllm'")
