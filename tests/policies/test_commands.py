"""Trie-constrained command scoring: a proper distribution, exact, batched, differentiable."""

from __future__ import annotations

import random

import pytest
import torch

from derl_bench.families.alfworld.vocab import build_alfworld_tokenizer
from derl_bench.policies.command_model import CommandModelSpec, build_command_model
from derl_bench.policies.commands import (
    CommandPolicy,
    command_log_probs,
    greedy_command,
    sample_command,
    trie_targets,
)

PROMPT = ("goal : heat mug then put in cabinet hold : nothing at : countertop 1 "
          "see : mug 1 + 3 other tools : microwave 1 unvisited : cabinet 1 2 3 , drawer 1 2 >")
COMMANDS = ["go to cabinet 1", "go to cabinet 2", "go to cabinet 3", "go to drawer 1",
            "go to drawer 10", "go to microwave 1", "take mug 1 from countertop 1",
            "examine countertop 1", "inventory", "look"]


@pytest.fixture(scope="module")
def policy() -> CommandPolicy:
    torch.set_num_threads(1)
    tokenizer = build_alfworld_tokenizer()
    spec = CommandModelSpec(hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    model = build_command_model(tokenizer, spec).double()  # float64: exact comparisons
    return CommandPolicy(model, tokenizer)


def _random_states(policy: CommandPolicy, n: int, seed: int) -> list[tuple[list[int], list]]:
    """Random prompts and command sets whose commands share prefixes (as real ones do)."""
    rng = random.Random(seed)
    vocab = len(policy.tokenizer)
    states = []
    for _ in range(n):
        prompt = [policy.tokenizer.bos_token_id] + [rng.randrange(5, vocab)
                                                    for _ in range(rng.randint(1, 30))]
        stems = [[rng.randrange(5, vocab) for _ in range(rng.randint(1, 3))] for _ in range(3)]
        commands: set[tuple[int, ...]] = set()
        while len(commands) < rng.randint(1, 12):
            tail = [rng.randrange(5, vocab) for _ in range(rng.randint(0, 3))]
            commands.add(tuple(rng.choice(stems) + tail))
        states.append((prompt, [list(c) for c in sorted(commands)]))
    return states


def reference_log_probs(model, prompt: list[int], commands: list[list[int]], end_id: int,
                        shift: int = 0) -> torch.Tensor:
    """Token by token, one full forward per step: at step t the model reads prompt + cmd[:t]
    and its softmax is renormalised over the tokens that follow cmd[:t] in some command.
    ``shift`` takes the allowed set of a neighbouring step instead (a deliberate bug)."""
    rows = [[*c, end_id] for c in commands]
    out = []
    for row in rows:
        total = torch.zeros((), dtype=torch.float64)
        for t in range(len(row)):
            u = min(max(t + shift, 0), len(row) - 1)
            allowed = sorted({other[u] for other in rows if other[:u] == row[:u]} | {row[t]})
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompt + row[:t]])).logits[0, -1]
            sub = logits.double()[allowed].log_softmax(-1)
            total = total + sub[allowed.index(row[t])]
        out.append(total)
    return torch.stack(out)


def test_the_command_model_is_the_seeded_llama_decoder_built_directly():
    from transformers import LlamaConfig, LlamaForCausalLM

    from derl_bench.policies.command_model import EOC

    tokenizer = build_alfworld_tokenizer()
    spec = CommandModelSpec(seed=2)
    stop = [tokenizer.convert_tokens_to_ids(EOC), tokenizer.eos_token_id]
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stop)
    torch.manual_seed(spec.seed)
    direct = LlamaForCausalLM(config)
    built = build_command_model(tokenizer, spec)
    assert built.config.to_dict() == direct.config.to_dict()
    assert built.generation_config.eos_token_id == stop
    assert built.generation_config.pad_token_id == tokenizer.pad_token_id
    mine, theirs = built.state_dict(), direct.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_probabilities_of_the_admissible_commands_sum_to_one(policy):
    for prompt, commands in _random_states(policy, 12, seed=0):
        [lp] = command_log_probs(policy.model, [(prompt, commands)], policy.end_id)
        assert lp.dtype == torch.float64
        assert abs(float(lp.detach().exp().sum()) - 1.0) < 1e-12
    [lp] = policy.log_probs([(PROMPT, COMMANDS)])
    assert abs(float(lp.detach().exp().sum()) - 1.0) < 1e-12


def test_drawer_1_and_drawer_10_are_distinct_commands(policy):
    [lp] = policy.log_probs([(PROMPT, COMMANDS)])
    probs = lp.detach().exp()
    p1, p10 = probs[COMMANDS.index("go to drawer 1")], probs[COMMANDS.index("go to drawer 10")]
    assert p1 > 0 and p10 > 0 and p1 != p10
    # A command that is a prefix of another (tokens [a] and [a, b]) is told apart by the end
    # token: both get probability, and together they hold all of it.
    a, b = 200, 201
    [lp] = command_log_probs(policy.model, [([2, 7, 9], [[a], [a, b]])], policy.end_id)
    assert (lp.detach().exp() > 0).all() and abs(float(lp.detach().exp().sum()) - 1) < 1e-12


@pytest.mark.parametrize("lean", [True, False])
def test_scores_equal_the_token_by_token_reference(policy, lean):
    states = _random_states(policy, 4, seed=1) + [policy.encode(PROMPT, COMMANDS)]
    batched = command_log_probs(policy.model, states, policy.end_id, lean=lean)
    for (prompt, commands), lp in zip(states, batched, strict=True):
        ref = reference_log_probs(policy.model, list(prompt), commands, policy.end_id)
        torch.testing.assert_close(lp, ref, atol=1e-10, rtol=0)


def test_a_one_step_shift_of_the_mask_would_be_caught(policy):
    """The reference test is sensitive: a mask taken one step early or late gives other
    numbers (so an off-by-one in the trie masks cannot pass it)."""
    prompt, commands = policy.encode(PROMPT, COMMANDS)
    [lp] = command_log_probs(policy.model, [(prompt, commands)], policy.end_id)
    for shift in (-1, 1):
        wrong = reference_log_probs(policy.model, prompt, commands, policy.end_id, shift=shift)
        assert (lp - wrong).abs().max() > 1e-3


def test_trie_masks_allow_exactly_the_continuations():
    trie = trie_targets([[[5, 6], [5, 7, 8], [9]]], end_id=4, vocab_size=12)
    allowed = {(r, t): trie.allowed[r, t].nonzero().flatten().tolist()
               for r in range(3) for t in range(4) if trie.valid[r, t]}
    assert allowed == {(0, 0): [5, 9], (0, 1): [6, 7], (0, 2): [4],
                       (1, 0): [5, 9], (1, 1): [6, 7], (1, 2): [8], (1, 3): [4],
                       (2, 0): [5, 9], (2, 1): [4]}
    with pytest.raises(ValueError, match="distinct"):
        trie_targets([[[5, 6], [5, 6]]], end_id=4, vocab_size=12)


def test_batching_states_gives_the_values_of_one_at_a_time(policy):
    states = _random_states(policy, 6, seed=2)
    batched = command_log_probs(policy.model, states, policy.end_id)
    for state, lp in zip(states, batched, strict=True):
        [alone] = command_log_probs(policy.model, [state], policy.end_id)
        torch.testing.assert_close(lp, alone, atol=1e-12, rtol=0)


def test_states_that_repeat_a_prompt_share_its_pass_and_keep_their_values(policy):
    """A GRPO minibatch holds several rows of one state (its group members' choices): the
    prompt runs once for all of them, and each row's value is what it is alone, with its
    gradient reaching the shared prompt from every row."""
    from derl_bench.policies.commands import chosen_log_probs

    [one, two] = _random_states(policy, 2, seed=5)
    states = [one, two, one, one]
    chosen = [0, len(two[1]) - 1, len(one[1]) - 1, 0]
    shared = chosen_log_probs(policy.model, states, chosen, policy.end_id, lean=True)
    for state, c, value in zip(states, chosen, shared, strict=True):
        alone = chosen_log_probs(policy.model, [state], [c], policy.end_id, lean=False)
        torch.testing.assert_close(value, alone[0], atol=1e-12, rtol=0)
    policy.model.zero_grad()
    shared.sum().backward()
    together = [p.grad.clone() for p in policy.model.parameters()]
    policy.model.zero_grad()
    for state, c in zip(states, chosen, strict=True):
        chosen_log_probs(policy.model, [state], [c], policy.end_id, lean=False).sum().backward()
    # RMSNorm runs in float32 (as transformers' does), so the two orders of summing the
    # prompt's gradient differ at float32's rounding; a lost row would differ at order one.
    for a, b in zip(together, (p.grad for p in policy.model.parameters()), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    policy.model.zero_grad()


def test_rollout_log_prob_equals_the_recomputation_with_gradients(policy):
    states = [(PROMPT, COMMANDS), (PROMPT.replace("mug 1", "mug 2"), COMMANDS[:4])]
    choices = policy.act(states, generator=torch.Generator().manual_seed(0))
    recomputed = policy.log_probs(states)  # gradients on, as in the update
    assert all(lp.requires_grad for lp in recomputed)
    for choice, lp, (_, commands) in zip(choices, recomputed, states, strict=True):
        assert commands[choice.index] == choice.command
        assert choice.log_prob == float(lp[choice.index].detach())
    policy.model.zero_grad()
    sum(lp[c.index] for c, lp in zip(choices, recomputed, strict=True)).backward()
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    policy.model.zero_grad()


def test_sampling_is_seeded_and_follows_the_distribution(policy):
    [lp] = policy.log_probs([(PROMPT, COMMANDS)])
    draws = [sample_command(lp, torch.Generator().manual_seed(s)) for s in range(3)]
    assert draws == [sample_command(lp, torch.Generator().manual_seed(s)) for s in range(3)]
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([sample_command(lp, gen) for _ in range(4000)]),
                            minlength=len(COMMANDS)).double() / 4000
    assert (counts - lp.detach().exp()).abs().max() < 0.04
    assert greedy_command(lp) == int(lp.argmax())
    [greedy] = policy.act([(PROMPT, COMMANDS)], greedy=True)
    assert greedy.index == int(lp.argmax())


def test_a_temperature_draws_from_the_commands_rescaled_distribution(policy):
    """At temperature T the draws follow softmax(log p / T) over whole commands: flatter above
    1, sharper below, the most probable command at 0; a negative one is refused."""
    [lp] = policy.log_probs([(PROMPT, COMMANDS)])
    lp = lp.detach()
    for temperature in (0.4, 2.5):
        gen = torch.Generator().manual_seed(1)
        drawn = torch.tensor([sample_command(lp, gen, temperature) for _ in range(4000)])
        counts = torch.bincount(drawn, minlength=len(COMMANDS)).double() / 4000
        assert (counts - (lp / temperature).softmax(-1)).abs().max() < 0.04
        assert (counts - lp.exp()).abs().max() > 0.04  # not the temperature-1 distribution
    assert sample_command(lp, temperature=0.0) == greedy_command(lp)
    [chosen] = policy.act([(PROMPT, COMMANDS)], torch.Generator().manual_seed(0),
                          temperature=0.4)
    assert chosen.log_prob == pytest.approx(float(lp[chosen.index]))  # the model's own
    with pytest.raises(ValueError, match="temperature"):
        sample_command(lp, temperature=-1.0)


def test_bad_inputs_are_refused(policy):
    with pytest.raises(ValueError, match="at least one command"):
        command_log_probs(policy.model, [([2, 5], [])], policy.end_id)
    with pytest.raises(ValueError, match="at least one token"):
        command_log_probs(policy.model, [([], [[5]])], policy.end_id)
    assert command_log_probs(policy.model, [], policy.end_id) == []


@pytest.mark.numerics
def test_the_chosen_commands_alone_score_what_every_command_scores():
    """chosen_log_probs runs only the chosen rows; the trie's masks still come from every
    command, so each value is the full computation's (up to float32 sums over other
    padding)."""
    from derl_bench.policies.commands import chosen_log_probs
    from tests.numerics import assert_close_reordered

    tok = build_alfworld_tokenizer()
    policy = CommandPolicy(build_command_model(tok).eval(), tok)
    states = [policy.encode("goal : put mug in cabinet >",
                            ["go to cabinet 1", "go to cabinet 10", "go to drawer 2", "look"]),
              policy.encode("goal : heat egg then put in countertop > last : look ok",
                            ["inventory", "go to microwave 1", "take egg 1 from fridge 1"])]
    full = command_log_probs(policy.model, states, policy.end_id)
    for chosen in ([1, 2], [3, 0], [0, 1]):
        got = chosen_log_probs(policy.model, states, chosen, policy.end_id)
        want = torch.stack([lp[c] for lp, c in zip(full, chosen, strict=True)])
        assert_close_reordered(got.float(), want.detach().float(), terms=256)
    with pytest.raises(ValueError, match="choice 4"):
        chosen_log_probs(policy.model, states, [4, 0], policy.end_id)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_token_by_token_sampling_draws_from_the_command_distribution(temperature):
    """sample_commands (decoding inside the trie) and the exact distribution agree: over many
    draws every command's frequency is within 4 standard errors of its probability. At a
    temperature each token comes from its masked logits divided by it: a command's
    probability is then exp(chosen_log_probs at that temperature), which sums to one over the
    state's commands and is not the model's own."""
    from derl_bench.policies.commands import chosen_log_probs, sample_commands

    tok = build_alfworld_tokenizer()
    model = build_command_model(tok).eval()
    with torch.no_grad():  # a less uniform model, so the test can tell distributions apart
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.mul_(3.0)
    policy = CommandPolicy(model, tok)
    state = policy.encode("goal : put mug in cabinet >",
                          ["go to cabinet 1", "go to cabinet 10", "go to drawer 2", "look",
                           "take mug 1 from cabinet 1"])
    [lp] = command_log_probs(model, [state], policy.end_id)
    own = lp.detach().exp()
    every = list(range(len(own)))
    with torch.no_grad():
        probs = chosen_log_probs(model, [state] * len(every), every, policy.end_id,
                                 temperature=temperature).exp()
    assert float(probs.sum()) == pytest.approx(1.0, abs=1e-9)
    # the test can tell the tempered distribution from the model's own
    assert ((probs - own).abs().max() > 0.05) == (temperature != 1.0)
    draws = 3000
    generator = torch.Generator().manual_seed(5)
    picked = sample_commands(model, [state] * draws, policy.end_id, tok.pad_token_id, generator,
                             temperature)
    counts = torch.bincount(torch.tensor(picked), minlength=len(probs)).double()
    se = (probs * (1 - probs) / draws).sqrt()
    assert ((counts / draws - probs).abs() <= 4 * se + 1e-3).all(), (counts / draws, probs)
    assert probs.max() > 0.3  # not uniform: the check above has teeth
    first, again = (sample_commands(model, [state] * 50, policy.end_id, tok.pad_token_id,
                                    torch.Generator().manual_seed(9), temperature)
                    for _ in range(2))
    assert first == again  # seeded
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            sample_commands(model, [state], policy.end_id, tok.pad_token_id, temperature=bad)


@pytest.mark.numerics
@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_each_draw_carries_the_log_probability_of_its_command(temperature):
    """draw_commands's log-probabilities come from the masked logits the draws came from; they
    are chosen_log_probs of the same draws (float32 sums in another order: the cache's), so a
    GRPO update's first ratio is 1 without a second forward pass at rollout. At a temperature
    they are the tempered draw's, as chosen_log_probs at it, not the model's own."""
    from derl_bench.policies.commands import chosen_log_probs, draw_commands
    from tests.numerics import assert_close_reordered

    tok = build_alfworld_tokenizer()
    policy = CommandPolicy(build_command_model(tok).eval(), tok)
    states = [policy.encode("goal : put mug in cabinet >",
                            ["go to cabinet 1", "go to cabinet 10", "go to drawer 2", "look"]),
              policy.encode("goal : heat egg then put in countertop > last : look ok",
                            ["inventory", "go to microwave 1", "take egg 1 from fridge 1"])] * 4
    with torch.no_grad():
        picks, drawn = draw_commands(policy.model, states, policy.end_id, tok.pad_token_id,
                                     torch.Generator().manual_seed(3), temperature)
        want = chosen_log_probs(policy.model, states, picks, policy.end_id,
                                temperature=temperature)
        own = chosen_log_probs(policy.model, states, picks, policy.end_id)
    assert drawn.dtype == torch.float64 and drawn.shape == (len(states),)
    assert len(set(picks[0::2])) > 1 or len(set(picks[1::2])) > 1  # not one command each
    assert_close_reordered(drawn.float(), want.float(), terms=256)
    assert ((drawn - own).abs().max() > 1e-3) == (temperature != 1.0)
    assert (drawn < 0).all()
