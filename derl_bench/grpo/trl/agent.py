"""TRL's multi-turn ``GRPOTrainer`` on derl-bench's agent envs, through ``environment_factory``.

TRL plays a multi-turn episode as one chat: the model answers with tool calls, TRL runs each
call on an environment object and feeds the result back as a ``tool`` message, until the model
stops calling tools, the step budget is spent or the completion budget is full. This module
turns any ``derl/`` agent env (``derl/ALFWorld-v0``, ``derl/ScienceWorld-v0``) into such an
environment object:

- :class:`AgentToolEnv` wraps ``gymnasium.make(env_id, ...)`` (so the env's observers run);
  its one tool is :meth:`AgentToolEnv.act`, whose answer is the env's observation;
  ``reset(**row)`` starts the game a dataset row names (``reset_seed``, the same seeds the
  compact trainer draws, or ``game_index``, an index into the split);
- every step's ``info["primitives"]`` is recorded (with ``format_valid = 1``: TRL only calls a
  tool for a completion it parsed as a well-formed call), and :func:`meta_reward_funcs` scores
  the episodes of a batch with the compiled Meta-Reward, episodic over those primitives, reading
  them from the ``environments`` TRL passes to reward functions;
- :func:`train_trl_agent` runs ``trainer: trl`` for an agent recipe; :func:`tool_call_demos`
  feeds :func:`derl_bench.sft.run_sft` walkthrough steps rendered as tool calls, the warm start
  a small model needs before it calls tools at all.

A tokenizer whose chat template cannot render tool calls (the tiny model's plain ChatML) gets
Qwen2.5's template, ChatML with ``<tool_call>{json}</tool_call>`` turns, which TRL knows how to
parse (:func:`with_tool_template`).
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from derl_bench.family import Family
from derl_bench.grpo.checkpoint import ResumeError
from derl_bench.grpo.config import ConfigError, TrainConfig
from derl_bench.grpo.trainer import initial_model_path, record_config, step_seeds
from derl_bench.grpo.trl.math import finish_trl_run, trl_args, trl_peft_config
from derl_bench.reward import MetaReward

OBSERVATION_TOKENS = 256
"""Completion budget per turn for the tool's answer: TRL counts tool results against
``max_completion_length``, so an episode may use ``max_episode_steps * (max_new_tokens +
OBSERVATION_TOKENS)`` tokens."""

EPISODE_OVER = "The episode is over; no further actions are taken."


def system_prompt(env_id: str) -> str:
    """The instructions that open every episode's chat."""
    return (f"You are an agent playing a text game ({env_id}). Each turn, call the act tool "
            "with one command; its answer is what you observe next. Your first observation "
            "follows.")


class AgentToolEnv:
    """One ``derl/`` agent env as a TRL environment: :meth:`act` is its tool.

    After :meth:`reset`, ``commands`` holds the commands the model sent and
    ``primitive_steps`` the primitives of each step, the input of the Meta-Reward.

    TRL offers every public method but ``reset`` to the model as a tool, so :meth:`act` is the
    only other one; ``with AgentToolEnv(...) as env:`` closes the env (TRL keeps its envs for
    the whole run). ``family``: the env's family, resolved where the run started.
    """

    def __init__(self, env_id: str, family: Family, env_kwargs: dict[str, Any] | None = None,
                 max_steps: int = 30) -> None:
        import gymnasium as gym

        if not family.multi_turn:
            raise ConfigError(f"{env_id!r} is not an agent env; AgentToolEnv needs one")
        # As in the compact trainer, an explicit ``max_episode_steps`` among the env's kwargs wins.
        self._env = gym.make(env_id, **{"max_episode_steps": max_steps, **(env_kwargs or {})})
        self.commands: list[str] = []
        self.primitive_steps: list[dict[str, float]] = []
        self.done = False

    def reset(self, reset_seed: int | None = None, game_index: int | None = None,
              **_row: Any) -> str:
        """Start the game the dataset row names; returns its first observation."""
        if (reset_seed is None) == (game_index is None):
            raise ValueError("a row names its game by exactly one of reset_seed, game_index")
        if game_index is not None:
            obs, _ = self._env.reset(options={"index": int(game_index)})
        else:
            assert reset_seed is not None
            obs, _ = self._env.reset(seed=int(reset_seed))
        self.commands, self.primitive_steps, self.done = [], [], False
        return str(obs)

    def __enter__(self) -> AgentToolEnv:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._env.close()

    def act(self, command: str) -> str:
        """Take one action in the game and return what you observe.

        Args:
            command: the action, e.g. "go to desk 1" or "take mug 1 from desk 1".
        """
        if self.done:
            return EPISODE_OVER
        command = str(command)
        self.commands.append(command)
        obs, _, terminated, truncated, info = self._env.step(command)
        self.primitive_steps.append({**info.get("primitives", {}), "format_valid": 1.0})
        self.done = bool(terminated or truncated)
        return f"{obs}\n{EPISODE_OVER}" if self.done else str(obs)


def environment_factory(config: TrainConfig, family: Family) -> Callable[[], AgentToolEnv]:
    """What ``GRPOTrainer(environment_factory=...)`` calls to build each env of a run; every
    env gets the run's ``family``."""
    return functools.partial(AgentToolEnv, config.env_id, family, config.env_make_kwargs(),
                             config.max_episode_steps)


def meta_reward_funcs(config: TrainConfig, reward: MetaReward, family: Family,
                      ) -> list[Callable[..., list[float]]]:
    """Reward functions for TRL: the run's compiled Meta-Reward over each episode's recorded
    primitives, and the success rate (logged with weight 0) of the success primitive of the
    run's ``family``."""
    success_name = family.spec.success_primitive

    def meta_reward(environments: Sequence[AgentToolEnv], **_: Any) -> list[float]:
        steps = [env.primitive_steps for env in environments]
        return [float(r) for r in reward.episodic_from_steps(steps)]

    def success(environments: Sequence[AgentToolEnv], **_: Any) -> list[float]:
        return [float(env.primitive_steps[-1].get(success_name, 0.0))
                if env.primitive_steps else 0.0 for env in environments]

    return [meta_reward, success]


def act_tool_schema() -> dict[str, Any]:
    """The JSON schema TRL renders for :meth:`AgentToolEnv.act`."""
    from transformers.utils import get_json_schema

    # A bound method without an env behind it: the schema reads only the signature and docstring.
    return get_json_schema(AgentToolEnv.act.__get__(object.__new__(AgentToolEnv)))


def with_tool_template(tokenizer: Any) -> Any:
    """``tokenizer``, given Qwen2.5's ChatML tool template if its own cannot render tool calls."""
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def init_tool_model(path: str | Path, seed: int = 0, layers: int = 2,
                    hidden_size: int = 64) -> Path:
    """The tiny model of :mod:`derl_bench.policies.tiny`, saved with a tool-calling template."""
    from transformers import AutoTokenizer

    from derl_bench.policies import TinyModelSpec, init_tiny_model

    spec = TinyModelSpec(seed=seed, num_hidden_layers=layers, hidden_size=hidden_size,
                         intermediate_size=2 * hidden_size)
    path = init_tiny_model(path, spec, overwrite=True)
    tokenizer = with_tool_template(AutoTokenizer.from_pretrained(str(path)))
    tokenizer.save_pretrained(str(path))
    return path


def episode_prompt(env_id: str) -> list[dict[str, str]]:
    """A row's prompt: TRL appends the game's first observation to its last message."""
    return [{"role": "system", "content": system_prompt(env_id)},
            {"role": "user", "content": ""}]


def act_call(command: str) -> dict[str, Any]:
    """The assistant message that calls ``act(command)``, as chat templates take it."""
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "act", "arguments": {"command": command}}}]}


def tool_call_text(tokenizer: Any, messages: list[dict[str, Any]], command: str) -> str:
    """The assistant turn that calls ``act(command)`` after ``messages``, as the template
    renders it (without the end-of-turn token)."""
    tools = [act_tool_schema()]
    call = act_call(command)
    before = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                           add_generation_prompt=True)
    after = tokenizer.apply_chat_template(messages + [call], tools=tools, tokenize=False)
    if not after.startswith(before):
        raise ValueError("the chat template does not render an assistant turn as a suffix")
    return after[len(before):].rstrip("\n").removesuffix(tokenizer.eos_token)


def tool_call_demos(env: Any, policy: Any, config: Any, seeds: Sequence[int] | None = None,
                    ) -> Iterator[tuple[list[int], str]]:
    """Walkthrough steps as tool calls, for :func:`derl_bench.sft.run_sft`'s ``demos``: each
    prompt is the chat so far (with the ``act`` schema), each completion the next call.

    Games are drawn with ``config.seed``, or are the games of ``seeds`` (reset seeds) in turn,
    over and over. The policy's tokenizer gets the tool template (:func:`with_tool_template`),
    so the model ``run_sft`` saves renders the calls it learned.
    """
    tokenizer = with_tool_template(policy.tokenizer)
    tools = [act_tool_schema()]
    rng = random.Random(config.seed)
    games = itertools.cycle(seeds) if seeds else None
    while True:
        seed = next(games) if games is not None else rng.randrange(2**31 - 1)
        obs, info = env.reset(seed=int(seed))
        messages: list[dict[str, Any]] = episode_prompt(config.env_id)
        messages[-1] = {**messages[-1], "content": str(obs)}
        for command in list(info.get("walkthrough") or [])[:config.max_episode_steps]:
            prompt = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                   add_generation_prompt=True)
            yield (tokenizer(prompt, add_special_tokens=False)["input_ids"],
                   tool_call_text(tokenizer, messages, command))
            obs, _, terminated, truncated, _ = env.step(command)
            messages = messages + [act_call(command),
                                   {"role": "tool", "name": "act", "content": str(obs)}]
            if terminated or truncated:
                break


def agent_dataset(config: TrainConfig) -> Any:
    """One row per game the run plays: the compact trainer's reset seeds, in its order."""
    from datasets import Dataset

    rows = [{"prompt": episode_prompt(config.env_id), "reset_seed": seed}
            for step in range(config.steps) for seed in step_seeds(config, step)]
    return Dataset.from_list(rows)


def agent_trl_args(config: TrainConfig, trl_dir: Path) -> Any:
    """The run's settings as TRL's ``GRPOConfig`` for multi-turn tool calling."""
    return trl_args(config, trl_dir,
                    max_completion_length=config.max_episode_steps
                    * (config.max_new_tokens + OBSERVATION_TOKENS),
                    max_tool_calling_iterations=config.max_episode_steps)


def agent_trainer(config: TrainConfig, reward_funcs: list[Callable[..., list[float]]],
                  family: Family) -> Any:
    """TRL's ``GRPOTrainer`` for an agent recipe, playing the env through :class:`AgentToolEnv`;
    ``reward_funcs`` (:func:`meta_reward_funcs`, or others) must match ``config``'s two reward
    weights (Meta-Reward, then the zero-weight success rate). ``family``: the run's family,
    resolved where it started."""
    if not family.multi_turn:
        raise ConfigError(f"{config.env_id!r} is not an agent env; "
                          "derl_bench.grpo.trl.math trains math with TRL")
    if config.env_actors:
        raise ConfigError("env_actors: TRL steps its envs itself; use trainer: compact for Ray")
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    start_path = initial_model_path(config)
    tokenizer = with_tool_template(AutoTokenizer.from_pretrained(start_path))
    # TRL's list type is invariant
    funcs: list[Any] = reward_funcs
    return GRPOTrainer(model=start_path, reward_funcs=funcs,
                       args=agent_trl_args(config, config.run_dir / "trl"),
                       train_dataset=agent_dataset(config), processing_class=tokenizer,
                       environment_factory=environment_factory(config, family),
                       peft_config=trl_peft_config(config))


def train_trl_agent(config: TrainConfig, reward: MetaReward, family: Family,
                    resume: bool = False) -> list[dict[str, float]]:
    """Run agent GRPO with TRL's multi-turn trainer; returns the per-step metrics. ``reward``
    is the run's Meta-Reward and ``family`` its family, compiled and resolved where the run
    started (:class:`derl_bench.grpo.dispatch.TRLTrainer`)."""
    from transformers.trainer_utils import get_last_checkpoint

    trl_dir = config.run_dir / "trl"
    last = get_last_checkpoint(str(trl_dir)) if trl_dir.is_dir() else None
    if resume and last is None:
        raise ResumeError(f"--resume: no checkpoint under {trl_dir}")
    # The handed Meta-Reward is checked to be the config's before the run directory is written.
    reward_funcs = meta_reward_funcs(config, reward, family)
    record_config(config, resume)
    trainer = agent_trainer(config, reward_funcs, family)
    trainer.train(resume_from_checkpoint=last if resume else None)
    return finish_trl_run(trainer, config)


__all__ = ["EPISODE_OVER", "OBSERVATION_TOKENS", "AgentToolEnv", "act_call", "act_tool_schema",
           "agent_dataset", "agent_trainer", "agent_trl_args", "environment_factory",
           "episode_prompt", "init_tool_model", "meta_reward_funcs", "system_prompt",
           "tool_call_demos", "tool_call_text", "train_trl_agent", "with_tool_template"]
