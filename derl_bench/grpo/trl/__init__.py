"""TRL's ``GRPOTrainer`` on derl-bench's envs, rewarded by a compiled Meta-Reward.

- :mod:`~derl_bench.grpo.trl.math`: single-step math: each completion is replayed through the
  env and scored with the Meta-Reward;
- :mod:`~derl_bench.grpo.trl.agent`: multi-turn agents through TRL's
  ``environment_factory``, the env's commands as an ``act`` tool.

A recipe's ``trainer: trl`` chooses them (:class:`derl_bench.grpo.dispatch.TRLTrainer`, by
the family's episodes); reward discovery's inner runs take math only, their validation
speaking the paper's protocol, not tool calls.

Both take the run's :class:`~derl_bench.reward.MetaReward` and its family, compiled and
resolved where the run started.
"""

from derl_bench.grpo.trl.agent import (
    EPISODE_OVER,
    OBSERVATION_TOKENS,
    AgentToolEnv,
    act_call,
    act_tool_schema,
    agent_dataset,
    agent_trainer,
    agent_trl_args,
    environment_factory,
    episode_prompt,
    init_tool_model,
    meta_reward_funcs,
    system_prompt,
    tool_call_demos,
    tool_call_text,
    train_trl_agent,
    with_tool_template,
)
from derl_bench.grpo.trl.math import (
    TRL_METRICS,
    finish_trl_run,
    train_trl,
    trl_args,
    trl_peft_config,
)

__all__ = ["EPISODE_OVER", "OBSERVATION_TOKENS", "TRL_METRICS", "AgentToolEnv", "act_call",
           "act_tool_schema", "agent_dataset", "agent_trainer", "agent_trl_args",
           "environment_factory", "episode_prompt", "finish_trl_run", "init_tool_model",
           "meta_reward_funcs", "system_prompt", "tool_call_demos", "tool_call_text",
           "train_trl", "train_trl_agent", "trl_args", "trl_peft_config",
           "with_tool_template"]
