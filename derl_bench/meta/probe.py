"""A probe set: primitive vectors an env really emits, to judge a Meta-Reward by its behaviour.

Two rewards that order every response the same way train the same GRPO policy, whatever their
text; a reward that gives every response one value trains nothing. Both are questions about a
reward's *values*, so they are asked on a probe set: the primitives of many responses.

For a single-step env whose problems carry a reference solution (the math family, the
arithmetic proxy) the probe responses are the reference solutions of ``problems`` problems and
fixed edits of them that every grader distinguishes: unboxed, a near or far wrong answer, the
answer alone, no answer, padding, numbered steps; each is graded by the real env and its
observers, so the vectors carry the env's own correlations (a correct answer is also parsed and
formatted). A card whose ``probe`` is ``modes`` takes its env's own ``probe_responses`` instead
(the digit tasks: every demonstration mode, in the task's alphabet). Other envs get vectors
drawn from each primitive's declared range (values at both ends and in between), which keeps
the check well defined but ignores correlations.

    >>> from derl_bench.family import resolve_family
    >>> arithmetic = resolve_family("derl/Arithmetic-v0")
    >>> probe = probe_set("derl/Arithmetic-v0", arithmetic, problems=4)
    >>> len(probe), sorted(set(probe.columns["outcome"].tolist()))
    (56, [0.0, 1.0])
    >>> from derl_bench.reward import compile_reward
    >>> float(probe.values(compile_reward("2 * outcome", env="derl/Arithmetic-v0")).max())
    2.0
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from derl_bench.cards import CardError
from derl_bench.family import Family
from derl_bench.reward import MetaReward, env_primitives

PROBES = ("edits", "modes")
"""What a card's ``probe`` may say its probe responses are: ``edits`` (the default) are fixed
edits of each problem's reference solution; ``modes`` are the env's own ``probe_responses`` (what
a policy of the task can write: the digit tasks' demonstration modes)."""

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def _wrong(answer: str, far: bool) -> str:
    try:
        value = int(answer)
    except ValueError:
        return answer + "1"
    return str(value * 10 + 7 if far else value + 1)


def _edits(solution: str, answer: str) -> list[str]:
    """The probe responses made from one reference solution (see the module docstring)."""
    unboxed = _BOXED.sub(lambda m: m.group(1), solution)
    near, far = _wrong(answer, far=False), _wrong(answer, far=True)
    steps = solution.split(". ")
    return [
        solution,
        unboxed,
        solution.replace(f"\\boxed{{{answer}}}", f"\\boxed{{{near}}}"),
        solution.replace(f"\\boxed{{{answer}}}", f"\\boxed{{{far}}}"),
        unboxed.replace(answer, near),
        f"The answer is \\boxed{{{answer}}}.",
        f"The answer is {answer}.",
        f"\\boxed{{{near}}}",
        "",
        "I do not know.",
        solution + " Let me check that again." * 8,
        ". ".join(steps[: max(1, len(steps) // 2)]),
        "\n".join(f"Step {i + 1}: {step}" for i, step in enumerate(steps)),
        "\n".join(f"Step {i + 1}: {step}" for i, step in enumerate(steps)).replace(
            f"\\boxed{{{answer}}}", near),
    ]


@dataclass(frozen=True)
class ProbeSet:
    """Primitive vectors, one column per primitive (``(B,)`` each), and where they came from."""

    env_id: str
    columns: dict[str, np.ndarray]
    source: str
    """``responses`` (graded edits of reference solutions) or ``ranges`` (drawn values)."""

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def values(self, reward: MetaReward) -> np.ndarray:
        """The reward of every probe vector, ``(B,)`` (each vector is a one-step episode)."""
        traj = {name: self.columns[name][:, None] for name in reward.primitives}
        lengths = np.ones(len(self), dtype=np.int64)  # a constant reward has no column
        return np.asarray(reward.episodic(traj, lengths), dtype=np.float64)

    def with_value(self, name: str, value: float | np.ndarray) -> ProbeSet:
        """The same vectors with primitive ``name`` set to ``value`` (counterfactuals)."""
        columns = dict(self.columns)
        columns[name] = np.broadcast_to(np.asarray(value, dtype=np.float64),
                                        columns[name].shape).copy()
        return ProbeSet(self.env_id, columns, self.source)

    def pays(self, reward: MetaReward, name: str) -> float:
        """How ``reward`` pays primitive ``name``, in [-1, 1]: over the probe vectors, the share
        where raising ``name`` from the low to the high end of its declared range (the column's
        own extremes where the range is unbounded), the other primitives held at the vector's
        values, raises the reward, less the share where it lowers it. A reward *pays* a
        primitive when this is positive.

            >>> from derl_bench.reward import compile_reward
            >>> from derl_bench.family import resolve_family
            >>> arithmetic = resolve_family("derl/Arithmetic-v0")
            >>> probe = probe_set("derl/Arithmetic-v0", arithmetic, problems=2)
            >>> def pays(expr, name):
            ...     return probe.pays(compile_reward(expr, env=probe.env_id), name)
            >>> pays("2 * outcome", "outcome"), pays("-outcome", "outcome"), pays("cot_steps",
            ...                                                                  "outcome")
            (1.0, -1.0, 0.0)
        """
        low, high = reward.declared.range(name)
        column = self.columns[name]
        low = low if math.isfinite(low) else float(column.min())
        high = high if math.isfinite(high) else float(column.max())
        raised = self.with_value(name, high).values(reward)
        lowered = self.with_value(name, low).values(reward)
        scale = np.maximum(1.0, np.maximum(np.abs(raised), np.abs(lowered)))
        change = np.where(np.abs(raised - lowered) <= 1e-9 * scale, 0.0,
                          np.sign(raised - lowered))
        return float(change.mean())


def _response_columns(env_id: str, problems: int, seed: int, own: bool,
                      ) -> dict[str, list[float]] | None:
    env = gym.make(env_id, split="train")
    try:
        rng = np.random.default_rng(seed)
        own_responses = getattr(env.unwrapped, "probe_responses", None) if own else None
        if own and own_responses is None:
            raise CardError(f"{env_id}'s card asks for probe: modes, and its env has no "
                            "probe_responses")
        columns: dict[str, list[float]] = {}
        for _ in range(problems):
            _, info = env.reset(seed=int(rng.integers(2**31)))
            if own_responses is not None:
                responses = own_responses(random.Random(int(rng.integers(2**31))))
            elif "reference_solution" in info and "reference_answer" in info:
                responses = _edits(str(info["reference_solution"]), str(info["reference_answer"]))
            else:
                return None
            for response in responses:
                env.reset(options={"index": info["index"]})
                step_info = env.step(response)[4]
                for name, value in step_info["primitives"].items():
                    columns.setdefault(name, []).append(float(value))
        return columns
    finally:
        env.close()


def _range_columns(env_id: str, family: Family, size: int, seed: int,
                   ) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    columns = {}
    declared = env_primitives(env_id, family)
    for name in declared.names:
        low, high = declared.range(name)
        low = 0.0 if not math.isfinite(low) else low
        high = low + 100.0 if not math.isfinite(high) else high
        draw = rng.choice(3, size=size, p=[0.35, 0.35, 0.3])
        columns[name] = np.where(draw == 0, low, np.where(
            draw == 1, high, rng.uniform(low, high, size=size))).tolist()
    return columns


def probe_set(env_id: str, family: Family, problems: int = 32, seed: int = 0) -> ProbeSet:
    """The probe set of ``env_id`` (see the module docstring): graded responses to
    ``problems`` training problems where the env offers reference solutions, else
    ``14 * problems`` vectors drawn from the declared ranges. Seeded. ``family``: the env's,
    resolved by the caller."""
    probe = family.card.get("probe", "edits")
    if probe not in PROBES:
        raise CardError(f"{env_id}'s card: probe must be one of {', '.join(PROBES)}, got "
                        f"{probe!r}")
    columns = None if family.multi_turn else _response_columns(env_id, problems, seed,
                                                               own=probe == "modes")
    source = "responses"
    if columns is None:
        columns, source = _range_columns(env_id, family, 14 * problems, seed), "ranges"
    return ProbeSet(env_id, {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()},
                    source)



def behaviour_key(reward: MetaReward, probe: ProbeSet, scale_by_std: bool = True,
                  decimals: int = 6) -> str | None:
    """What GRPO can see of ``reward`` on the probe set, as a key; ``None`` when the reward is
    constant there (every advantage would be zero: it trains nothing).

    GRPO compares rewards within a group: with ``scale_by_std`` (``(r - mean) / std``) rewards
    related by a positive affine map give identical advantages, and without it (``r - mean``)
    rewards that differ by a constant do. So the key is the probe values standardised (or only
    centred), rounded to ``decimals``. It is measured on the probe set, not exact: two rewards
    that agree on every probe vector may still differ on a response the probe lacks.

        >>> from derl_bench.family import resolve_family
        >>> arithmetic = resolve_family("derl/Arithmetic-v0")
        >>> probe = probe_set("derl/Arithmetic-v0", arithmetic, problems=4)
        >>> from derl_bench.reward import compile_reward
        >>> def key(expr): return behaviour_key(compile_reward(expr, env=probe.env_id), probe)
        >>> key("outcome") == key("2 * g1 + 3") != key("format_boxed")
        True
        >>> key("0.5 + cot_steps * 0") is None
        True
    """
    import hashlib

    values = probe.values(reward)
    spread = float(values.max() - values.min())
    if not np.isfinite(spread) or spread <= 1e-12 * max(1.0, float(np.abs(values).max())):
        return None
    centred = values - values.mean()
    shaped = centred / centred.std() if scale_by_std else centred
    rounded = np.round(shaped, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return hashlib.sha256(rounded.tobytes()).hexdigest()[:16]
