"""The Meta-Optimizer: a language model that writes Meta-Rewards and learns from their scores.

Each generation it samples ``n`` expressions from one prompt (the domain's primitives and the
grammar) in one batch on the policies' fast path, with constrained decoding so that every
sample is a valid expression: at each token only the tokens that keep the text a valid prefix
are allowed (a trie walk over the vocabulary, :class:`~derl_bench.reward.TokenConstraint`), the
end of sequence only once the text is a complete expression, and — near the token budget —
only tokens after which the expression can still be closed within the budget, so a sample
never runs out unfinished. The ``n`` samples form one GRPO group: their rewards are the
validation scores of the inner policies they trained, and the update is the shared GRPO update
(:func:`derl_bench.grpo.update.grpo_update`) that trains the inner policies.

Before its first GRPO step the Meta-Optimizer is warm-started, as in the paper, by supervised
fine-tuning on valid Meta-Rewards drawn from the project's own expression generator
(:meth:`MetaOptimizer.warm_start`).
"""

from __future__ import annotations

import copy
import random
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.loss import token_logprobs
from derl_bench.grpo.update import UpdateSettings, grpo_update, make_optimizer
from derl_bench.meta.search import Proposal
from derl_bench.policies import (
    SamplingConfig,
    TinyModelSpec,
    TransformersBackend,
    init_tiny_model,
    load_model_and_tokenizer,
)
from derl_bench.policies.prompts import render
from derl_bench.policies.threads import configure_threads
from derl_bench.progress import quiet_transformers
from derl_bench.reward import TokenConstraint, language_summary, primitive_set, random_expression
from derl_bench.rollout import Episode, Step, collate

PROMPT = """You design reward functions for reinforcement learning.
Write one arithmetic expression over these primitives, each a number per step:
{primitives}
Shorthands: {aliases}.
{language}
Answer with the expression only."""

_CLOSERS = (")", ", ", "1")
_NAME_CHARS = string.ascii_lowercase + string.digits + "_("
TIGHT_MARGIN = 12
"""Near the budget (closing needs at least this many fewer tokens than remain), candidate
tokens are checked one by one; earlier, no single token can use up the slack."""
TIGHT_CANDIDATES = 16
"""In the tight region, the most likely allowed tokens that are checked."""


def build_prompt(domain: str) -> list[dict[str, str]]:
    """The Meta-Optimizer's chat messages for ``domain``: an env id, a family or a domain, whose
    primitives and aliases the random generator draws from too."""
    chosen = primitive_set(domain)
    aliases = ", ".join(f"{a} = {text}" for a, text in chosen.aliases.items())
    return [{"role": "user", "content": PROMPT.format(
        primitives=", ".join(chosen.names), aliases=aliases, language=language_summary())}]


def closing_suffix(automaton: Any, text: str, limit: int = 64) -> str | None:
    """A short string that completes the valid prefix ``text`` into an expression (greedy:
    an operand ``1``, a closing parenthesis, another argument, or the rest of a name), or
    ``None`` when ``text`` cannot be completed within ``limit`` characters.

        >>> from derl_bench.reward.constrained import ExpressionPrefix
        >>> closing_suffix(ExpressionPrefix("math"), "clip(g1 + ")
        '1, 1, 1)'
        >>> closing_suffix(ExpressionPrefix("math"), "m")
        'ax(1)'
    """
    suffix = ""
    for _ in range(limit):
        if automaton.is_complete(text + suffix):
            return suffix
        for piece in (*_CLOSERS, *_NAME_CHARS):
            if automaton.accepts(text + suffix + piece):
                suffix += piece
                break
        else:
            return None
    return None


class MetaOptimizer:
    """An LLM proposer of Meta-Rewards, trained by GRPO on validation scores.

    Args:
        domain: ``"math"`` or ``"agent"``.
        model: a HF name or local path, or ``"tiny"`` for a tiny model written to ``workdir``.
        workdir: where the tiny model is written.
        learning_rate, kl_coef, clip_eps: the GRPO update's settings.
        max_new_tokens: longest expression in tokens (constrained decoding always closes the
            expression within it).
    """

    def __init__(self, domain: str, model: str = "tiny", workdir: str | Path = ".",
                 seed: int = 0, learning_rate: float = 1e-4, kl_coef: float = 0.01,
                 clip_eps: float = 0.2, max_new_tokens: int = 48, temperature: float = 1.0,
                 invalid_score: float = 0.0, device: str = "cpu") -> None:
        self.domain = domain
        if model == "tiny":
            path = Path(workdir) / "meta-optimizer-init"
            if not (path / "config.json").exists():
                init_tiny_model(path, TinyModelSpec(seed=seed + 7919), overwrite=True)
            model = str(path)
        self.model, self.tokenizer = load_model_and_tokenizer(model, device)
        configure_threads(self.model)
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.optimizer = make_optimizer(self.model, learning_rate)
        self.learning_rate = learning_rate
        self.settings = UpdateSettings(clip_eps=clip_eps, kl_coef=kl_coef,
                                       micro_batch_size=64, temperature=temperature)
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.invalid_score = invalid_score
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)
        vocab = [self.tokenizer.decode([i]) for i in range(len(self.tokenizer))]
        self.token_text = vocab
        # Tabs and newlines are valid whitespace to the grammar but make unreadable rewards.
        self.constraint = TokenConstraint(
            ["" if any(c in t for c in "\t\r\n\x0b\x0c") else t for t in vocab], domain)
        self.char_token = {t: i for i, t in enumerate(vocab) if len(t) == 1}
        self._closing_cache: dict[str, str | None] = {}
        self._allowed_cache: dict[str, list[int]] = {}
        self.eos_id = self.tokenizer.eos_token_id
        self.backend = TransformersBackend(self.model, self.tokenizer)
        prompt_text = render(self.tokenizer, build_prompt(domain))
        self.prompt_ids: list[int] = self.tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        self.updates = 0

    # -- constrained decoding -------------------------------------------------------------

    def _closing(self, text: str) -> str | None:
        cached = self._closing_cache.get(text, False)
        if cached is False:
            cached = closing_suffix(self.constraint.automaton, text)
            if len(self._closing_cache) > 100_000:
                self._closing_cache.clear()
            self._closing_cache[text] = cached
        return cached

    def _allowed_tokens(self, text: str) -> list[int]:
        cached = self._allowed_cache.get(text)
        if cached is None:
            cached = self.constraint.allowed(text)
            if len(self._allowed_cache) > 100_000:
                self._allowed_cache.clear()
            self._allowed_cache[text] = cached
        return cached

    def _allowed(self, text: str, used: int, logits: torch.Tensor) -> list[int]:
        """Tokens that may follow ``text`` after ``used`` tokens (see the module docstring).

        Invariant: the greedy closing of ``text`` plus the end token fits in what remains, so
        the fallback (the closing's next character) always exists.
        """
        remaining = self.max_new_tokens - used
        complete = bool(text) and self.constraint.is_complete(text)
        if remaining <= 1:
            return [self.eos_id] if complete else []
        allowed = self._allowed_tokens(text)
        closing = self._closing(text)
        if closing is None or len(closing) + TIGHT_MARGIN >= remaining:
            order = sorted(allowed, key=lambda t: -float(logits[t]))[:TIGHT_CANDIDATES]
            fits = [t for t in order
                    if (rest := self._closing(text + self.token_text[t])) is not None
                    and len(rest) + 2 <= remaining]
            if not fits and closing:
                fits = [self.char_token[closing[0]]] if closing[0] in self.char_token else []
            allowed = fits
        if complete and self.eos_id is not None:
            allowed = [*allowed, self.eos_id]
        return allowed

    def _hook(self, logits: torch.Tensor, completions: list[list[int]],
              active: torch.Tensor) -> torch.Tensor:
        masked = torch.full_like(logits, float("-inf"))
        for row in active.tolist():
            text = self._text(completions[row])
            allowed = self._allowed(text, len(completions[row]), logits[row])
            if not allowed:  # cannot happen for a valid prefix; end the row rather than hang
                allowed = [self.eos_id]
            masked[row, allowed] = logits[row, allowed]
        return masked

    def _text(self, completion: Sequence[int]) -> str:
        return "".join(self.token_text[t] for t in completion if t != self.eos_id)

    def propose(self, n: int) -> list[Proposal]:
        """Sample ``n`` expressions in one batch; an unfinished one is marked invalid."""
        sampling = SamplingConfig(self.max_new_tokens, self.temperature, 1.0)
        completions = self.backend.generate([self.prompt_ids] * n, sampling,
                                            logits_hook=self._hook, generator=self.generator)
        proposals = []
        for completion in completions:
            text = self._text(completion)
            complete = (bool(completion) and completion[-1] == self.eos_id
                        and self.constraint.is_complete(text))
            proposals.append(Proposal(text.strip(), "meta-optimizer", extra={
                "completion_ids": list(completion), "complete": complete}))
        return proposals

    # -- learning ---------------------------------------------------------------------

    def warm_start(self, examples: int, steps: int, seed: int = 0,
                   batch_size: int = 32) -> dict[str, float]:
        """Supervised fine-tuning on ``examples`` valid Meta-Rewards from the grammar (each fits
        the token budget), for ``steps`` steps; the reference of the KL term becomes the
        warm-started model. Returns the first and last loss."""
        rng = random.Random(seed)
        texts: list[list[int]] = []
        while len(texts) < examples:
            expr = random_expression(rng, self.domain, max_depth=rng.choice((1, 2, 2, 3)))
            ids = self.tokenizer(expr, add_special_tokens=False)["input_ids"]
            if len(ids) + 1 <= self.max_new_tokens:
                texts.append(ids + [self.eos_id])
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        optimizer = make_optimizer(self.model, 3e-3)
        losses = []
        self.model.train()
        for _ in range(steps):
            chosen = [texts[rng.randrange(len(texts))] for _ in range(batch_size)]
            episodes = [Episode(0, 0, [Step(self.prompt_ids, ids, "", "", {})]) for ids in chosen]
            batch = collate(episodes, [1.0] * len(episodes), pad).to(self.device)
            logp, _ = token_logprobs(self.model, batch.input_ids, batch.attention_mask,
                                     loss_mask=batch.loss_mask)
            loss = -(logp * batch.loss_mask).sum() / batch.loss_mask.sum().clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0, foreach=True)
            optimizer.step()
            losses.append(float(loss.detach()))
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.optimizer = make_optimizer(self.model, self.learning_rate)
        return {"loss_first": losses[0] if losses else float("nan"),
                "loss_last": losses[-1] if losses else float("nan")}

    def observe(self, proposals: Sequence[Proposal], scores: Sequence[float]) -> dict[str, float]:
        """One GRPO update on the group of ``proposals`` with rewards ``scores``."""
        rewards = [s if p.extra.get("complete") else self.invalid_score
                   for p, s in zip(proposals, scores, strict=True)]
        if len(rewards) < 2:
            return {"meta/reward_mean": float(sum(rewards) / max(1, len(rewards)))}
        advantages = group_advantages(rewards, [0] * len(rewards))
        episodes = [Episode(0, 0, [Step(self.prompt_ids, p.extra["completion_ids"], p.expr,
                                        p.expr, {})]) for p in proposals]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        batch = collate(episodes, advantages, pad).to(self.device)
        stats = grpo_update(self.model, self.optimizer, batch, self.settings, self.reference)
        self.updates += 1
        return {"meta/loss": stats["loss"], "meta/kl": stats["kl"],
                "meta/reward_mean": float(sum(rewards) / len(rewards))}

    def state_dict(self) -> dict[str, Any]:
        """Weights, reference, optimiser state and sampling RNG: what a resumed run needs to
        propose and learn exactly as an uninterrupted one."""
        return {"model": self.model.state_dict(), "reference": self.reference.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.reference.load_state_dict(state["reference"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])

    def save(self, path: str | Path) -> None:
        """Save the Meta-Optimizer's weights and tokenizer."""
        with quiet_transformers():
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
