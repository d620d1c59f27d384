"""Rollouts in the real envs with the tiny model: groups, prompts, primitives, masks."""

from __future__ import annotations

import gymnasium as gym
import pytest

import derl_bench  # noqa: F401
from derl_bench.meta.workers import ray_available
from derl_bench.observers.think_action import ThinkActionWrapper
from derl_bench.policies import LLMPolicy, SamplingConfig, init_tiny_model
from derl_bench.rollout import collate, rollout_multi_turn, rollout_single_step
from derl_bench.rollout.remote import RemoteEnv


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return init_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def test_single_step_groups_share_the_problem_and_are_graded(data_root, tiny_path):
    policy = LLMPolicy.from_pretrained(tiny_path, family="math",
                                       sampling=SamplingConfig(max_new_tokens=8, seed=0))
    env = gym.make("derl/GSM8K-v0")
    episodes = rollout_single_step(env, policy, seeds=[3, 4], group_size=3)
    assert [e.group for e in episodes] == [0, 0, 0, 1, 1, 1]
    assert [e.seed for e in episodes] == [3, 3, 3, 4, 4, 4]
    problem = env.reset(seed=3)[0]
    assert problem in policy.tokenizer.decode(episodes[0].steps[0].prompt_ids)
    assert episodes[0].steps[0].prompt_ids == episodes[2].steps[0].prompt_ids
    assert episodes[0].steps[0].prompt_ids != episodes[3].steps[0].prompt_ids
    for e in episodes:
        [s] = e.steps
        assert e.terminated and {"outcome", "format_boxed", "cot_steps"} <= s.primitives.keys()
        assert s.response == policy.tokenizer.decode(s.completion_ids, skip_special_tokens=True)
    env.close()


def test_multi_turn_episodes_carry_history_primitives_and_masks(data_root, tiny_path):
    policy = LLMPolicy.from_pretrained(tiny_path, family="alfworld", history_window=1,
                                       sampling=SamplingConfig(max_new_tokens=8, seed=0))
    envs = [ThinkActionWrapper(gym.make("derl/ALFWorld-v0", level="L0", max_episode_steps=3))
            for _ in range(2)]
    episodes = rollout_multi_turn(envs, policy, seeds=[5], group_size=2)
    assert [e.group for e in episodes] == [0, 0]
    first = [policy.tokenizer.decode(e.steps[0].prompt_ids) for e in episodes]
    assert first[0] == first[1]  # same reset seed: same game, same first prompt
    assert "Your task is to:" in first[0] and "Prior to this step" not in first[0]
    assert "'go to " in first[0]  # admissible commands are listed
    for e in episodes:
        assert e.length == 3 and e.truncated and not e.terminated
        for i, s in enumerate(e.steps):
            assert {"success", "format_valid", "action_admissible"} <= s.primitives.keys()
            assert s.primitives["step_fraction"] == pytest.approx((i + 1) / 3)
        third = policy.tokenizer.decode(e.steps[2].prompt_ids)
        # history window 1: only the previous step's observation/action pair is shown
        assert f"Action 2: '{e.steps[1].action}'" in third
        assert "Action 1:" not in third
    batch = collate(episodes, [1.0, -1.0], policy.tokenizer.pad_token_id)
    assert batch.advantages.tolist() == [1.0] * 3 + [-1.0] * 3
    for row, s in enumerate(s for e in episodes for s in e.steps):
        assert int(batch.loss_mask[row].sum()) == len(s.completion_ids)
        start = len(s.prompt_ids)
        assert batch.input_ids[row, start:start + len(s.completion_ids)].tolist() == \
            s.completion_ids
        assert batch.loss_mask[row, :start].sum() == 0
    for env in envs:
        env.close()


@pytest.mark.skipif(not ray_available(), reason="ray is not installed")
def test_envs_in_ray_actors_roll_out_exactly_as_local_envs(data_root, tiny_path):
    import ray

    def make():
        return ThinkActionWrapper(gym.make("derl/ALFWorld-v0", level="L0", max_episode_steps=3))

    def run(envs):
        policy = LLMPolicy.from_pretrained(tiny_path, family="alfworld",
                                           sampling=SamplingConfig(max_new_tokens=8, seed=0))
        try:
            return rollout_multi_turn(envs, policy, seeds=[5, 9], group_size=2)
        finally:
            for env in envs:
                env.close()

    local = run([make() for _ in range(4)])
    ray.init(num_cpus=2, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"DERL_BENCH_DATA": str(data_root)}})
    try:
        remote = run([RemoteEnv(make) for _ in range(4)])
    finally:
        ray.shutdown()
    assert [[(s.action, s.primitives, s.reward) for s in e.steps] for e in remote] == [
        [(s.action, s.primitives, s.reward) for s in e.steps] for e in local]
    assert all(e.length == 3 and e.steps[0].primitives["step_fraction"] == pytest.approx(1 / 3)
               for e in remote)
