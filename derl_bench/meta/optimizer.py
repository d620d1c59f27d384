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

Before its first GRPO step the Meta-Optimizer is cold-started, as in the paper, by supervised
fine-tuning (:meth:`MetaOptimizer.cold_start`) on one of two corpora: ``paper``, the DERL
paper's 206 hand-written formulas (the ``derl`` dataset) that compile in the env's domain, or
``generator``, valid Meta-Rewards drawn from the project's own expression generator. A
cold-started model is cached by everything that determines it, so runs that share a cold start
fine-tune once.

The outer update follows the official code's options: ``epochs`` optimiser passes over each
generation's group (PPO epochs, clipped ratio), the KL reference optionally reset to the
current model before every update (``reference_reset``), and the advantage estimator
(``grpo``: ``(r - mean) / std`` within the group; ``rloo``: REINFORCE with a leave-one-out
baseline, ``r_i - mean_{j != i} r_j``, unscaled, so a small score difference stays a small
advantage; ``raw``: the score itself, no baseline, as in the official code).

``decoder: whitelist`` samples as the released DERL code does instead
(:mod:`derl_bench.reward.whitelist`): the official prompt (the cold-start corpus's
instruction, naming ``g1..g4`` and ``+ - * /``), a fixed token whitelist in place of the
grammar, the first line of each sample as its formula and the official validity check; the
update trains on the formula's text tokenized again, without an end token, as the official
update does. ``invalid: drop`` drops the invalid samples from the update and refills the group
to its size with copies of the first valid sample and its score (the official update).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import random
import string
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl_bench.grpo.advantage import outer_advantages
from derl_bench.grpo.loss import token_logprobs
from derl_bench.grpo.update import (
    DivergedError,
    UpdateSettings,
    batch_logprobs,
    grpo_update,
    make_optimizer,
)
from derl_bench.meta.optimizer_config import COLD_STARTS, OptimizerConfig
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
from derl_bench.reward import (
    MetaRewardError,
    PrimitiveSet,
    TokenConstraint,
    compile_reward,
    language_summary,
    primitive_set,
    random_expression,
)
from derl_bench.reward.whitelist import check_formula, formula_text, whitelist_ids
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
SFT_LEARNING_RATE = 3e-3


def build_prompt(domain: str | PrimitiveSet) -> list[dict[str, str]]:
    """The Meta-Optimizer's chat messages for ``domain``: an env id, a family or a domain, whose
    primitives and aliases the random generator draws from too."""
    chosen = primitive_set(domain)
    aliases = ", ".join(f"{a} = {text}" for a, text in chosen.aliases.items())
    return [{"role": "user", "content": PROMPT.format(
        primitives=", ".join(chosen.names), aliases=aliases, language=language_summary())}]


def official_prompt() -> list[dict[str, str]]:
    """The released DERL code's Meta-Optimizer prompt, as chat messages: its instruction is the
    one every item of the paper's cold-start corpus carries (the ``derl`` dataset)."""
    from derl_bench.data.corpus import cold_start_instruction

    return [{"role": "user", "content": cold_start_instruction()}]


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
    # The automaton is stepped from the state it is in, never re-fed from the start: closing
    # is called for many candidate tokens at every decoding step.
    state = automaton.feed(text)
    if state is None:
        return None
    suffix = ""
    for _ in range(limit):
        if automaton.completes(state):
            return suffix
        for piece in (*_CLOSERS, *_NAME_CHARS):
            following = automaton.feed(piece, state)
            if following is not None:
                state, suffix = following, suffix + piece
                break
        else:
            return None
    return None


@contextlib.contextmanager
def _cache_lock(cached: Path | None) -> Iterator[None]:
    """Hold an exclusive lock on ``cached``'s entry (nothing without a cache): the second of
    two processes that want the same cold start waits and then loads the first one's."""
    if cached is None:
        yield
        return
    import fcntl

    cached.parent.mkdir(parents=True, exist_ok=True)
    with open(cached.with_suffix(".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class MetaOptimizer:
    """An LLM proposer of Meta-Rewards, trained by GRPO on validation scores.

    Args:
        domain: the env id (or family, or ``"math"``/``"agent"``) whose primitives it writes,
            or that env id's primitive set where the caller has it
            (:func:`~derl_bench.reward.primitive_set`).
        config: its model, sampler and outer update (:class:`OptimizerConfig`). The cold
            start is :meth:`cold_start`'s, called by the owner.
        workdir: where the tiny model is written.
        invalid_score: what an invalid proposal scores in the update (``config.invalid``
            ``score``).
        frozen: the frozen control (``derl-frozen``): the same sampler, cold start included,
            that never updates (a learning rate of 0).
    """

    def __init__(self, domain: str | PrimitiveSet, config: OptimizerConfig | None = None,
                 workdir: str | Path = ".", seed: int = 0, invalid_score: float = 0.0,
                 device: str = "cpu", frozen: bool = False) -> None:
        config = config or OptimizerConfig()
        self.config = config
        self.decoder, self.invalid = config.decoder, config.invalid
        model = config.model
        self.domain = domain
        self.model_source = model
        if model == "tiny":
            path = Path(workdir) / "meta-optimizer-init"
            if not (path / "config.json").exists():
                init_tiny_model(path, TinyModelSpec(seed=seed + 7919), overwrite=True)
            model = str(path)
        self.model, self.tokenizer = load_model_and_tokenizer(model, device)
        configure_threads(self.model)
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.learning_rate = 0.0 if frozen else config.learning_rate
        self.optimizer = make_optimizer(self.model, self.learning_rate)
        self.settings = UpdateSettings(kl_coef=config.kl_coef, micro_batch_size=64,
                                       temperature=config.temperature,
                                       updates_per_batch=config.epochs)
        self.reference_reset, self.advantage = config.reference_reset, config.advantage
        # The cold-started model, kept to measure how far learning has moved the sampler.
        self.start = self.reference
        self.max_new_tokens, self.temperature = config.max_new_tokens, config.temperature
        self.invalid_score = invalid_score
        self.device = device
        # On the model's device: sampling on a GPU refuses a CPU generator.
        self.generator = torch.Generator(device=device).manual_seed(seed)
        vocab = [self.tokenizer.decode([i]) for i in range(len(self.tokenizer))]
        self.token_text = vocab
        self.eos_id = self.tokenizer.eos_token_id
        self.backend = TransformersBackend(self.model, self.tokenizer)
        if self.decoder == "whitelist":
            self.whitelist = whitelist_ids(self.tokenizer)
            messages = official_prompt()
        else:
            # Tabs and newlines are valid whitespace to the grammar but make unreadable rewards.
            self.constraint = TokenConstraint(
                ["" if any(c in t for c in "\t\r\n\x0b\x0c") else t for t in vocab], domain)
            self.char_token = {t: i for i, t in enumerate(vocab) if len(t) == 1}
            self._closing_cache: dict[str, str | None] = {}
            self._allowed_cache: dict[str, list[int]] = {}
            messages = build_prompt(domain)
        prompt_text = render(self.tokenizer, messages)
        self.prompt_ids: list[int] = self.tokenizer(
            prompt_text, add_special_tokens=False)["input_ids"]
        self.updates = 0

    # -- constrained decoding -------------------------------------------------------------

    def _closing(self, text: str) -> str | None:
        if text not in self._closing_cache:
            if len(self._closing_cache) > 100_000:
                self._closing_cache.clear()
            self._closing_cache[text] = closing_suffix(self.constraint.automaton, text)
        return self._closing_cache[text]

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

    def _whitelist_hook(self, logits: torch.Tensor, completions: list[list[int]],
                        active: torch.Tensor) -> torch.Tensor:
        masked = torch.full_like(logits, float("-inf"))
        masked[:, self.whitelist] = logits[:, self.whitelist]
        return masked

    def _text(self, completion: Sequence[int]) -> str:
        return "".join(self.token_text[t] for t in completion if t != self.eos_id)

    def propose(self, n: int) -> list[Proposal]:
        """Sample ``n`` expressions in one batch; an unfinished (grammar) or invalid
        (whitelist) one is marked ``complete: False``."""
        sampling = SamplingConfig(self.max_new_tokens, self.temperature, 1.0)
        if self.decoder == "whitelist":
            return self._propose_whitelisted(n, sampling)
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

    def _propose_whitelisted(self, n: int, sampling: SamplingConfig) -> list[Proposal]:
        """The official rollout: whitelisted tokens, the first line as the formula, the
        official validity check. The reward is the formula with its spaces removed (what the
        official code trains on); the update trains on the formula as written, tokenized
        again without an end token."""
        completions = self.backend.generate([self.prompt_ids] * n, sampling,
                                            logits_hook=self._whitelist_hook,
                                            generator=self.generator)
        proposals = []
        for completion in completions:
            formula = formula_text(self.tokenizer.decode(
                completion, skip_special_tokens=True, clean_up_tokenization_spaces=False))
            error = check_formula(formula)
            train_ids = self.tokenizer(formula, add_special_tokens=False)["input_ids"]
            extra: dict[str, Any] = {"completion_ids": list(completion), "formula": formula,
                                     "complete": error is None, "train_ids": train_ids}
            if error is not None:
                extra["error"] = f"fails the official expression check: {error}"
            proposals.append(Proposal(formula.replace(" ", ""), "meta-optimizer", extra=extra))
        return proposals

    # -- learning ---------------------------------------------------------------------

    def cold_start_corpus(self, corpus: str, examples: int, seed: int = 0) -> list[list[int]]:
        """Token ids (with the end token) of the cold-start expressions: ``paper``, the DERL
        paper's formulas that compile in this domain and fit the token budget, in file order
        (``examples`` is ignored: the corpus is what it is); ``generator``, ``examples`` draws
        from the grammar."""
        if corpus not in COLD_STARTS:
            raise ValueError(f"cold start corpus must be one of {COLD_STARTS}, got {corpus!r}")
        if corpus == "paper":
            from derl_bench.data.corpus import cold_start_formulas

            texts = []
            for formula in cold_start_formulas():
                try:
                    compile_reward(formula, domain=self.domain)
                except MetaRewardError:
                    continue
                texts.append(formula)
        else:
            rng = random.Random(seed)
            texts = [random_expression(rng, self.domain, max_depth=rng.choice((1, 2, 2, 3)))
                     for _ in range(examples)]
        encoded = []
        for text in texts:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            valid = (check_formula(text) is None if self.decoder == "whitelist"
                     else self.constraint.is_complete(text))
            if len(ids) + 1 <= self.max_new_tokens and valid:
                encoded.append(ids + [self.eos_id])
        if not encoded:
            raise ValueError(f"no {corpus} cold-start expression fits {self.max_new_tokens} "
                             "tokens in this domain")
        return encoded

    def cold_start(self, examples: int, steps: int, seed: int = 0, batch_size: int = 32,
                   corpus: str = "generator", cache: str | Path | None = None,
                   ) -> dict[str, float]:
        """Supervised fine-tuning on the ``corpus`` (see :meth:`cold_start_corpus`) for
        ``steps`` steps; the KL reference becomes the cold-started model. With ``cache`` (a
        folder), a model cold-started the same way before is loaded instead of trained again.
        Returns the first and last loss (``cached``: 1.0 when it was loaded)."""
        texts = self.cold_start_corpus(corpus, examples, seed)
        key = hashlib.sha256(json.dumps({
            "model": self.model_source, "init": self._init_digest(),
            "domain": self.domain if isinstance(self.domain, str) else self.domain.name,
            "prompt": self.prompt_ids, "texts": texts, "steps": steps, "seed": seed,
            "batch_size": batch_size, "learning_rate": SFT_LEARNING_RATE,
        }, sort_keys=True).encode()).hexdigest()[:20]
        cached = Path(cache) / f"cold-start-{key}.pt" if cache is not None else None
        with _cache_lock(cached):  # runs started side by side fine-tune once, not each
            loaded = cached is not None and cached.is_file()
            if cached is not None and loaded:
                state = torch.load(cached, weights_only=True)
                self.model.load_state_dict(state["model"])
                losses = list(state["losses"])
            else:
                losses = self._fine_tune(texts, steps, seed, batch_size)
                if cached is not None:
                    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
                    torch.save({"model": self.model.state_dict(), "losses": losses}, tmp)
                    os.replace(tmp, cached)
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.start = self.reference
        self.optimizer = make_optimizer(self.model, self.learning_rate)
        return {"loss_first": losses[0] if losses else float("nan"),
                "loss_last": losses[-1] if losses else float("nan"),
                "cached": float(loaded)}

    def _init_digest(self) -> str:
        """A digest of the initial weights: two different models never share a cache entry."""
        digest = hashlib.sha256()
        for name, tensor in sorted(self.model.state_dict().items()):
            digest.update(name.encode())
            # The first 1024 values, read where they are (a GPU tensor has no numpy view).
            digest.update(tensor.detach().flatten()[:1024].float().cpu().numpy().tobytes())
        return digest.hexdigest()

    def _fine_tune(self, texts: list[list[int]], steps: int, seed: int,
                   batch_size: int) -> list[float]:
        rng = random.Random(seed)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        optimizer = make_optimizer(self.model, SFT_LEARNING_RATE)
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
        return losses

    def observe(self, proposals: Sequence[Proposal], scores: Sequence[float],
                valid: Sequence[bool] | None = None) -> dict[str, float]:
        """One outer update on the group of ``proposals`` with rewards ``scores``; ``valid``
        says which proposals are valid rewards (default: those sampled complete).

        Returns the update's statistics: ``meta/kl`` (to the KL reference, during the update),
        ``meta/kl_from_start`` (per token, from the cold-started model, on this group's
        samples after the update: how far learning has moved the sampler), the advantages'
        spread, and with ``invalid: drop`` how many proposals were valid (``meta/valid``)
        and how many copies refilled the group (``meta/padded``)."""
        if valid is None:
            valid = [bool(p.extra.get("complete")) for p in proposals]
        group = list(zip(proposals, scores, valid, strict=True))
        padding: dict[str, float] = {}
        if self.invalid == "drop":
            # The official update: invalid samples leave the group, which is refilled to its
            # size with the first valid sample and its score; with none valid, no update.
            kept = [(p, s, True) for p, s, ok in group if ok]
            padding = {"meta/valid": float(len(kept)), "meta/padded": 0.0}
            if not kept:
                return padding
            padding["meta/padded"] = float(len(group) - len(kept))
            group = kept + [kept[0]] * (len(group) - len(kept))
        proposals = [p for p, _, _ in group]
        rewards = [s if ok else self.invalid_score for _, s, ok in group]
        if len(rewards) < 2:
            return {"meta/reward_mean": float(sum(rewards) / max(1, len(rewards))), **padding}
        advantages = outer_advantages(rewards, self.advantage)
        episodes = [Episode(0, 0, [Step(self.prompt_ids,
                                        p.extra.get("train_ids") or p.extra["completion_ids"],
                                        p.expr, p.expr, {})]) for p in proposals]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        batch = collate(episodes, advantages, pad).to(self.device)
        if self.learning_rate == 0:
            # The frozen control: an update at learning rate 0 changes no weight, so skip it.
            stats = {"loss": 0.0, "kl": 0.0}
        else:
            if self.reference_reset:
                self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
            try:
                stats = grpo_update(self.model, self.optimizer, batch, self.settings,
                                    self.reference)
            except DivergedError as err:
                raise DivergedError(f"the Meta-Optimizer's update {self.updates + 1} diverged: "
                                    f"{err} (a smaller optimizer.learning_rate than "
                                    f"{self.learning_rate:g} keeps it finite)") from None
        self.updates += 1
        now = batch_logprobs(self.model, batch, 64, self.temperature)
        start = batch_logprobs(self.start, batch, 64, self.temperature)
        # k3 estimator of KL(current || start) on the current model's tokens, per token.
        log_ratio = (start - now) * batch.loss_mask
        k3 = (torch.exp(log_ratio) - log_ratio - 1) * batch.loss_mask
        return {"meta/loss": stats["loss"], "meta/kl": stats["kl"],
                "meta/kl_from_start": float(k3.sum() / batch.loss_mask.sum().clamp(min=1)),
                "meta/reward_mean": float(sum(rewards) / len(rewards)),
                "meta/advantage_abs_mean": float(np.abs(advantages).mean()),
                "meta/advantage_max": float(np.max(advantages)), **padding}

    def state_dict(self) -> dict[str, Any]:
        """Weights, reference, optimiser state and sampling RNG: what a resumed run needs to
        propose and learn exactly as an uninterrupted one."""
        return {"model": self.model.state_dict(), "reference": self.reference.state_dict(),
                "start": self.start.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        # A reset reference must stop being the cold-started model it was built as.
        self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.reference.load_state_dict(state["reference"])
        self.start = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.start.load_state_dict(state.get("start", state["reference"]))
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])

    def save(self, path: str | Path) -> None:
        """Save the Meta-Optimizer's weights and tokenizer."""
        with quiet_transformers():
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
