"""A meta run compiles each candidate's Meta-Reward once, in the loop, and hands it to the
inner run (across a process boundary it travels pickled): a spy counts compiles."""

from __future__ import annotations

import pickle

import pytest

from derl_bench.meta import MetaConfig, run_meta
from derl_bench.meta.workers import InnerJob
from derl_bench.reward import MetaReward, compile_reward
from tests.grpo.test_reward_compiled_once import compiles  # noqa: F401  (a fixture)

INNER = {"env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 1, "group_size": 2,
         "prompts_per_step": 1, "max_new_tokens": 8, "tensorboard": False}


@pytest.mark.parametrize("method", ["random", "fixed"])
def test_each_inner_run_is_handed_its_compiled_reward(tmp_path, compiles, method):  # noqa: F811
    extra = {"reward": "outcome - 0.01 * response_length"} if method == "fixed" else {}
    config = MetaConfig(name="t", method=method, outer_steps=1, population=2,
                        validation_episodes=2, inner=INNER, output_dir=str(tmp_path),
                        progress=False, executor="local", seed=3, **extra)
    result = run_meta(config)
    trained = [c["expr"] for c in result.candidates if c.get("run")]
    assert len(trained) == 2 and sorted(compiles) == sorted(trained)


def test_an_inner_job_pickles_with_its_reward():
    reward = compile_reward("g1 / (g2 - g3) + g4", env="derl/GSM8K-v0",
                            semantics="derl-official")
    job = pickle.loads(pickle.dumps(InnerJob(0, reward, "runs/c0")))
    assert isinstance(job.reward, MetaReward) and job.reward == reward
    assert (job.expr, job.reward.semantics) == ("g1 / (g2 - g3) + g4", "derl-official")
    traj = {"outcome": [[1.0], [1.0]], "format_boxed": [[1.0], [1.0]],
            "cot_steps": [[0.0], [1.0]], "loose_outcome": [[1.0], [1.0]]}
    assert job.reward.episodic(traj).tolist() == reward.episodic(traj).tolist()
