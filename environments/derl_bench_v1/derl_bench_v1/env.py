"""The env that plays derl-bench's tasks: an agent env turn by turn, a single-step env in one.

For an agent env (ALFWorld, ScienceWorld) :meth:`DerlBenchEnv.run` takes an env, resets it
with the row's seed, sends its observation as the user turn, steps the env with each reply and
sends the next observation, until the episode ends: terminated, or cut at the step cap (the
card's, or ``max_episode_steps``). Every step goes into ``trace.info["derl"]``, from which the
task's metrics and reward are computed when the exchange closes. A single-step row is one
ordinary agent run; its task plays the reply (:meth:`DerlBenchTask.finalize`).
"""

from __future__ import annotations

import asyncio

import verifiers.v1 as vf

from derl_bench_v1.taskset import RECORD, SessionPool, add_step, new_record, reply_text


class DerlBenchEnvConfig(vf.EnvConfig):
    """One seat, ``agent`` (``--env.agent.*``), as in a plain verifiers eval."""

    # The default harness runs in the eval process and executes nothing, so a local runtime
    # is all it needs; verifiers' own default would provision a remote sandbox per rollout.
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class DerlBenchEnv(vf.Env[DerlBenchEnvConfig]):
    """Plays derl-bench's tasks (see the module docstring)."""

    def __init__(self, config: DerlBenchEnvConfig) -> None:
        super().__init__(config)
        self.pool = SessionPool()
        """The agent envs of finished episodes, reused by later ones (an ALFWorld game load
        and a ScienceWorld JVM are costly; a reset is not)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        """One episode of ``task``."""
        data = task.data
        if not data.multi_turn:
            await agents.agent.run(task)
            return
        session = await asyncio.to_thread(self.pool.take, data.episode_task())
        try:
            first = await asyncio.to_thread(session.reset, seed=data.seed)
            record = new_record(first)
            async with agents.agent.interaction(task) as interaction:
                # On the trace from the start, so a run cut short still scores its steps.
                interaction.trace.info[RECORD] = record
                segment = await interaction.turn(first.observation)
                while not segment.terminated:
                    view = await asyncio.to_thread(session.step, reply_text(segment.messages))
                    add_step(record, view)
                    if view.done:
                        interaction.trace.stop("truncated" if view.truncated else "terminated")
                        break
                    segment = await interaction.turn(view.observation)
        finally:
            self.pool.give_back(session)

    async def stop(self) -> None:
        """Close the kept envs when the env stops serving."""
        await asyncio.to_thread(self.pool.close)
