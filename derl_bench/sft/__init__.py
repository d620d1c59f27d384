"""Supervised warm start: fine-tune a policy on an env's own demonstrations before GRPO.

Demonstrations come from the env, rendered with the same prompts the policy sees in GRPO:

- math family (``derl/Arithmetic-v0``, ``derl/GSM8K-v0``, ``derl/MATH-v0``): the problem's
  reference solution (GSM8K's calculator marks are dropped and its ``#### n`` line becomes
  ``The answer is \\boxed{n}.``); an env with a ``demonstration(rng)`` method (the digit
  tasks) gives its own, drawn from the mixture of modes on its card;
- ALFWorld: every step of a game's expert walkthrough, as
  ``<think>…</think><action>command</action>`` after the agent prompt of that step.

The loss is the mean cross-entropy of the completion tokens (prompt tokens are masked, as in
GRPO). ``format_dropout`` replaces the final ``\\boxed{x}`` of a math demonstration by a bare
``x`` with that probability: a base policy that often misses the answer format, the regime that
shaped rewards address. The output directory appears whole or not at all::

    run_sft(SFTConfig(env_id="derl/Arithmetic-v0", output="runs/base", steps=1200,
                      format_dropout=0.85))
"""

from __future__ import annotations

import math
import random
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from derl_bench.family import Family

_CALCULATOR = re.compile(r"<<[^<>]*>>")
_BOXED_END = re.compile(r"\\boxed\{([^{}]*)\}\.?\s*$")


@dataclass
class SFTConfig:
    """A supervised warm start (see the module docstring)."""

    env_id: str
    output: str
    model: str = "tiny"
    """A HF name, a local path, or ``tiny`` (a tiny model built in code)."""
    split: str = "train"
    level: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Further keyword arguments of the env (``derl/ReasoningGym-v0``: ``task``, ``config``)."""
    steps: int = 200
    batch_size: int = 32
    learning_rate: float = 3e-3
    weight_decay: float = 0.0
    format_dropout: float = 0.0
    """Math: probability that a demonstration's final ``\\boxed{x}`` becomes a bare ``x``."""
    seed: int = 0
    tiny_layers: int = 2
    tiny_hidden_size: int = 64
    max_episode_steps: int = 30
    """Agents: walkthrough steps kept per game."""
    num_threads: int | None = None

    def __post_init__(self) -> None:
        from derl_bench.envs.items import env_settings_problem
        from derl_bench.family import find_family
        from derl_bench.settings import COUNT, LEARNING_RATE, SEED, number_at_least, refuse

        # No step would leave no loss to report and a model that is the start model.
        refuse([("steps", self.steps, COUNT), ("batch_size", self.batch_size, COUNT),
                ("learning_rate", self.learning_rate, LEARNING_RATE),
                ("weight_decay", self.weight_decay, number_at_least(0)),
                ("seed", self.seed, SEED), ("max_episode_steps", self.max_episode_steps, COUNT),
                *([("num_threads", self.num_threads, COUNT)] if self.num_threads is not None
                  else [])])
        if not 0.0 <= self.format_dropout <= 1.0:
            raise ValueError(f"format_dropout must be in [0, 1], got {self.format_dropout}")
        # only a level is checked against the card: a config without one looks nothing up
        family = None if self.level is None else find_family(self.env_id)
        problem = env_settings_problem(family, self.env_id, self.level, self.env_kwargs)
        if problem:
            raise ValueError(problem)


def gsm8k_solution(solution: str) -> str:
    """A GSM8K answer as a demonstration: calculator marks dropped, the final ``#### n``
    line turned into a boxed answer.

    >>> gsm8k_solution("She has 3 + 4 = <<3+4=7>>7 apples.\\n#### 7")
    'She has 3 + 4 = 7 apples.\\nThe answer is \\\\boxed{7}.'
    """
    body, _, answer = solution.rpartition("####")
    return f"{_CALCULATOR.sub('', body).strip()}\nThe answer is \\boxed{{{answer.strip()}}}."


def drop_format(text: str) -> str:
    """``... \\boxed{56}.`` -> ``... 56.``: the same answer without its box.

    >>> drop_format("12 + 44 = 56. The answer is \\\\boxed{56}.")
    '12 + 44 = 56. The answer is 56.'
    """
    return _BOXED_END.sub(lambda m: m.group(1) + ".", text)


def _math_demos(env: Any, policy: Any, config: SFTConfig, rng: random.Random,
                ) -> Iterator[tuple[list[int], str]]:
    bare = env.unwrapped
    count = len(bare.problems)
    while True:
        question, info = env.reset(options={"index": rng.randrange(count)})
        solution = str(info["reference_solution"])
        if hasattr(bare, "demonstration"):  # an env that defines its own mixture of modes
            solution = bare.demonstration(rng)
        elif getattr(bare, "hash_answer_solutions", False):
            solution = gsm8k_solution(solution)
        if config.format_dropout and rng.random() < config.format_dropout:
            solution = drop_format(solution)
        yield policy.math_prompt(question), solution


def _agent_demos(env: Any, policy: Any, config: SFTConfig, rng: random.Random,
                 ) -> Iterator[tuple[list[int], str]]:
    from derl_bench.policies.session import AgentSession

    while True:
        obs, info = env.reset(seed=rng.randrange(2**31 - 1))
        plan = list(info.get("walkthrough") or [])[:config.max_episode_steps]
        session = AgentSession.start(obs, info)
        for command in plan:
            yield (policy.agent_prompt(session.turn()),
                   f"<think>The plan's next step is {command}.</think><action>{command}</action>")
            session.act(command)
            obs, _, terminated, truncated, info = env.step(command)
            session.observe(obs, info)
            if terminated or truncated:
                break


def demonstrations(env: Any, policy: Any, config: SFTConfig,
                   ) -> Iterator[tuple[list[int], str]]:
    """An endless seeded stream of ``(prompt_ids, completion_text)`` from ``env``."""
    rng = random.Random(config.seed)
    if policy.spec.multi_turn:
        return _agent_demos(env, policy, config, rng)
    return _math_demos(env, policy, config, rng)


def _base_model(config: SFTConfig, workdir: Path) -> str:
    if config.model != "tiny":
        return config.model
    from derl_bench.policies import TinyModelSpec, init_tiny_model

    spec = TinyModelSpec(hidden_size=config.tiny_hidden_size,
                         intermediate_size=2 * config.tiny_hidden_size,
                         num_hidden_layers=config.tiny_layers, seed=config.seed)
    return str(init_tiny_model(workdir / "init", spec))


DemoStream = Callable[[Any, Any, SFTConfig], Iterator[tuple[list[int], str]]]
"""``(env, policy, config) -> (prompt_ids, completion_text)`` stream, like
:func:`demonstrations`."""


def run_sft(config: SFTConfig, progress: bool = False,
            demos: DemoStream | None = None) -> dict[str, Any]:
    """Fine-tune as ``config`` says and save the model to ``config.output``; returns the
    loss curve and settings. ``demos`` replaces :func:`demonstrations` (another rendering of
    the same walkthroughs, e.g. as tool calls). A Python entry point: ``config.env_id``'s
    family is resolved here, once, and handed to :func:`fine_tune`."""
    from derl_bench.family import resolve_family

    return fine_tune(config, resolve_family(config.env_id), progress=progress, demos=demos)


def fine_tune(config: SFTConfig, family: Family, progress: bool = False,
              demos: DemoStream | None = None) -> dict[str, Any]:
    """:func:`run_sft` for a caller that resolved ``config.env_id``'s ``family`` (its prompt
    and parser) where it started."""
    import gymnasium as gym

    from derl_bench.grpo.loss import token_logprobs
    from derl_bench.grpo.update import DivergedError, make_optimizer
    from derl_bench.policies import LLMPolicy, load_model_and_tokenizer
    from derl_bench.policies.threads import configure_threads
    from derl_bench.progress import quiet_transformers
    from derl_bench.rollout import Episode, Step, collate

    output = Path(config.output)
    if output.exists() and any(output.iterdir()):
        raise FileExistsError(f"{output} exists and is not empty")
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}-", dir=output.parent))
    try:
        torch.manual_seed(config.seed)
        model, tokenizer = load_model_and_tokenizer(_base_model(config, staging))
        configure_threads(model, config.num_threads)
        policy = LLMPolicy(model, tokenizer, family)
        kwargs: dict[str, Any] = {"split": config.split, **config.env_kwargs}
        if config.level is not None:
            kwargs["level"] = config.level
        env = gym.make(config.env_id, **kwargs)
        stream = (demos or demonstrations)(env, policy, config)
        eos = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        optimizer = make_optimizer(model, config.learning_rate, config.weight_decay)
        losses: list[float] = []
        steps = range(config.steps)
        if progress:
            from derl_bench.progress import progress_bar

            steps = progress_bar(steps, desc=f"sft {config.env_id}")
        model.train()
        for _ in steps:
            episodes = []
            for _ in range(config.batch_size):
                prompt, text = next(stream)
                ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
                episodes.append(Episode(0, 0, [Step(prompt, ids, text, text, {})]))
            batch = collate(episodes, [1.0] * len(episodes), pad)
            logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask,
                                     loss_mask=batch.loss_mask)
            loss = -(logp * batch.loss_mask).sum() / batch.loss_mask.sum().clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            value = float(loss.detach())
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True))
            if not (math.isfinite(value) and math.isfinite(norm)):
                raise DivergedError(f"fine-tuning diverged in step {len(losses) + 1} of "
                                    f"{config.steps}: the loss is {value:.4g} and the gradient "
                                    f"norm {norm:.4g}; nothing was saved (a smaller "
                                    f"learning_rate than {config.learning_rate:g} keeps it "
                                    "finite)")
            optimizer.step()
            losses.append(value)
        env.close()
        with quiet_transformers():
            model.save_pretrained(staging / "model")
        tokenizer.save_pretrained(staging / "model")
        shutil.rmtree(staging / "init", ignore_errors=True)
        if output.exists():
            output.rmdir()
        (staging / "model").rename(output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    tail = losses[-max(1, len(losses) // 10):]
    return {"config": asdict(config), "loss_first": losses[0] if losses else None,
            "loss_last": float(np.mean(tail)) if losses else None, "losses": losses}


__all__ = ["DemoStream", "SFTConfig", "demonstrations", "drop_format", "fine_tune",
           "gsm8k_solution", "run_sft"]
