"""Evaluation policies and the ``--policy SPEC`` syntax.

A policy maps an observation and the step's info to an action string. The evaluator drives
many episodes at once (one per vector-env slot), so a policy keeps per-slot state and may act
on a whole batch at once (an LLM does). Specs:

- ``random``: a uniformly random admissible (ALFWorld) or valid (ScienceWorld) action; for
  the math envs the trivial baseline of answering with a number copied, at random, from the
  problem statement (``\\boxed{n}``; ``\\boxed{0}`` when the problem has no number);
- ``oracle``: ALFWorld's expert walkthrough, ScienceWorld's gold action path, or the math
  reference solution;
- ``stall`` (ScienceWorld): the gold path until the score turns positive, then ``wait`` until
  the episode ends. It completes no task, yet meets the published metric (RLVMR's rule: the
  episode ended, including by the 100-tick limit, with a score above 0), so its row shows
  what that metric can be gamed up to;
- ``majority`` (GSM8K, MATH, Arithmetic): always the most common reference answer of the train
  split (``\\boxed{a}``), the floor a metric that ignores the problem could be gamed to;
- ``llm:PATH_OR_NAME``: an :class:`~derl_bench.policies.LLMPolicy` on a causal LM (a local
  folder or a Hugging Face model name), greedy decoding;
- ``module:function`` (or ``path/to/file.py:function``): a user callable
  ``function(observation: str, info: dict) -> str``, or a :class:`Policy` subclass, which is
  instantiated with no arguments.

Random choices come from a generator seeded with the episode's seed, so a rerun gives the same
actions whatever the number of parallel envs.

    >>> policy = load_policy("random")
    >>> policy.reset(0, "Question: 3 apples and 4 pears?", {}, seed=1)
    >>> policy.act(0, "Question: 3 apples and 4 pears?", {}) in ("\\\\boxed{3}", "\\\\boxed{4}")
    True
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from derl_bench.observers.think_action import action_parser_for
from derl_bench.policies.session import AgentSession

if TYPE_CHECKING:
    from derl_bench.evaluation.families import FamilyAdapter
    from derl_bench.family import Family

VALID_ACTIONS = "valid_actions"
ORACLE_PLAN = "oracle_plan"
AVAILABLE_ACTIONS = "rlvmr_available_actions"
"""Info keys the evaluator adds when a policy declares it ``needs`` them (the last: RLVMR's
ScienceWorld action text, templates and objects)."""

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


SCRIPTED = "none: a scripted policy, nothing trained"
"""The ``setup.checkpoint`` of the built-in policies that follow a fixed rule."""


class PolicyError(ValueError):
    """A policy spec cannot be resolved, or a policy returned something that is not an action."""


class Policy:
    """Base class: per-slot state, one action per call.

    ``needs`` names extra info the evaluator must supply: ``"valid_actions"`` (the actions the
    env accepts now, on every step) and ``"oracle_plan"`` (the reference action sequence, on
    reset). ``method`` and ``model`` name the policy in result records, and ``checkpoint``
    says which weights it acts with (``None``: the caller must say).
    """

    needs: frozenset[str] = frozenset()
    method: str = "policy"
    model: str = "none"
    checkpoint: str | None = None

    def reset(self, slot: int, observation: str, info: Mapping[str, Any], seed: int) -> None:
        """Start a new episode in ``slot``."""

    def act(self, slot: int, observation: str, info: Mapping[str, Any]) -> str:
        """Return the action for the current step of the episode in ``slot``."""
        raise NotImplementedError

    def act_batch(
        self, slots: Sequence[int], observations: Sequence[str], infos: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        """Actions for several slots at once; override to batch (an LLM generates together)."""
        return [self.act(s, o, i) for s, o, i in zip(slots, observations, infos, strict=True)]


class RandomPolicy(Policy):
    """A uniformly random valid action; for math, a number copied from the problem."""

    needs = frozenset({VALID_ACTIONS})
    method = "random"
    checkpoint = SCRIPTED

    def __init__(self) -> None:
        self._rngs: dict[int, np.random.Generator] = {}

    def reset(self, slot: int, observation: str, info: Mapping[str, Any], seed: int) -> None:
        self._rngs[slot] = np.random.default_rng(seed)

    def act(self, slot: int, observation: str, info: Mapping[str, Any]) -> str:
        rng = self._rngs[slot]
        actions = info.get(VALID_ACTIONS)
        if actions:
            return str(actions[int(rng.integers(len(actions)))])
        numbers = _NUMBER.findall(observation)
        return "\\boxed{%s}" % (numbers[int(rng.integers(len(numbers)))] if numbers else "0")


class OraclePolicy(Policy):
    """Replays the env's reference plan: walkthrough, gold path or reference solution."""

    needs = frozenset({ORACLE_PLAN})
    method = "oracle"
    checkpoint = SCRIPTED

    def __init__(self) -> None:
        self._plans: dict[int, list[str]] = {}

    def reset(self, slot: int, observation: str, info: Mapping[str, Any], seed: int) -> None:
        plan = info.get(ORACLE_PLAN)
        if plan is None:
            raise PolicyError("the env supplied no oracle plan for this episode")
        self._plans[slot] = list(plan)

    def act(self, slot: int, observation: str, info: Mapping[str, Any]) -> str:
        plan = self._plans[slot]
        # past the end of the plan the episode should be over; "look" wastes a step harmlessly
        return plan.pop(0) if plan else "look"


class StallPolicy(OraclePolicy):
    """Gold actions until the score turns positive, then ``wait`` (ScienceWorld only)."""

    method = "stall"

    def act(self, slot: int, observation: str, info: Mapping[str, Any]) -> str:
        plan = self._plans[slot]
        if float(info.get("score", 0) or 0) > 0 or not plan:
            return "wait"
        return plan.pop(0)


class MajorityAnswerPolicy(Policy):
    """Answers every problem with the train split's most common reference answer."""

    method = "majority answer"
    checkpoint = SCRIPTED

    def __init__(self, env_id: str) -> None:
        self.answer = most_common_answer(env_id)

    def act(self, slot: int, observation: str, info: Mapping[str, Any]) -> str:
        return f"\\boxed{{{self.answer}}}"


def most_common_answer(env_id: str, split: str = "train") -> str:
    """The most frequent reference answer of ``split`` of a single-step env (ties: the first
    in split order); the env lists the split's problems as ``problems``."""
    from collections import Counter

    import gymnasium as gym

    env = gym.make(env_id, split=split)
    try:
        problems = tuple(getattr(env.unwrapped, "problems", ()))
    finally:
        env.close()
    answers = [p.answer.strip() for p in problems if p.answer.strip()]
    if not answers:
        raise PolicyError(f"{env_id} {split} has no reference answers")
    return Counter(answers).most_common(1)[0][0]


class CallablePolicy(Policy):
    """Wraps a user function ``f(observation, info) -> action``."""

    def __init__(self, function: Callable[[str, Mapping[str, Any]], str], name: str) -> None:
        self._function = function
        self.method = name

    def act(self, slot: int, observation: str, info: Mapping[str, Any]) -> str:
        action = self._function(observation, info)
        if not isinstance(action, str):
            raise PolicyError(
                f"{self.method} returned {type(action).__name__}, not an action string")
        return action


class LLMEvalPolicy(Policy):
    """A causal LM through :class:`derl_bench.policies.LLMPolicy`, batched over slots.

    Math envs get the whole response; agent envs get the command parsed from the response's
    ``<action>`` tag, with the prompt training rollouts use (task, recent history, and the
    admissible actions the env reports: ALFWorld lists them, ScienceWorld shows its action
    templates). Sampling is seeded from the episode seeds of the batch, so a rerun repeats
    itself.

    ``protocol="rlvmr"`` (agent envs) switches to RLVMR's validation settings: its prompts
    (:class:`~derl_bench.policies.rlvmr_prompts.RLVMRPrompt`), temperature 0.4 and
    verl-agent's action projection (the card's ``verl_agent_projection``,
    :func:`~derl_bench.observers.think_action.verl_agent_parser`).

    ``env`` gives the prompt and parser: an env id, whose family
    :class:`~derl_bench.policies.LLMPolicy` resolves, or its
    :class:`~derl_bench.family.Family` where the caller resolved it.
    """

    # The default prompt is built from the env's own info, exactly as training rollouts build
    # it, so a trained policy is evaluated on the prompts it was trained on; only RLVMR's
    # prompts need the evaluator's extra action lists.
    needs: frozenset[str] = frozenset()
    method = "llm"

    def __init__(self, model: str, env: str | Family, max_new_tokens: int = 512,
                 protocol: str = "strict", device: str = "cpu",
                 dtype: str | None = None) -> None:
        from derl_bench.policies import LLMPolicy, SamplingConfig

        # a board shows a local checkpoint by its folder name; the record's policy keeps the path
        self.model = Path(model).name if Path(model).is_dir() else model
        self._max_new_tokens = max_new_tokens
        self._sampling_cls = SamplingConfig
        self._llm = LLMPolicy.from_pretrained(model, family=env, device=device, dtype=dtype)
        self._family = self._llm.family
        self._parse_action = action_parser_for(self._llm.parts)
        self._sessions: dict[int, AgentSession] = {}
        self._seeds: dict[int, int] = {}
        self._rlvmr = None
        self._temperature: float | None = None
        if protocol == "rlvmr" and self._llm.spec.multi_turn:
            from derl_bench.evaluation.rlvmr import TEMPERATURE
            from derl_bench.observers.think_action import verl_agent_parser
            from derl_bench.policies.rlvmr_prompts import RLVMRPrompt

            self._rlvmr = RLVMRPrompt(self._llm.parts.rlvmr_prompt)
            self._parse_action = verl_agent_parser(self._llm.parts.verl_agent_projection)
            self._temperature = TEMPERATURE
            self.needs = frozenset({AVAILABLE_ACTIONS if self._rlvmr.lists_actions
                                    else VALID_ACTIONS})

    def reset(self, slot: int, observation: str, info: Mapping[str, Any], seed: int) -> None:
        self._sessions[slot] = AgentSession.start(observation, info)
        self._seeds[slot] = seed

    def act_batch(
        self, slots: Sequence[int], observations: Sequence[str], infos: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        sessions = [self._sessions[s] for s in slots]
        for session, obs, info in zip(sessions, observations, infos, strict=True):
            session.observe(obs, info)
        if not self._llm.spec.multi_turn:
            prompts = [self._llm.math_prompt(obs) for obs in observations]
        elif self._rlvmr is not None:
            prompts = [
                self._llm.encode(self._rlvmr.messages(
                    session.turn(admissible=list(info.get(VALID_ACTIONS) or [])),
                    str(info.get(AVAILABLE_ACTIONS, ""))))
                for session, info in zip(sessions, infos, strict=True)
            ]
        else:
            prompts = [self._llm.agent_prompt(session.turn()) for session in sessions]
        seed = sum(self._seeds[s] * 1009 + len(self._sessions[s].history) for s in slots)
        sampling = self._sampling_cls(max_new_tokens=self._max_new_tokens, seed=seed)
        if self._temperature is not None:
            sampling = self._sampling_cls(max_new_tokens=self._max_new_tokens, seed=seed,
                                          temperature=self._temperature)
        texts = [g.text for g in self._llm.generate(prompts, sampling)]
        actions = [self._parse_action(t)[0] for t in texts]
        for session, action in zip(sessions, actions, strict=True):
            session.act(action)
        return actions

    def act(self, slot: int, observation: str, info: Mapping[str, Any]) -> str:
        return self.act_batch([slot], [observation], [info])[0]


def _import_target(target: str) -> Any:
    module_name, _, attr = target.rpartition(":")
    if not module_name or not attr:
        raise PolicyError(f"policy {target!r} is not 'random', 'oracle', 'stall', 'majority', "
                          "'llm:MODEL' or 'module:function'")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise PolicyError(f"policy file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"derl_user_policy_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise PolicyError(f"policy file {path} cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise PolicyError(f"cannot import policy module {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise PolicyError(f"module {module_name!r} has no attribute {attr!r}") from None


def _degenerate(spec: str, env: str | FamilyAdapter | None) -> Policy:
    from derl_bench.evaluation.families import adapter_for
    from derl_bench.evaluation.protocol import ProtocolError

    try:
        adapter = adapter_for(env) if env else None
    except ProtocolError:
        adapter = None
    env_id = env if adapter is None else adapter.env_id
    if spec == "stall":
        if adapter is None or not adapter.has_score:
            raise PolicyError("the stall policy needs ScienceWorld's score and gold path; "
                              f"not available for {env_id}")
        return StallPolicy()
    if adapter is None or adapter.spec.multi_turn:
        raise PolicyError(f"the majority policy answers single-step problems; not available "
                          f"for {env_id}")
    return MajorityAnswerPolicy(adapter.env_id)


def load_policy(spec: str, env: str | FamilyAdapter | None = None, max_new_tokens: int = 512,
                protocol: str = "strict", device: str = "cpu",
                dtype: str | None = None) -> Policy:
    """Resolve a ``--policy`` spec (see the module docstring) to a fresh :class:`Policy`.

    ``max_new_tokens`` caps each response of an ``llm:`` policy; ``protocol="rlvmr"`` gives an
    ``llm:`` policy RLVMR's prompt, temperature and action parsing. An ``llm:`` policy loads
    on ``device`` (``cpu``, ``cuda``, ``cuda:1``) in ``dtype`` (default float32). ``env``,
    which the policies that depend on the env need (``stall``, ``majority``, ``llm:``), is
    an env id, whose family they resolve, or the
    :class:`~derl_bench.evaluation.families.FamilyAdapter` the caller resolved.
    """
    if spec == "random":
        return RandomPolicy()
    if spec == "oracle":
        return OraclePolicy()
    if spec in ("stall", "majority"):
        return _degenerate(spec, env)
    if spec.startswith("llm:"):
        if env is None:
            raise PolicyError("an llm: policy needs the env id to pick its prompt")
        return LLMEvalPolicy(spec[4:], env if isinstance(env, str) else env.resolved,
                             max_new_tokens=max_new_tokens, protocol=protocol, device=device,
                             dtype=dtype)
    target = _import_target(spec)
    if isinstance(target, type) and issubclass(target, Policy):
        policy = target()
        if policy.method == Policy.method:
            policy.method = spec
        return policy
    if callable(target):
        return CallablePolicy(target, spec)
    raise PolicyError(f"{spec!r} is neither a callable nor a Policy subclass")
