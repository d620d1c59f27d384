"""A trained agent is evaluated on the prompts it was trained on.

The same env state, rendered once by the training rollout's prompt construction and once by the
evaluator's ``llm:`` policy, must give the same token ids (ScienceWorld used to list every valid
action at evaluation and its action templates in training).
"""

from __future__ import annotations

import gymnasium as gym
import pytest

from derl_bench.evaluation import evaluate
from derl_bench.policies import AgentSession, LLMPolicy, init_tiny_model


@pytest.mark.parametrize("env_id, kwargs, entry_key", [
    ("derl/ScienceWorld-v0", {"level": "L0", "split": "eval"}, "task"),
    ("derl/ALFWorld-v0", {"level": "L0", "split": "eval"}, "game"),
])
def test_evaluation_prompts_equal_training_prompts(data_root, tmp_path, env_id, kwargs,
                                                   entry_key):
    model = init_tiny_model(tmp_path / "tiny")
    family = env_id.split("/")[1].split("-")[0].lower()
    seen: list[list[int]] = []
    real_generate = LLMPolicy.generate

    def recording(self, prompts, sampling=None):
        seen.extend(list(p) for p in prompts)
        return real_generate(self, prompts, sampling)

    LLMPolicy.generate = recording
    try:
        record, results = evaluate(env_id, "L0", f"llm:{model}", limit=1, max_new_tokens=4)
    finally:
        LLMPolicy.generate = real_generate
    assert seen, "the evaluator generated nothing"

    # The first turn of the same episode, as a training rollout would prompt it.
    from derl_bench.evaluation import adapter_for

    adapter = adapter_for(env_id)
    env = gym.make(env_id, **kwargs)
    try:
        obs, info = env.reset(seed=results[0].seed,
                              options=adapter.reset_options(env.unwrapped, results[0].entry))
        policy = LLMPolicy.from_pretrained(model, family)
        expected = policy.agent_prompt(AgentSession.start(obs, info).turn())
    finally:
        env.close()
    assert seen[0] == expected
