"""The Meta-Optimizer: a language model that writes Meta-Rewards and learns from their scores.

Each generation it samples ``n`` expressions from one prompt (the domain's primitives and the
grammar), with constrained decoding so that every sample is a valid expression: at each token
only the tokens that keep the text a valid prefix are allowed (a trie walk over the vocabulary,
:class:`~derl_bench.reward.TokenConstraint`), and the end of sequence only once the text is a
complete expression. The ``n`` samples form one GRPO group: their rewards are the validation
scores of the inner policies they trained, and the update is the same clipped loss with k3 KL
that trains the inner policies (:mod:`derl_bench.grpo.loss`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from derl_bench.grpo.advantage import group_advantages
from derl_bench.grpo.loss import grpo_loss, token_logprobs
from derl_bench.meta.search import Proposal
from derl_bench.policies import TinyModelSpec, init_tiny_model, load_model_and_tokenizer
from derl_bench.policies.prompts import render
from derl_bench.reward import TokenConstraint, language_summary, primitive_set
from derl_bench.rollout import Episode, Step, collate

PROMPT = """You design reward functions for reinforcement learning.
Write one arithmetic expression over these primitives, each a number per step:
{primitives}
Shorthands: {aliases}.
{language}
Answer with the expression only."""


def build_prompt(domain: str) -> list[dict[str, str]]:
    """The Meta-Optimizer's chat messages for ``domain``: an env id, a family or a domain, whose
    primitives and aliases the random generator draws from too."""
    chosen = primitive_set(domain)
    aliases = ", ".join(f"{a} = {text}" for a, text in chosen.aliases.items())
    return [{"role": "user", "content": PROMPT.format(
        primitives=", ".join(chosen.names), aliases=aliases, language=language_summary())}]


class MetaOptimizer:
    """An LLM proposer of Meta-Rewards, trained by GRPO on validation scores.

    Args:
        domain: ``"math"`` or ``"agent"``.
        model: a HF name or local path, or ``"tiny"`` for a tiny model written to ``workdir``.
        workdir: where the tiny model is written.
        learning_rate, kl_coef, clip_eps: the GRPO update's settings.
        max_new_tokens: longest expression in tokens; a sample that reaches it unfinished is
            invalid and scores ``invalid_score``.
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
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=learning_rate)
        self.kl_coef, self.clip_eps = kl_coef, clip_eps
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.invalid_score = invalid_score
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)
        vocab = [self.tokenizer.decode([i]) for i in range(len(self.tokenizer))]
        self.token_text = vocab
        # Tabs and newlines are valid whitespace to the grammar but make unreadable rewards.
        self.constraint = TokenConstraint(
            ["" if any(c in t for c in "\t\r\n\x0b\x0c") else t for t in vocab], domain)
        self.eos_id = self.tokenizer.eos_token_id
        prompt_text = render(self.tokenizer, build_prompt(domain))
        self.prompt_ids: list[int] = self.tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        self.updates = 0

    @torch.no_grad()
    def _sample_one(self) -> tuple[list[int], str, bool]:
        self.model.eval()
        ids = torch.tensor([self.prompt_ids], device=self.device)
        past: Any = None
        completion: list[int] = []
        text = ""
        for _ in range(self.max_new_tokens):
            out = self.model(input_ids=ids if past is None else ids[:, -1:],
                             past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float() / max(self.temperature, 1e-5)
            allowed = self.constraint.allowed(text)
            can_stop = bool(text) and self.constraint.is_complete(text)
            if can_stop and self.eos_id is not None:
                # Near the budget, a complete expression ends rather than risk running out.
                near_end = len(completion) >= self.max_new_tokens - 4
                allowed = [self.eos_id] if near_end else [*allowed, self.eos_id]
            if not allowed:
                break
            if not can_stop and len(completion) >= self.max_new_tokens - 8:
                # Close to the budget, prefer tokens that complete the expression.
                finishing = [t for t in allowed
                             if self.constraint.is_complete(text + self.token_text[t])]
                allowed = finishing or allowed
            mask = torch.full_like(logits, float("-inf"))
            mask[allowed] = 0.0
            probs = torch.softmax(logits + mask, dim=-1).cpu()
            token = int(torch.multinomial(probs, 1, generator=self.generator))
            completion.append(token)
            if token == self.eos_id:
                return completion, text, True
            text += self.token_text[token]
            ids = torch.cat([ids, torch.tensor([[token]], device=self.device)], dim=1)
        return completion, text, bool(text) and self.constraint.is_complete(text)

    def propose(self, n: int) -> list[Proposal]:
        """Sample ``n`` expressions; unfinished ones are marked invalid."""
        proposals = []
        for _ in range(n):
            completion, text, complete = self._sample_one()
            proposals.append(Proposal(text.strip(), "meta-optimizer", extra={
                "completion_ids": completion, "complete": complete}))
        return proposals

    def observe(self, proposals: Sequence[Proposal], scores: Sequence[float]) -> dict[str, float]:
        """One GRPO update on the group of ``proposals`` with rewards ``scores``."""
        rewards = [s if p.extra.get("complete") else self.invalid_score
                   for p, s in zip(proposals, scores, strict=True)]
        advantages = group_advantages(rewards, [0] * len(rewards))
        episodes = [Episode(0, 0, [Step(self.prompt_ids, p.extra["completion_ids"], p.expr,
                                        p.expr, {})]) for p in proposals]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        batch = collate(episodes, advantages, pad).to(self.device)
        self.model.train()
        logp, _ = token_logprobs(self.model, batch.input_ids, batch.attention_mask)
        with torch.no_grad():
            ref_logp, _ = token_logprobs(self.reference, batch.input_ids, batch.attention_mask)
        out = grpo_loss(logp, logp.detach(), batch.advantages, batch.loss_mask, ref_logp=ref_logp,
                        clip_eps=self.clip_eps, kl_coef=self.kl_coef)
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.updates += 1
        return {"meta/loss": float(out.loss.detach()), "meta/kl": out.kl,
                "meta/reward_mean": float(sum(rewards) / len(rewards))}

    def save(self, path: str | Path) -> None:
        """Save the Meta-Optimizer's weights and tokenizer."""
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
