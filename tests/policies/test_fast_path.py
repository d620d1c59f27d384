"""The lean forward pass and sampler give what transformers gives, and the update is exact.

Every check compares the fast path with a straightforward computation through the HF model
itself, on a tiny model built in code whose weights are scaled up so that it writes varied
tokens (a freshly initialised model repeats one token, which would hide position bugs).
"""

from __future__ import annotations

import pytest
import torch

from derl_bench.grpo.loss import grpo_loss, token_logprobs
from derl_bench.grpo.update import UpdateSettings, grpo_update, micro_batch_weight
from derl_bench.policies.backends import SamplingConfig, TransformersBackend
from derl_bench.policies.fast import FastSampler, PrefillCache, causal_logits, supports
from derl_bench.policies.tiny import TinyModelSpec, build_tiny_model, build_tiny_tokenizer
from derl_bench.rollout import Episode, Step, collate
from tests.numerics import assert_close_reordered


def _model(seed: int = 0):
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, TinyModelSpec(seed=seed))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.mul_(6.0)
    return model.eval(), tokenizer


def _left_padded(prompts, pad):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    return ids, mask


def test_causal_logits_match_transformers_on_right_padded_rows():
    model, tok = _model()
    ids = torch.randint(3, len(tok), (3, 17))
    lengths = [17, 9, 4]
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        ids[row, n:] = tok.pad_token_id
    ours = causal_logits(model, ids)
    theirs = model(input_ids=ids, attention_mask=mask).logits
    for row, n in enumerate(lengths):
        torch.testing.assert_close(ours[row, :n], theirs[row, :n], rtol=1e-4, atol=1e-4)


def test_greedy_sampling_matches_transformers_generate():
    model, tok = _model(seed=3)
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18], [40]]
    ours = FastSampler(model, {tok.eos_token_id}, tok.pad_token_id).sample(
        prompts, 12, temperature=0.0)
    ids, mask = _left_padded(prompts, tok.pad_token_id)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    theirs = out[:, ids.shape[1]:].tolist()
    assert len({tuple(r) for r in ours}) > 1, "the model should write different rows"
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine == reference[:len(mine)]


def test_sampled_tokens_follow_the_models_distribution_step_by_step():
    # Decode with the cache, then score the same tokens with one uncached forward pass: the
    # log-probability the sampler drew each token from must be the model's.
    model, tok = _model(seed=5)
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12]]
    seen: list[torch.Tensor] = []

    def record(logits, completions, active):
        seen.append(torch.log_softmax(logits.float(), -1).clone())
        return logits

    sampler = FastSampler(model, {tok.eos_token_id}, tok.pad_token_id)
    rows = sampler.sample(prompts, 6, seed=1, logits_hook=record)
    ids, mask = _left_padded(prompts, tok.pad_token_id)
    for row, completion in enumerate(rows):
        full = torch.tensor([list(ids[row]) + completion])
        full_mask = torch.tensor([list(mask[row]) + [1] * len(completion)])
        logp = torch.log_softmax(model(input_ids=full, attention_mask=full_mask).logits, -1)
        for t, token in enumerate(completion):
            expected = logp[0, ids.shape[1] + t - 1, token]
            torch.testing.assert_close(seen[t][row, token], expected, rtol=1e-4, atol=1e-4)


def test_forced_tokens_run_with_the_next_draw_and_keep_the_models_distribution():
    # Tokens a constraint forces are written without a draw and run through the model in one
    # step with the drawn token before them, right-aligned among rows of other chunk sizes.
    # Every later draw must still come from the model's distribution given everything written
    # (an uncached forward pass over the whole row), so positions, cache columns and masks of
    # the chunks are right; and the row that forces its end token stops there.
    model, tok = _model(seed=5)
    eos = tok.eos_token_id
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12], [13], [14, 15]]
    runs = {0: {1: [20, 21, 22]}, 1: {2: [23, 28]}, 2: {1: [24, 25], 5: [26]},
            3: {2: [27, eos]}}
    seen: list[torch.Tensor] = []
    drawn: list[dict[int, int]] = []

    def record(logits, completions, active):
        seen.append(torch.log_softmax(logits.float(), -1).clone())
        drawn.append({row: len(completions[row]) for row in active.tolist()})
        logits[:, eos] = float("-inf")  # only row 3's forced end ends a row
        return logits

    def forced(row, completion):
        return runs[row].get(len(completion), [])

    sampler = FastSampler(model, {eos}, tok.pad_token_id)
    rows = sampler.sample(prompts, 9, seed=1, logits_hook=record, forced=forced)
    for row, completion in enumerate(rows):
        for at, tokens in runs[row].items():
            if at < len(completion):
                assert completion[at:at + len(tokens)] == tokens, (row, completion)
    assert rows[3][-1] == eos and len(rows[3]) == 4
    assert all(len(r) == 9 for r in rows[:3])
    # one step per drawn token: as many steps as the row with the most draws has (row 1: 7)
    assert len(seen) == 7 and sum(len(d) for d in drawn) == sum(
        len(r) for r in rows) - sum(len(t) for run in runs.values() for t in run.values())
    ids, mask = _left_padded(prompts, tok.pad_token_id)
    for row, completion in enumerate(rows):
        full = torch.tensor([list(ids[row]) + completion])
        full_mask = torch.tensor([list(mask[row]) + [1] * len(completion)])
        logp = torch.log_softmax(model(input_ids=full, attention_mask=full_mask).logits, -1)
        steps = [(t, at[row]) for t, at in enumerate(drawn) if row in at]
        assert len(steps) > 1
        for t, position in steps:
            token = completion[position]
            expected = logp[0, ids.shape[1] + position - 1, token]
            torch.testing.assert_close(seen[t][row, token], expected, rtol=1e-4, atol=1e-4)


def _draws_follow_the_model(model, prompts, rows, seen, drawn, pad):
    """Every recorded draw's log-probabilities equal an uncached forward pass over the row."""
    ids, mask = _left_padded(prompts, pad)
    for row, completion in enumerate(rows):
        full = torch.tensor([list(ids[row]) + completion])
        full_mask = torch.tensor([list(mask[row]) + [1] * len(completion)])
        logp = torch.log_softmax(model(input_ids=full, attention_mask=full_mask).logits, -1)
        for t, at in enumerate(drawn):
            if row in at:
                token = completion[at[row]]
                expected = logp[0, ids.shape[1] + at[row] - 1, token]
                torch.testing.assert_close(seen[t][row, token], expected, rtol=1e-4, atol=1e-4)


def test_a_prefill_cache_runs_each_prompt_once_and_keeps_the_models_distribution():
    # A later call's prompts come in another order and batch width than when they were
    # prefilled, beside a new one, with forced chunks after the draws: every draw must still
    # come from the model given the whole row, and only the new prompt runs.
    model, tok = _model(seed=5)
    eos = tok.eos_token_id
    sampler = FastSampler(model, {eos}, tok.pad_token_id)
    cache = PrefillCache()

    def sample(prompts, forced=None):
        seen, drawn = [], []

        def record(logits, completions, active):
            seen.append(torch.log_softmax(logits.float(), -1).clone())
            drawn.append({row: len(completions[row]) for row in active.tolist()})
            logits[:, eos] = float("-inf")
            return logits

        rows = sampler.sample(prompts, 6, seed=3, logits_hook=record, forced=forced,
                              prefill_cache=cache)
        _draws_follow_the_model(model, prompts, rows, seen, drawn, tok.pad_token_id)
        return rows

    sample([[5, 6, 7], [8, 9, 10, 11, 12], [5, 6, 7]])
    assert (len(cache), cache.prefilled, cache.reused) == (2, 2, 0)
    sample([[8, 9, 10, 11, 12], [13], [5, 6, 7]],
           forced=lambda row, completion: [20, 21] if len(completion) == 1 else [])
    assert (len(cache), cache.prefilled, cache.reused) == (3, 3, 2)
    # The same seed gives the same rows from a fresh cache as from this one (two more reused).
    again = sampler.sample([[13], [5, 6, 7]], 6, seed=4, prefill_cache=cache)
    assert again == sampler.sample([[13], [5, 6, 7]], 6, seed=4, prefill_cache=PrefillCache())
    # Weights changed in place (an optimiser's step): nothing kept is used again.
    with torch.no_grad():
        next(model.parameters()).add_(0.5)
    sample([[13], [5, 6, 7]])
    assert (len(cache), cache.prefilled, cache.reused) == (2, 3 + 2, 4)


def test_a_prefill_cache_keeps_its_budget_dropping_the_least_recently_used_prompt():
    model, tok = _model(seed=2)
    sampler = FastSampler(model, {tok.eos_token_id}, tok.pad_token_id)
    cache = PrefillCache()

    def sample(*prompts):
        sampler.sample(list(prompts), 3, seed=0, prefill_cache=cache)

    sample([5, 6, 7], [8, 9, 10])
    assert len(cache) == 2 and cache.nbytes > 0
    cache.max_bytes = cache.nbytes  # room for two prompts of three tokens
    sample([5, 6, 7])  # used again: now the most recent
    sample([11, 12, 13])  # a third: the least recently used ([8, 9, 10]) goes
    assert (len(cache), cache.nbytes, cache.prefilled, cache.reused) == (2, cache.max_bytes, 3, 1)
    sample([5, 6, 7], [11, 12, 13])
    sample([8, 9, 10])
    assert (cache.prefilled, cache.reused) == (4, 3)
    cache.max_bytes = 1  # nothing fits: every call prefills its prompts
    sample([20, 21])
    sample([20, 21])
    assert (len(cache), cache.nbytes, cache.prefilled) == (0, 0, 6)


def test_same_seed_same_samples_and_rows_stop_at_their_end_token():
    model, tok = _model(seed=1)
    eos = tok.eos_token_id
    sampler = FastSampler(model, {eos}, tok.pad_token_id)
    prompts = [[5, 6, 7]] * 6
    first = sampler.sample(prompts, 10, seed=7)
    assert first == sampler.sample(prompts, 10, seed=7)
    assert first != sampler.sample(prompts, 10, seed=8)

    def stop_row_one_early(logits, completions, active):
        # Row 1 must end after its second token; row 0 never may.
        if 1 in active.tolist() and len(completions[1]) == 2:
            logits[1] = float("-inf")
            logits[1, eos] = 0.0
        logits[0, eos] = float("-inf")
        return logits

    rows = sampler.sample([[5, 6], [7, 8]], 8, seed=0, logits_hook=stop_row_one_early)
    assert rows[1][-1] == eos and len(rows[1]) == 3
    assert len(rows[0]) == 8 and eos not in rows[0]


def _batch(tok):
    episodes = [
        Episode(0, 0, [Step([5, 6, 7, 8], [9, 10], "", "", {})]),
        Episode(0, 1, [Step([5, 6], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23], "", "", {})]),
        Episode(1, 2, [Step([30, 31, 32], [33, 34, 35], "", "", {})]),
    ]
    return collate(episodes, [1.0, -0.5, 0.7], tok.pad_token_id)


@pytest.mark.numerics
def test_fast_loss_and_gradients_equal_a_reference_computation():
    model, tok = _model(seed=2)
    model.train()
    batch = _batch(tok)
    temperature = 0.7
    # Reference: the HF forward, a full log-softmax, the textbook token-mean GRPO objective.
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, -1).gather(
        -1, batch.input_ids[:, 1:, None]).squeeze(-1)
    logp = torch.cat([torch.zeros_like(logp[:, :1]), logp], 1)
    mask = batch.loss_mask
    reference = (-(torch.exp(logp - logp.detach()) * batch.advantages[:, None] * mask).sum()
                 / mask.sum())
    reference.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    fast, _ = token_logprobs(model, batch.input_ids, batch.attention_mask,
                             temperature=temperature, loss_mask=batch.loss_mask)
    out = grpo_loss(fast, fast.detach(), batch.advantages, batch.loss_mask)
    terms = model.get_input_embeddings().num_embeddings  # the log-softmax's sum
    assert_close_reordered(out.loss, reference, terms)
    out.loss.backward()
    for name, param in model.named_parameters():
        assert_close_reordered(param.grad, expected[name], terms, msg=name)


def _gradients_after_update(micro_batch_size: int, aggregation: str):
    model, tok = _model(seed=4)
    batch = _batch(tok)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    grpo_update(model, optimizer, batch, UpdateSettings(
        aggregation=aggregation, micro_batch_size=micro_batch_size, max_grad_norm=1e9))
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.numerics
def test_micro_batches_do_not_change_the_gradient_for_either_aggregation():
    for aggregation in ("token", "sequence"):
        whole = _gradients_after_update(3, aggregation)
        split = _gradients_after_update(1, aggregation)
        terms = len(build_tiny_tokenizer())  # the longest sum behind a gradient: the vocabulary
        for name in whole:
            assert_close_reordered(split[name], whole[name], terms, msg=name)


def test_sequence_aggregation_weighs_every_sequence_equally():
    # Two rows, 2 and 12 completion tokens, each alone in its micro-batch: sequence-level
    # aggregation gives each token of the short row 1/2 * 1/2 and of the long one 1/2 * 1/12.
    mask = torch.zeros(2, 14)
    mask[0, :2] = 1
    mask[1, 2:] = 1
    weights = [micro_batch_weight(mask[i:i + 1], mask, "sequence") for i in range(2)]
    per_token = [w / mask[i].sum().item() for i, w in enumerate(weights)]
    assert [round(x, 3) for x in per_token] == [0.25, 0.042]
    token_weights = [micro_batch_weight(mask[i:i + 1], mask, "token") / mask[i].sum().item()
                     for i in range(2)]
    assert [round(x, 3) for x in token_weights] == [0.071, 0.071]


def test_models_of_other_architectures_take_the_transformers_path():
    model, _ = _model()
    assert supports(model)
    model.config.model_type = "gpt2"
    assert not supports(model)


def test_constrained_decoding_runs_through_generate_as_on_the_lean_path(monkeypatch):
    # With the lean path off (DERL_BENCH_LEAN=0, or a model it does not support) a logits hook
    # (the Meta-Optimizer's grammar) goes to transformers' generate as a logits processor.
    model, tok = _model(seed=2)
    eos = tok.eos_token_id
    allowed = [5, 6, 7, eos]

    def only_allowed(logits, completions, active):
        masked = torch.full_like(logits, float("-inf"))
        rows = active.tolist()
        masked[rows] = logits[rows]
        keep = torch.full_like(logits, float("-inf"))
        keep[:, allowed] = 0.0
        return masked + keep

    prompts = [[8, 9, 10], [11, 12]]
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0)
    lean = TransformersBackend(model, tok).generate(prompts, greedy, logits_hook=only_allowed)
    monkeypatch.setenv("DERL_BENCH_LEAN", "0")
    hf = TransformersBackend(model, tok)
    assert hf.sampler is None
    assert hf.generate(prompts, greedy, logits_hook=only_allowed) == lean
    sampled = SamplingConfig(max_new_tokens=12, temperature=1.0)
    rows = hf.generate(prompts * 3, sampled, logits_hook=only_allowed,
                       generator=torch.Generator().manual_seed(3))
    assert all(set(r) <= set(allowed) and r for r in rows)
    assert rows == hf.generate(prompts * 3, sampled, logits_hook=only_allowed,
                               generator=torch.Generator().manual_seed(3))


def test_generate_shows_the_hook_each_rows_completion_so_far(monkeypatch):
    # The hook decides from what each row has written: token k of a completion must be
    # cycle[k % 3] until the end token is allowed after 5 tokens. Both paths must agree.
    model, tok = _model(seed=4)
    eos = tok.eos_token_id
    cycle = [5, 6, 7]

    def by_position(logits, completions, active):
        out = torch.full_like(logits, float("-inf"))
        for row in active.tolist():
            out[row, cycle[len(completions[row]) % 3]] = logits[row, cycle[0]]
            if len(completions[row]) >= 5:
                out[row, eos] = logits[row, eos]
        return out

    prompts = [[8, 9, 10], [11, 12]]
    sampled = SamplingConfig(max_new_tokens=10, temperature=1.0)
    lean = TransformersBackend(model, tok).generate(
        prompts * 2, sampled, logits_hook=by_position, generator=torch.Generator().manual_seed(5))
    monkeypatch.setenv("DERL_BENCH_LEAN", "0")
    rows = TransformersBackend(model, tok).generate(
        prompts * 2, sampled, logits_hook=by_position, generator=torch.Generator().manual_seed(5))
    for row in rows + lean:
        body = [t for t in row if t != eos]
        assert body == [cycle[k % 3] for k in range(len(body))], row
    assert [len(r) for r in rows] and all(len(r) >= 5 for r in rows)
