"""Same numbers through every door: for a fixed seed (or item) and action list, the env played
in-process, through the verifiers taskset (``derl-bench-v1``), through the OpenEnv server's own
client and through verifiers' OpenEnv taskset on that server gives the same observations,
primitives, env rewards and Meta-Reward (the last door reports only its summed reward); one
test per family."""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import pytest

pytest.importorskip("verifiers.v1")
pytest.importorskip("derl_bench_v1")
pytest.importorskip("openenv.core")

import derl_bench  # noqa: E402
from derl_bench.family import family_specs  # noqa: E402
from derl_bench.integrations.openenv_server import (  # noqa: E402
    DerlAction,
    DerlEnvClient,
    build_app,
    open_envs,
)
from derl_bench.observers.think_action import ThinkActionWrapper  # noqa: E402
from derl_bench.reward import compile_reward  # noqa: E402
from tests.integrations.serving import serving  # noqa: E402
from tests.integrations.test_verifiers_taskset import (  # noqa: E402
    TASKSET,
    _only_trace,
    _taskset,
    play,
)

SEED, INDEX = 3, 1
COMMANDS = {"alfworld": ["look", "inventory", "go to desk 1", "examine desk 1"],
            "scienceworld": ["look around", "inventory", "open door to kitchen"]}
ANSWER = "Step by step: 2 + 2 = 4, so the answer is \\boxed{4}."


def _scenario(family: str) -> tuple[str, str, list[str]]:
    """The family's first env id, a Meta-Reward over two of its primitives, the actions."""
    spec = family_specs()[family]
    env_id = next(iter(spec.ids))
    other = next(name for name in spec.primitives if name != spec.success_primitive)
    reward = f"{spec.success_primitive} + 0.25 * mean({other})"
    if spec.multi_turn:
        commands = COMMANDS.get(family, ["look"])
        # to the step cap, as the scripted model repeats its last line until the env ends it
        commands += [commands[-1]] * (spec.max_steps - len(commands))
        return env_id, reward, [f"<think>try</think><action>{c}</action>" for c in commands]
    return env_id, reward, [ANSWER]


def _in_process(env_id: str, reward: str, actions: list[str]) -> dict:
    spec = family_specs()[derl_bench.family.family_spec(env_id).name]
    env = gym.make(env_id)
    env = ThinkActionWrapper(env) if spec.multi_turn else env
    try:
        if spec.multi_turn:
            observation, _ = env.reset(seed=SEED)
        else:
            observation, _ = env.reset(options={"index": INDEX})
        observations, steps, rewards = [observation], [], []
        for action in actions:
            observation, env_reward, terminated, truncated, info = env.step(action)
            observations.append(observation)
            steps.append(dict(info["primitives"]))
            rewards.append(float(env_reward))
            if terminated or truncated:
                break
    finally:
        env.close()
    value = float(compile_reward(reward, env=env_id).episodic_from_steps([steps])[0])
    return {"observations": observations, "steps": steps, "env_rewards": rewards,
            "meta_reward": value}


def _through_the_taskset(env_id: str, reward: str, actions: list[str], multi_turn: bool,
                         ) -> dict:
    row = dict(seeds=[SEED]) if multi_turn else dict(num_examples=INDEX + 1)
    _, episodes, model = play(_taskset(env_id=env_id, reward=reward, **row), actions)
    trace = _only_trace(episodes[-1])
    assert trace.task.data.seed == SEED if multi_turn else trace.task.data.index == INDEX
    out = trace.info["derl"]
    observations = list(out["observations"])
    # the model saw the env's text
    assert any(observations[0] in request[-1]["content"] for request in model.requests)
    return {"observations": observations, "steps": list(out["primitive_steps"]),
            "env_rewards": list(out["env_rewards"]),
            "meta_reward": trace.rewards["meta_reward"].score}


def _through_the_server(env_id: str, reward: str, actions: list[str], multi_turn: bool) -> dict:
    start = {"seed": SEED} if multi_turn else {"index": INDEX}

    async def play(url: str) -> list:
        async with DerlEnvClient(base_url=url) as client:
            results = [await client.reset(reward=reward, **start)]
            for action in actions:
                results.append(await client.step(DerlAction(text=action)))
                if results[-1].done:
                    break
            return results

    with serving(build_app(env_id, max_sessions=1, session_timeout=None)) as url:
        results = asyncio.run(play(url))
    steps = [r.observation.primitives for r in results[1:]]
    assert sum(r.reward for r in results[1:]) == pytest.approx(results[-1].observation.meta_reward)
    return {"observations": [r.observation.text for r in results], "steps": steps,
            "env_rewards": [r.observation.env_reward for r in results[1:]],
            "meta_reward": results[-1].observation.meta_reward}


def _through_verifiers_openenv(env_id: str, reward: str, actions: list[str], multi_turn: bool,
                               ) -> float:
    """verifiers' OpenEnv taskset on ``derl-bench serve``: the reset passes the seed (or item)
    and the Meta-Reward, the trace's reward is the sum of the served per-step rewards."""
    reset = {"seed": SEED} if multi_turn else {"index": INDEX}
    config = {"taskset": {"id": "openenv", "resets": [{**reset, "reward": reward}]},
              # the package's harness (no program to install) on a local runtime
              "player": {"harness": {"id": TASKSET}, "runtime": {"type": "subprocess"}}}
    with serving(build_app(env_id, max_sessions=1, session_timeout=None)) as url:
        config["taskset"]["base_url"] = url
        _, (episode,), model = play(config, actions)
    assert open_envs() == 0  # the session closed its env
    trace = _only_trace(episode)
    sent = json.loads(model.requests[0][-1]["content"])
    assert sent["action_schema"]["required"] == ["text"]
    return trace.rewards["openenv_reward"].score


@pytest.mark.parametrize("family", sorted(family_specs()))
def test_every_door_gives_the_same_numbers(family, data_root):
    spec = family_specs()[family]
    env_id, reward, actions = _scenario(family)
    here = _in_process(env_id, reward, actions)
    assert len(here["steps"]) == len(actions)  # the scenario plays every action
    taskset = _through_the_taskset(env_id, reward, actions, spec.multi_turn)
    served = _through_the_server(env_id, reward, actions, spec.multi_turn)
    for door in (taskset, served):
        assert door["observations"] == here["observations"]
        assert door["steps"] == here["steps"]
        assert door["env_rewards"] == here["env_rewards"]
        assert door["meta_reward"] == here["meta_reward"]
    # Its rewards are the Meta-Reward's increments, which telescope to the value up to the
    # rounding of as many float additions as there are steps.
    assert _through_verifiers_openenv(env_id, reward, actions, spec.multi_turn) == pytest.approx(
        here["meta_reward"], rel=1e-12, abs=1e-12)
