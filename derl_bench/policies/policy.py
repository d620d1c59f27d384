"""The LLM policy: a causal LM and its tokenizer, a prompt builder, an action parser, a backend.

For example, with a hub model::

    policy = LLMPolicy.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", family="math")
    ids = policy.math_prompt("What is 2 + 3?")
    [g.text for g in policy.generate([ids, ids])]   # ['2 + 3 = 5, so ... \\boxed{5}.', ...]

``family`` (a :class:`~derl_bench.family.Family` resolved where the command started, or
anything :func:`~derl_bench.family.resolve_family` takes: a card family, one of its env ids, its
spec) gives the prompt and parser its card names: a single-step family (``"math"``,
``"arithmetic"``: the whole response goes to the env, which grades it) or a multi-turn one
(``"alfworld"`` / ``"scienceworld"``: verl-agent prompt; the response goes to
:class:`~derl_bench.observers.think_action.ThinkActionWrapper`, and the policy parses the same
command for its history).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derl_bench.family import Family, FamilySpec, resolve_family
from derl_bench.observers.think_action import action_parser_for
from derl_bench.policies.backends import GenerationBackend, SamplingConfig, make_backend
from derl_bench.policies.loading import load_model_and_tokenizer
from derl_bench.policies.prompts import (
    MATH_PROMPT,
    AgentPrompt,
    AgentTurn,
    Messages,
    problem_prompt,
    render,
)


@dataclass(frozen=True)
class Generation:
    """One sampled response: its prompt and completion token ids and the decoded text."""

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str


class LLMPolicy:
    """A causal LM that answers env prompts (see the module docstring)."""

    def __init__(self, model: Any, tokenizer: Any, family: str | FamilySpec | Family,
                 backend: GenerationBackend | None = None,
                 sampling: SamplingConfig | None = None, history_window: int = 2) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.parts = resolve_family(family)
        self.spec = self.parts.spec
        self.family = self.spec.name
        self.sampling = sampling or SamplingConfig()
        self.backend = backend or make_backend("transformers", model, tokenizer)
        # the card's prompt and parser, as training, serving and evaluation use them
        if self.spec.multi_turn and self.parts.prompt is None:
            raise ValueError(f"family {self.family!r} is multi-turn but its card names no prompt")
        self.math = MATH_PROMPT if self.spec.multi_turn else problem_prompt(self.parts)
        self.agent = (AgentPrompt(self.parts.prompt, history_window) if self.spec.multi_turn
                      else None)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, family: str | FamilySpec | Family,
                        device: str = "cpu",
                        dtype: str | None = None, backend: str = "transformers",
                        backend_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> LLMPolicy:
        """Load a model and tokenizer from a HF hub name or a local directory."""
        model, tokenizer = load_model_and_tokenizer(name_or_path, device, dtype)
        gen = make_backend(backend, model, tokenizer, model_path=str(name_or_path),
                           **(backend_kwargs or {}))
        return cls(model, tokenizer, family, backend=gen, **kwargs)

    def encode(self, messages: Messages) -> list[int]:
        """Token ids of the prompt for ``messages`` (chat template when there is one)."""
        text = render(self.tokenizer, messages)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def math_prompt(self, problem: str) -> list[int]:
        """Prompt ids for a single-step problem (the card's ``prompt`` hook)."""
        return self.encode(self.math.messages(problem))

    def agent_prompt(self, turn: AgentTurn) -> list[int]:
        """Prompt ids for one agent step."""
        if self.agent is None:
            raise ValueError(f"family {self.family!r} has no agent prompt")
        return self.encode(self.agent.messages(turn))

    def generate(self, prompts: Sequence[Sequence[int]],
                 sampling: SamplingConfig | None = None) -> list[Generation]:
        """Sample one completion per prompt."""
        return self.generations(prompts, self.backend.generate(prompts, sampling or self.sampling))

    def generations(self, prompts: Sequence[Sequence[int]],
                    completions: Sequence[Sequence[int]]) -> list[Generation]:
        """Sampled completions of ``prompts`` (sampled here or elsewhere) with their text."""
        return [
            Generation(list(p), list(c), self.tokenizer.decode(c, skip_special_tokens=True))
            for p, c in zip(prompts, completions, strict=True)
        ]

    def parse_action(self, text: str) -> str:
        """The command a response stands for, by the card's ``action_parser`` (a single-step
        family's default: the whole response)."""
        return action_parser_for(self.parts)(text)[0]

    def sync(self) -> None:
        """Push the model's current weights to the generation backend."""
        self.backend.sync_weights(self.model)
