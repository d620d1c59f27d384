"""Decoding over the static cache gives the default step's tokens and logits, and generate's.

The model's weights are scaled up so it writes varied tokens, and every step's logits are
compared (not only the argmax), so a key written at the wrong cache column, a wrong rotary
position or an unmasked unused column fails the comparison.
"""

from __future__ import annotations

import pytest
import torch

from derl_bench.policies.decode import StaticDecoder, static_decoder, use_static
from derl_bench.policies.fast import FastSampler, _weights, sample_rows
from derl_bench.policies.population import Population
from derl_bench.policies.tiny import TinyModelSpec, build_tiny_model, build_tiny_tokenizer
from tests.numerics import assert_close_reordered

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18]]


def _model(seed: int = 3, dtype: torch.dtype = torch.float32):
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, TinyModelSpec(seed=seed))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.mul_(6.0)
    return model.eval().to(dtype), tokenizer


def _terms(model) -> int:
    """The longest sum behind a logit: the MLP's inner dimension."""
    return model.config.intermediate_size


def _greedy(model, tok, static, prompts=PROMPTS, new_tokens=12):
    seen: list[torch.Tensor] = []

    def record(logits, completions, active):
        seen.append(logits.float().clone())
        return logits

    rows = FastSampler(model, {tok.eos_token_id}, tok.pad_token_id).sample(
        prompts, new_tokens, temperature=0.0, logits_hook=record, static=static)
    return rows, seen


def _left_padded(prompts, pad):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    return ids, mask


@pytest.mark.numerics
def test_static_greedy_decoding_equals_the_default_step_and_generate():
    model, tok = _model()
    static_rows, static_logits = _greedy(model, tok, True)
    rows, logits = _greedy(model, tok, False)
    assert len({tuple(r) for r in rows}) > 1, "the model should write different rows"
    assert static_rows == rows
    assert len(static_logits) == len(logits) > 1
    for mine, theirs in zip(static_logits, logits, strict=True):
        assert_close_reordered(mine, theirs, _terms(model))
    ids, mask = _left_padded(PROMPTS, tok.pad_token_id)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    for mine, reference in zip(static_rows, out[:, ids.shape[1]:].tolist(), strict=True):
        assert mine == reference[:len(mine)]


@pytest.mark.numerics
def test_a_reused_decoder_forgets_the_previous_call():
    # Two calls in one bucket (3 rows and 4 rows both take 4): the second must not see the
    # first's keys and values.
    model, tok = _model()
    w = _weights(model)
    first, _ = static_decoder(w, 3, 20)
    _greedy(model, tok, True, [[40, 41, 42, 43], [44], [45, 46]], 10)
    again, _ = static_decoder(w, 4, 20)
    assert again is first and first.rows == 4
    prompts = [[20, 21], [22, 23, 24], [25], [26, 27, 28, 29]]
    static_rows, static_logits = _greedy(model, tok, True, prompts, 10)
    rows, logits = _greedy(model, tok, False, prompts, 10)
    assert static_rows == rows
    for mine, theirs in zip(static_logits, logits, strict=True):
        assert_close_reordered(mine, theirs, _terms(model))


def test_sampling_over_the_static_cache_draws_the_same_tokens():
    model, tok = _model(seed=4)
    sampler = FastSampler(model, {tok.eos_token_id}, tok.pad_token_id)
    prompts = [[5, 6, 7]] * 4 + [[8, 9]] * 4  # two groups: the shared-prefix prefill
    assert sampler.sample(prompts, 10, seed=3, static=True) == sampler.sample(
        prompts, 10, seed=3, static=False)


def test_a_population_decodes_over_padded_member_blocks():
    # 3 rows a member are padded to blocks of 4: rows must land in their member's block.
    models = [_model(seed)[0] for seed in (3, 5)]
    tok = build_tiny_tokenizer()
    population = Population.stack(models)
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]] * 2
    out = {static: sample_rows(population.weights, prompts, 10, 0.0, 1.0, [None, None],
                               [tok.eos_token_id], tok.pad_token_id, static=static)
           for static in (True, False)}
    assert out[True] == out[False]
    assert out[True][:3] != out[True][3:], "the members should write different rows"


def test_use_static_follows_the_argument_then_the_environment(monkeypatch):
    monkeypatch.delenv("DERL_BENCH_STATIC_DECODE", raising=False)
    assert not use_static(torch.device("cpu"))
    assert use_static(torch.device("cuda"))
    assert use_static(torch.device("cpu"), True)
    monkeypatch.setenv("DERL_BENCH_STATIC_DECODE", "0")
    assert not use_static(torch.device("cuda"))
    monkeypatch.setenv("DERL_BENCH_STATIC_DECODE", "1")
    assert use_static(torch.device("cpu"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_the_cuda_graph_decodes_what_the_eager_steps_do(dtype):
    model, tok = _model(dtype=dtype)
    model = model.to("cuda")
    graph_rows, graph_logits = _greedy(model, tok, True)
    decoder, _ = static_decoder(_weights(model), len(PROMPTS), 24)
    assert isinstance(decoder, StaticDecoder) and decoder.graph
    rows, logits = _greedy(model, tok, False)
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {
        "rtol": 0.02, "atol": 0.05}
    steps = min(len(graph_logits), len(logits))
    if dtype == torch.float32:
        assert graph_rows == rows
    else:  # bf16 rounding may flip a near tie; compare up to the first difference
        first = [next((t for t, (a, b) in enumerate(zip(g, r, strict=False)) if a != b),
                      min(len(g), len(r))) for g, r in zip(graph_rows, rows, strict=True)]
        steps = min(steps, min(first) + 1)
    for mine, theirs in zip(graph_logits[:steps], logits[:steps], strict=True):
        torch.testing.assert_close(mine, theirs, **tolerance)


@pytest.mark.parametrize("static", [False, True], ids=["default-step", "static-cache"])
def test_a_model_is_freed_when_its_last_reference_goes(static):
    """The gathering of a model's weights, and the decoders kept on it, go with the model
    itself, without waiting for the garbage collector: a meta loop's finished inner runs must
    not stay on the GPU."""
    import gc
    import weakref

    model, tok = _model()
    _greedy(model, tok, static)
    alive = weakref.ref(model)
    gc.disable()
    try:
        del model
        assert alive() is None
    finally:
        gc.enable()
