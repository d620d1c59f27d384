"""Every derl-bench env as a verifiers environment (``pip install 'derl-bench[verifiers]'``).

verifiers' trainers and tools (prime-rl, SkyRL, Atropos, ``vf-eval``) load an environment with
``verifiers.load_environment(name, **args)``, which imports the module ``name`` and calls its
``load_environment(**args)``. derl-bench is such a module::

    import verifiers as vf
    env = vf.load_environment("derl-bench", env="derl/ALFWorld-v0", reward="success")
    env = derl_bench.load_environment(env_id="derl/GSM8K-v0", reward="outcome", split="train")

(verifiers' own first argument is called ``env_id``, so through ``vf.load_environment`` the
derl id goes in ``env``.)

- A single-step family (GSM8K, MATH, the generated tasks) is a ``SingleTurnEnv``: one row per
  item of the split, in the order ``reset(options={"index": i})`` plays them, the prompt being
  the env's observation. The rubric steps the env with the completion's text.
- A multi-turn family (ALFWorld, ScienceWorld) is a ``MultiTurnEnv``: each rollout takes an
  env from a pool, resets it with the row's seed (``reset(seed=s)``, as derl-bench's trainer
  draws games), answers each assistant turn with the env's next observation, and stops when
  the episode ends: terminated, or cut at the step cap (``max_episode_steps``, the card's by
  default). Answers are whole ``<think>…</think><action>…</action>`` responses, as the
  trainer's agents write them (``action_format="command"``: bare commands).

The rubric is the Meta-Reward (weight 1), compiled and evaluated by derl-bench's compiler
(:func:`derl_bench.reward.compile_reward`, never ``eval``) with the chosen ``semantics``, over
every step's primitives; every primitive of the card is a metric of weight 0, logged with its
value at the episode's last step (where the family's success primitive says whether the
episode succeeded). ``state["primitive_steps"]`` holds every step's primitives and
``state["observations"]`` the env's observations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import verifiers as vf

from derl_bench.integrations.sessions import EpisodeSession, SessionError, Task, reset_number
from derl_bench.policies.prompts import ANSWER_FORMAT, MATH_INSTRUCTION
from derl_bench.settings import DEFAULT_ENV_ID


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        text = part.get("text") if hasattr(part, "get") else None
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


def last_assistant_text(messages: Sequence[Any]) -> str:
    """The text of the last assistant message of ``messages`` ("" when there is none)."""
    for message in reversed(list(messages)):
        if message.get("role") == "assistant":
            return _text(message.get("content"))
    return ""


def _metric(name: str) -> Callable[..., float]:
    def metric(state: Any) -> float:
        steps = state.get("primitive_steps") or []
        return float(steps[-1].get(name, 0.0)) if steps else 0.0

    metric.__name__ = name
    return metric


def _rubric(task: Task, score: Callable[..., Any]) -> vf.Rubric:
    """The Meta-Reward (weight 1) and every card primitive as a metric (weight 0)."""
    compiled = task.compile_reward()

    async def meta_reward(state: Any) -> float:
        steps = await score(state)
        return float(compiled.episodic_from_steps([steps])[0]) if steps else 0.0

    names = list(task.spec.primitives)
    return vf.Rubric(funcs=[meta_reward, *(_metric(n) for n in names)],
                     weights=[1.0] + [0.0] * len(names))


class DerlSingleTurnEnv(vf.SingleTurnEnv):
    """A single-step derl-bench env: the rubric plays the completion as the env's action."""

    def __init__(self, task: Task, **kwargs: Any) -> None:
        self.task = task
        self._session = EpisodeSession(task)
        super().__init__(rubric=_rubric(task, self._score), **kwargs)

    async def _score(self, state: Any) -> list[dict[str, float]]:
        if state.get("primitive_steps") is None:
            index = int(state["info"]["index"])
            text = last_assistant_text(state.get("completion") or [])
            views = await asyncio.to_thread(self._session.play, [text], index=index)
            state["observations"] = [v.observation for v in views]
            state["primitive_steps"] = [v.primitives for v in views[1:]]
            state["env_rewards"] = [v.env_reward for v in views[1:]]
        return list(state["primitive_steps"])

    @vf.teardown
    async def close_env(self) -> None:
        """Close the env when verifiers tears the environment down."""
        self._session.close()


class DerlMultiTurnEnv(vf.MultiTurnEnv):
    """A multi-turn derl-bench env: one pooled env per running rollout."""

    def __init__(self, task: Task, **kwargs: Any) -> None:
        self.task = task
        self._idle: list[EpisodeSession] = []
        self._live: dict[str, EpisodeSession] = {}
        cap = task.max_episode_steps or task.spec.max_steps
        # The env's own cap ends an episode (final_env_response) after its last step; the
        # turn limit is a backstop that would otherwise cut the last turn before it is played.
        super().__init__(max_turns=cap + 1, rubric=_rubric(task, self._score), **kwargs)

    async def _score(self, state: Any) -> list[dict[str, float]]:
        return list(state.get("primitive_steps") or [])

    def _take(self) -> EpisodeSession:
        # a ScienceWorld env is a JVM: reuse the envs of finished rollouts
        return self._idle.pop() if self._idle else EpisodeSession(self.task)

    async def setup_state(self, state: Any) -> Any:
        """Reset an env with the row's seed; its first observation is the prompt's last
        (user) message."""
        try:
            session = await asyncio.to_thread(self._take)
            self._live[state["trajectory_id"]] = session
            view = await asyncio.to_thread(session.reset, seed=int(state["info"]["seed"]))
        except SessionError as exc:
            raise vf.Error(str(exc)) from exc
        state["prompt"][-1]["content"] = view.observation
        state["observations"] = [view.observation]
        state["primitive_steps"] = []
        state["env_rewards"] = []
        return state

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        """Step the env with the last assistant turn; its observation is the next user turn,
        and the last one when the episode ends."""
        session = self._live[state["trajectory_id"]]
        try:
            view = await asyncio.to_thread(session.step, last_assistant_text(messages))
        except SessionError as exc:
            raise vf.Error(str(exc)) from exc
        state["observations"].append(view.observation)
        state["primitive_steps"].append(view.primitives)
        state["env_rewards"].append(view.env_reward)
        reply = [vf.UserMessage(content=view.observation)]
        if view.done:
            state["final_env_response"] = reply
        return reply

    @vf.cleanup
    async def return_env(self, state: Any) -> None:
        """Give the rollout's env back to the pool."""
        session = self._live.pop(state.get("trajectory_id", ""), None)
        if session is not None:
            self._idle.append(session)

    @vf.teardown
    async def close_envs(self) -> None:
        """Close every env when verifiers tears the environment down."""
        sessions = [*self._idle, *self._live.values()]
        self._idle, self._live = [], {}
        for session in sessions:
            # not on a thread: verifiers also tears down at interpreter exit, when no new
            # thread may start
            session.close()


def _single_step_rows(task: Task, count: int) -> list[dict[str, Any]]:
    session = EpisodeSession(task)
    try:
        rows = []
        for index in range(count):
            view = session.reset(index=index)
            rows.append({"question": view.observation, "answer": "",
                         "info": {"index": index}})
        return rows
    finally:
        session.close()


def load_environment(env_id: str = DEFAULT_ENV_ID, reward: str | None = None,
                     level: str | None = "L0", split: str | None = "train", *,
                     env: str | None = None, semantics: str = "derl",
                     num_examples: int = -1, seeds: Sequence[int] | None = None,
                     max_episode_steps: int | None = None, action_format: str | None = None,
                     system_prompt: str | None = None, **env_kwargs: Any) -> vf.Environment:
    """A verifiers environment for ``env_id`` (or ``env``: the name to use through
    ``vf.load_environment``), as the module docstring describes.

    ``reward``: the Meta-Reward (default the family's success primitive). ``level`` and
    ``split``: which items are played (a single-step env plays a level's eval set with
    ``split="eval"``). ``num_examples``: the first N rows only. ``seeds``: a multi-turn env's
    reset seeds, one row each (default ``0..N-1``, N the split's size or ``num_examples``).
    ``system_prompt``: replaces the default (a single-step env: the card's answer format;
    an agent env: its prompt's opening line and answer format). ``env_kwargs`` go to
    ``gymnasium.make``. Raises :class:`~derl_bench.integrations.sessions.TaskError` for an
    unknown id, level, split or reward, a step cap below 1 and a seed below 0.
    """
    from datasets import Dataset

    env_id = env if env is not None else env_id
    task = Task(env_id, level=level, split=split, max_episode_steps=max_episode_steps,
                action_format=action_format, reward=reward, semantics=semantics,
                env_kwargs=tuple(sorted(env_kwargs.items())))
    spec = task.spec
    task.make_kwargs()  # an unknown level, split or format is refused here, not mid-rollout
    task.compile_reward()
    size = len(task.items())
    count = size if num_examples is None or num_examples < 0 else min(num_examples, size)
    args = {"env_id": env_id, "reward": task.reward_expression, "level": level, "split": split,
            "semantics": semantics, **env_kwargs}
    if not spec.multi_turn:
        rows = _single_step_rows(task, count)
        return DerlSingleTurnEnv(task, dataset=Dataset.from_list(rows),
                                 system_prompt=system_prompt or MATH_INSTRUCTION,
                                 env_id=env_id, env_args=args)
    intro = getattr(task.family.prompt, "intro", "")  # None where the card names no prompt
    prompt = system_prompt or f"{intro}\n{ANSWER_FORMAT}".strip()
    # A seed a reset would refuse is refused here, not in the middle of a rollout.
    chosen = ([reset_number("seed", seed) for seed in seeds] if seeds is not None
              else list(range(count)))
    rows = [{"prompt": [{"role": "system", "content": prompt},
                        {"role": "user", "content": ""}],
             "answer": "", "info": {"seed": seed}} for seed in chosen]
    return DerlMultiTurnEnv(task, dataset=Dataset.from_list(rows), env_id=env_id, env_args=args)


__all__ = ["DerlMultiTurnEnv", "DerlSingleTurnEnv", "last_assistant_text", "load_environment"]
