"""Choosing among admissible commands: exact log-probabilities under trie-constrained decoding.

A language model that writes a command freely can write one the game does not accept, and
ranking the admissible commands by their raw log-likelihood favours short ones (each extra
token only lowers the score). Here the model decodes inside a trie of the admissible
commands: at every prefix only the tokens that continue some admissible command are allowed,
and the model's softmax is renormalised over them. Every command ends with an end token, so
``go to drawer 1`` and a hypothetical ``go to drawer 1 0`` are different leaves. The
probability of a command is the product of its renormalised token probabilities, so

    log p(cmd) = sum_t [ logit_t(cmd_t) - logsumexp_{v allowed after cmd_<t} logit_t(v) ]

and the probabilities of all admissible commands sum to one exactly (up to float64 rounding):
this is a proper distribution over the commands, which sampling, the greedy choice and the
GRPO update all share.

:func:`command_log_probs` computes it for several states at once (a vector of envs acts
together) with one forward pass: each state's prompt is run once and its commands continue it
as short suffix rows (:func:`derl_bench.policies.fast.prefixed_hidden`) when the lean path
runs the model, else as full ``prompt + command`` rows through transformers. It is
differentiable; the rollout calls it under ``torch.no_grad()`` and the update calls the same
function with gradients on, so the two agree.

    >>> from derl_bench.policies.command_model import SPECIAL_TOKENS, build_command_model, \
word_tokenizer
    >>> words = ["1", "goal", ":", "put", "mug", "in", "cabinet", ">", "go", "to", "look"]
    >>> tok = word_tokenizer([*SPECIAL_TOKENS, *words])
    >>> policy = CommandPolicy(build_command_model(tok), tok)
    >>> [lp] = policy.log_probs([("goal : put mug in cabinet >", ["go to cabinet 1", "look"])])
    >>> round(float(lp.detach().exp().sum()), 12)
    1.0
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from derl_bench.policies.command_model import EOC
from derl_bench.policies.fast import PrefillCache, prefixed_hidden
from derl_bench.policies.lean import Weights, supports

StateIds = tuple[Sequence[int], Sequence[Sequence[int]]]
"""One state to score: its prompt's token ids and each command's token ids (no end token)."""


@dataclass(frozen=True)
class TrieTargets:
    """What the constrained softmax needs for a batch of commands (rows), each with its end
    token appended: ``targets`` ``(R, L)`` the token to score at each step, ``allowed``
    ``(R, L, V)`` the tokens the trie allows at that step's prefix, ``valid`` ``(R, L)`` which
    steps exist (rows are right-padded to the longest command)."""

    targets: torch.Tensor
    allowed: torch.Tensor
    valid: torch.Tensor


@functools.lru_cache(maxsize=4096)
def _trie(commands: tuple[tuple[int, ...], ...], end_id: int,
          ) -> tuple[dict[tuple[int, ...], list[int]], dict[tuple[int, ...], int]]:
    """A state's trie: the tokens that follow each prefix of its commands (each ending with
    ``end_id``), sorted, and each command's index by its tokens. Kept for the last 4,096
    command sets: a game's states repeat theirs at every turn of every episode of a group.
    Callers must not change what it returns."""
    following: dict[tuple[int, ...], set[int]] = {}
    for cmd in commands:
        path = (*cmd, end_id)
        for t, token in enumerate(path):
            following.setdefault(path[:t], set()).add(token)
    leaves = {cmd: i for i, cmd in enumerate(commands)}
    if len(leaves) != len(commands):
        raise ValueError("the commands of a state must be distinct (after tokenisation)")
    return {k: sorted(v) for k, v in following.items()}, leaves


def _state_trie(commands: Sequence[Sequence[int]], end_id: int,
                ) -> tuple[dict[tuple[int, ...], list[int]], dict[tuple[int, ...], int]]:
    return _trie(tuple(tuple(c) for c in commands), end_id)


def trie_targets(command_rows: Sequence[Sequence[Sequence[int]]], end_id: int,
                 vocab_size: int, device: torch.device | str = "cpu",
                 chosen: Sequence[int] | None = None) -> TrieTargets:
    """The trie of each state's commands, as masks over the vocabulary (rows state-major).

    ``allowed[r, t]`` marks the tokens that follow ``command[:t]`` in some command of the same
    state, which is the set the softmax at step ``t`` is renormalised over (step 0 is the
    first token after the prompt). With ``chosen`` (one index per state) the rows are each
    state's chosen command only, their masks still from every command of the state.
    """
    tries: list[dict[tuple[int, ...], list[int]]] = []
    picked: list[list[list[int]]] = []
    for i, commands in enumerate(command_rows):
        tries.append(_state_trie(commands, end_id)[0])
        own = [[*cmd, end_id] for cmd in commands]
        picked.append(own if chosen is None else [own[chosen[i]]])
    width = max(len(r) for rows in picked for r in rows)
    count = sum(len(rows) for rows in picked)
    targets = torch.zeros(count, width, dtype=torch.long)
    valid = torch.zeros(count, width, dtype=torch.bool)
    index_r: list[int] = []
    index_t: list[int] = []
    index_v: list[int] = []
    r = 0
    for following, rows in zip(tries, picked, strict=True):
        for row in rows:
            targets[r, :len(row)] = torch.tensor(row)
            valid[r, :len(row)] = True
            for t in range(len(row)):
                tokens = following[tuple(row[:t])]
                index_r += [r] * len(tokens)
                index_t += [t] * len(tokens)
                index_v += tokens
            r += 1
    allowed = torch.zeros(count, width, vocab_size, dtype=torch.bool)
    allowed[index_r, index_t, index_v] = True
    return TrieTargets(targets.to(device), allowed.to(device), valid.to(device))


def _step_logits_lean(model: Any, states: Sequence[StateIds], width: int,
                      device: torch.device) -> torch.Tensor:
    """Logits ``(R, width, V)`` predicting each command's tokens: each distinct prompt runs
    once (states that repeat one, as a group's members on a common path do, share it) and its
    commands continue it as suffix rows (keys and values shared)."""
    index: dict[tuple[int, ...], int] = {}
    for p, _ in states:
        index.setdefault(tuple(p), len(index))
    prompts = [list(p) for p in index]
    commands = [list(c) for _, cmds in states for c in cmds]
    owner = torch.tensor([index[tuple(p)] for p, cmds in states for _ in cmds], device=device)
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    prefix = torch.zeros(len(prompts), int(lengths.max()), dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        prefix[i, :len(p)] = torch.tensor(p, device=device)
    # The end token is only a target: the suffix rows hold the command tokens, and the state
    # after a command's last token predicts its end.
    suffix = torch.zeros(len(commands), width - 1, dtype=torch.long, device=device)
    for r, c in enumerate(commands):
        suffix[r, :len(c)] = torch.tensor(c, device=device)
    w = Weights(model)
    prefix_hidden, suffix_hidden = prefixed_hidden(w, prefix, lengths, suffix, owner)
    # Step 0 (the command's first token) is predicted by the prompt's last position, step t by
    # the command's token t - 1.
    first = prefix_hidden[owner, lengths[owner] - 1]
    hidden = torch.cat([first[:, None], suffix_hidden], dim=1)
    return w.head(hidden)


def _step_logits_hf(model: Any, states: Sequence[StateIds], width: int,
                    device: torch.device) -> torch.Tensor:
    """The same logits through the model's own forward on full ``prompt + command`` rows
    (right-padded; the padding comes after every real token, so it changes none of them)."""
    rows = [[*p, *c] for p, cmds in states for c in cmds]
    starts = [len(p) - 1 for p, cmds in states for _ in cmds]
    longest = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), longest + 1, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for r, row in enumerate(rows):
        ids[r, :len(row)] = torch.tensor(row, device=device)
        mask[r, :len(row)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits
    steps = torch.tensor(starts, device=device)[:, None] + torch.arange(width, device=device)
    steps = steps.clamp(max=ids.shape[1] - 1)
    return logits.gather(1, steps[..., None].expand(-1, -1, logits.shape[-1]))


def _check(states: Sequence[StateIds]) -> None:
    for prompt, commands in states:
        if not prompt:
            raise ValueError("a prompt needs at least one token (start with <bos>)")
        if not commands or any(len(c) == 0 for c in commands):
            raise ValueError("every state needs at least one command, each of one token or more")


def chosen_trie(states: Sequence[StateIds], chosen: Sequence[int] | None, end_id: int,
                vocab_size: int, device: torch.device | str = "cpu") -> TrieTargets:
    """The trie rows :func:`chosen_log_probs` scores: each state's chosen command, its masks
    from every command of the state (all rows, state-major, when ``chosen`` is None). Build it
    once to score the same rows several times (the epochs of an update)."""
    return trie_targets([cmds for _, cmds in states], end_id, vocab_size, device, chosen)


def _row_log_probs(model: Any, states: Sequence[StateIds], end_id: int, lean: bool | None,
                   rows: Sequence[int] | None, trie: TrieTargets | None = None,
                   temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities of the trie's rows (state-major), or of ``rows`` only: a row's
    logits depend on its prompt and its own tokens alone, so a subset costs only its rows,
    while the masks still come from every command of the state. ``trie``: those rows'
    :func:`chosen_trie`, when the caller built it already. ``temperature`` divides each
    step's masked logits (the tokens' distribution :func:`draw_commands` draws from at it)."""
    device = next(model.parameters()).device
    vocab_size = model.get_output_embeddings().weight.shape[0]
    if trie is None:
        trie = chosen_trie(states, rows, end_id, vocab_size, device)
    scored = states if rows is None else [(p, [cmds[r]]) for (p, cmds), r in
                                          zip(states, rows, strict=True)]
    targets, allowed, valid = trie.targets, trie.allowed, trie.valid
    width = targets.shape[1]
    use_lean = supports(model) if lean is None else lean
    step_logits = (_step_logits_lean if use_lean else _step_logits_hf)(model, scored, width,
                                                                       device)
    # float64 so that the probabilities of a state's commands sum to one to ~1e-15.
    logits = step_logits.double().masked_fill(~allowed, float("-inf"))
    if temperature != 1.0:
        logits = logits / temperature
    token_log_probs = logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    return token_log_probs.masked_fill(~valid, 0.0).sum(-1)


def command_log_probs(model: Any, states: Sequence[StateIds], end_id: int,
                      lean: bool | None = None) -> list[torch.Tensor]:
    """Exact log-probabilities of each state's commands under trie-constrained decoding.

    Args:
        model: a causal LM (Qwen2/Llama-shaped models take the lean path).
        states: ``(prompt_ids, command_ids)`` per state; ``command_ids`` without the end token,
            each non-empty, distinct within a state.
        end_id: the end-of-command token appended to every command.
        lean: force (True) or forbid (False) the lean forward pass; default: when supported.

    Returns one float64 tensor ``(len(command_ids),)`` per state, differentiable with respect to
    the model's parameters when gradients are on; ``exp`` of each sums to one.
    """
    if not states:
        return []
    _check(states)
    per_row = _row_log_probs(model, states, end_id, lean, None)
    return list(per_row.split([len(cmds) for _, cmds in states]))


def chosen_log_probs(model: Any, states: Sequence[StateIds], chosen: Sequence[int],
                     end_id: int, lean: bool | None = None,
                     trie: TrieTargets | None = None, temperature: float = 1.0) -> torch.Tensor:
    """``command_log_probs(...)[i][chosen[i]]`` for every state ``i``, as one float64 tensor,
    running the model on the chosen commands only (a training update needs nothing else: the
    normalisers at each step of a command come from its own row's logits, masked by the
    whole trie). About as many rows as states instead of one per admissible command. ``trie``:
    :func:`chosen_trie` of the same states and choices, built once for several calls.
    ``temperature``: of the token-by-token draws :func:`draw_commands` makes at it (each
    token's masked logits divided by it); 1 gives the model's own."""
    if len(chosen) != len(states):
        raise ValueError(f"{len(chosen)} choices for {len(states)} states")
    if not states:
        return torch.zeros(0, dtype=torch.float64)
    _check(states)
    for (_, commands), c in zip(states, chosen, strict=True):
        if not 0 <= c < len(commands):
            raise ValueError(f"choice {c} is not one of the state's {len(commands)} commands")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, not {temperature}")
    return _row_log_probs(model, states, end_id, lean, chosen, trie, temperature)


def sample_commands(model: Any, states: Sequence[StateIds], end_id: int, pad_id: int,
                    generator: torch.Generator | None = None,
                    temperature: float = 1.0) -> list[int]:
    """One command index per state, drawn token by token inside each state's trie
    (:func:`draw_commands` without the log-probabilities)."""
    return draw_commands(model, states, end_id, pad_id, generator, temperature)[0]


def draw_commands(model: Any, states: Sequence[StateIds], end_id: int, pad_id: int,
                  generator: torch.Generator | None = None, temperature: float = 1.0,
                  prefill_cache: PrefillCache | None = None,
                  ) -> tuple[list[int], torch.Tensor]:
    """One command index per state, drawn token by token inside each state's trie, and each
    drawn command's log-probability (float64).

    The same distribution as :func:`sample_command` of :func:`command_log_probs` (a command's
    probability is the product of its constrained token probabilities), at the cost of
    decoding a few tokens per state instead of scoring every admissible command: the lean
    sampler decodes with a key/value cache and a logits hook masks each row to the tokens its
    trie allows after what it has written. Where the trie allows one token only (``to`` after
    ``go``, ``from`` after the object taken), it is written without a draw and runs through
    the model with the next drawn token's step (the sampler's ``forced``): its draw would
    have had probability one. The log-probabilities come from the same masked logits the
    draws came from, so no second forward pass is needed; they equal
    :func:`chosen_log_probs` of the draws up to float32 rounding (the cache's sums run in
    another order). Needs a Qwen2/Llama-shaped model.

    At ``temperature`` each token is drawn from its masked logits divided by it, and the
    log-probabilities are of that tempered distribution: the policy a GRPO run sampling at
    that temperature trains (:func:`chosen_log_probs` at the same temperature gives them
    again). A command's probability is then the product of tempered token probabilities,
    not ``softmax(log p / temperature)`` over whole commands as :func:`sample_command`'s.

    ``prefill_cache``: prompts prefilled by earlier calls under the same weights are not run
    again (:class:`~derl_bench.policies.fast.PrefillCache`; a rollout's states recur across
    its turns)."""
    from derl_bench.policies.fast import FastSampler

    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, not {temperature}")
    if not states:
        return [], torch.zeros(0, dtype=torch.float64)
    _check(states)
    tries, leaves = zip(*(_state_trie(commands, end_id) for _, commands in states),
                        strict=True)
    longest = max(len(c) for _, cmds in states for c in cmds) + 1
    # Per model step: the masked logits, and for each row drawn there the position in its
    # command of the token drawn (the tokens a trie forces are written without a draw).
    masked_steps: list[torch.Tensor] = []
    drawn_at: list[dict[int, int]] = []

    def inside_the_trie(logits: torch.Tensor, completions: list[list[int]],
                        active: torch.Tensor) -> torch.Tensor:
        allowed = torch.zeros_like(logits, dtype=torch.bool)
        rows = active.tolist()
        for row in rows:
            allowed[row, tries[row][tuple(completions[row])]] = True
        masked = logits.masked_fill(~allowed, float("-inf"))
        masked_steps.append(masked)
        drawn_at.append({row: len(completions[row]) for row in rows})
        return masked

    def forced(row: int, completion: list[int]) -> list[int]:
        trie, path, out = tries[row], tuple(completion), []
        while len(only := trie.get(path, ())) == 1:
            out.append(only[0])
            path = (*path, only[0])
        return out

    sampler = FastSampler(model, {end_id}, pad_id)
    # States that repeat a prompt (a group's members on a common path) prefill it once (the
    # sampler's default).
    written = sampler.sample([list(p) for p, _ in states], longest, temperature=temperature,
                             generator=generator, logits_hook=inside_the_trie, forced=forced,
                             prefill_cache=prefill_cache)
    picked = []
    for row, tokens in enumerate(written):
        if not tokens or tokens[-1] != end_id:
            raise RuntimeError(f"state {row}: decoding left its trie ({tokens})")
        picked.append(leaves[row][tuple(tokens[:-1])])
    # float64, as command_log_probs: (steps, states, vocabulary) -> each row's drawn tokens. A
    # forced token's renormalised log-probability is exactly 0, so the drawn ones sum to the
    # command's.
    steps = len(drawn_at)
    log_softmax = (torch.stack(masked_steps).double() / temperature).log_softmax(-1)
    targets = torch.zeros(steps, len(written), dtype=torch.long)
    valid = torch.zeros(steps, len(written), dtype=torch.bool)
    for step, at in enumerate(drawn_at):
        for row, position in at.items():
            targets[step, row] = written[row][position]
            valid[step, row] = True
    token_log_probs = log_softmax.gather(-1, targets[..., None].to(log_softmax.device))[..., 0]
    return picked, token_log_probs.masked_fill(~valid.to(log_softmax.device), 0.0).sum(0).cpu()


def sample_command(log_probs: torch.Tensor, generator: torch.Generator | None = None,
                   temperature: float = 1.0) -> int:
    """Index of a command drawn from ``exp(log_probs)`` with ``generator`` (seeded draws repeat).

    The same distribution as sampling token by token inside the trie, since the command's
    probability is the product of its constrained token probabilities. At another
    ``temperature`` the draw is from ``softmax(log_probs / temperature)``: the temperature
    applies to whole commands, not to each token (a command's tokens are not independent
    choices), and 0 is the most probable command.

    >>> lp = torch.tensor([0.7, 0.2, 0.1]).log()
    >>> sample_command(lp, temperature=0.0)
    0
    >>> g = torch.Generator().manual_seed(0)
    >>> sorted({sample_command(lp, g, temperature=0.05) for _ in range(20)})
    [0]
    """
    if temperature < 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number >= 0, not {temperature}")
    if temperature == 0:
        return greedy_command(log_probs)
    scaled = log_probs.detach().double().cpu()
    if temperature != 1.0:
        scaled = (scaled / temperature).log_softmax(-1)
    probs = scaled.exp().float()
    return int(torch.multinomial(probs, 1, generator=generator).item())


def greedy_command(log_probs: torch.Tensor) -> int:
    """Index of the most probable command (the exact mode, not token-by-token greedy)."""
    return int(log_probs.detach().argmax().item())


@dataclass(frozen=True)
class Choice:
    """A command chosen at rollout: its index among the state's commands, its text and its
    log-probability then (a float, no graph)."""

    index: int
    command: str
    log_prob: float


class CommandPolicy:
    """A causal LM and its tokenizer choosing among admissible commands.

    Prompts are encoded as ``<bos>`` followed by the prompt's words; commands as their words
    (the end token is appended by :func:`command_log_probs`).
    """

    def __init__(self, model: Any, tokenizer: Any, end_token: str = EOC) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.end_id = int(tokenizer.convert_tokens_to_ids(end_token))
        if self.end_id == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no end-of-command token {end_token!r}")
        # A game's commands recur at every turn of every episode: each is tokenised once.
        self._command_ids: dict[str, list[int]] = {}

    def encode(self, prompt: str, commands: Sequence[str]) -> StateIds:
        """Token ids of a prompt (with ``<bos>``) and of each command."""
        return self.encode_states([(prompt, commands)])[0]

    def encode_states(self, states: Sequence[tuple[str, Sequence[str]]]) -> list[StateIds]:
        """:meth:`encode` of several states, their prompts tokenised in one call (a vector of
        envs' turn)."""
        if not states:
            return []
        tok = self.tokenizer
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        prompts = tok([p for p, _ in states], add_special_tokens=False)["input_ids"]
        known = self._command_ids
        new = [c for c in dict.fromkeys(c for _, cmds in states for c in cmds) if c not in known]
        if new:
            known.update(zip(new, tok(new, add_special_tokens=False)["input_ids"], strict=True))
        return [(bos + ids, [list(known[c]) for c in commands])
                for ids, (_, commands) in zip(prompts, states, strict=True)]

    def log_probs(self, states: Sequence[tuple[str, Sequence[str]]]) -> list[torch.Tensor]:
        """:func:`command_log_probs` of ``(prompt, commands)`` texts."""
        return command_log_probs(self.model, [self.encode(p, c) for p, c in states], self.end_id)

    def act(self, states: Sequence[tuple[str, Sequence[str]]],
            generator: torch.Generator | None = None, greedy: bool = False,
            temperature: float = 1.0) -> list[Choice]:
        """One command per state: sampled with ``generator`` at ``temperature``
        (:func:`sample_command`), or the most probable. ``log_prob`` is the model's own (at
        temperature 1)."""
        with torch.no_grad():
            all_log_probs = self.log_probs(states)
        choices = []
        for (_, commands), lp in zip(states, all_log_probs, strict=True):
            i = greedy_command(lp) if greedy else sample_command(lp, generator, temperature)
            choices.append(Choice(index=i, command=commands[i], log_prob=float(lp[i].item())))
        return choices
