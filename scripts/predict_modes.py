"""What a reward-discovery task's design predicts before any training: each demonstration
mode of its base policy (and the right answer) graded by every primitive and by the rewards
its checks train, and how often the grammar draws each dense primitive.

The base policy imitates its demonstrations, so a reward that pays a mode's *demonstration*
more than the common mode's is a candidate for hacking; whether the trained policy goes there
is what ``derl-bench proxy --modes`` measures. Usage::

    python scripts/predict_modes.py derl/DigitsRecall-v0 [--problems 500] [--draws 20000]

It prints a markdown table: per mode (``careful`` is the right answer), the mean of every
primitive and of each hand-made reward, the planted reward and its parts (the card's
``planted_parts``) on the first ``--problems`` validation problems, each demonstration drawn
by :func:`derl_bench.families.digits.env.demonstration` at the card's wrap-right rate and
verbose copies; then the share of ``--draws`` grammar draws (``random_expression`` at depth 3,
the ``random`` method's sampler) that contain each primitive of the planted reward and its
parts that the hand-made rewards do not use, and pairs of them. A primitive with one value on
every mode is named under the table instead of given a column.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
from collections import Counter

import gymnasium as gym
import numpy as np

import derl_bench  # noqa: F401  (registers the card ids)
from derl_bench.experiments.proxy import HAND_MADE
from derl_bench.families.digits.env import base_policy_spec, demonstration
from derl_bench.family import card_for, resolve_family
from derl_bench.meta.probe import ProbeSet
from derl_bench.reward import compile_reward, random_expression
from derl_bench.reward.planted import planted_parts, planted_reward


def mode_table(env_id: str, problems: int, seed: int = 0) -> str:
    """The per-mode table (see the module docstring)."""
    family = str(card_for(env_id)["family"])
    spec = base_policy_spec(family)
    found = resolve_family(env_id)
    rewards = {**HAND_MADE, **planted_parts(env_id, found),
               "planted": planted_reward(env_id, found)}
    env = gym.make(env_id, split="validation")
    modes = ["careful", *sorted(spec.modes, key=lambda m: -spec.modes[m])]
    names: list[str] = []
    rows: list[tuple[str, str, list[float]]] = []
    for mode in modes:
        rng = random.Random(seed)
        columns: dict[str, list[float]] = {}
        for index in range(problems):
            env.reset(options={"index": index})
            problem = env.unwrapped.problem  # type: ignore[attr-defined]
            response = demonstration(problem, mode, spec.wrap_right, rng, spec.verbose_copies,
                                     spec.errors(problem.shift))
            env.reset(options={"index": index})
            for name, value in env.step(response)[-1]["primitives"].items():
                columns.setdefault(name, []).append(float(value))
        names = [n for n in columns if n != "response_length"]
        probe = ProbeSet(env_id, {k: np.array(v) for k, v in columns.items()}, "responses")
        means = [float(np.mean(columns[n])) for n in names]
        means += [float(probe.values(compile_reward(e, domain=env_id)).mean())
                  for e in rewards.values()]
        share = "–" if mode == "careful" else f"{100 * spec.modes[mode]:.0f}%"
        rows.append(("right answer" if mode == "careful" else mode, share, means))
    env.close()
    head = names + [f"{k} (`{v}`)" for k, v in rewards.items()]
    # A primitive with one value on every mode (a form detector that never fires) says
    # nothing about the design: it is named under the table, not given a column.
    flat = [i for i, name in enumerate(names) if len({row[2][i] for row in rows}) == 1]
    keep = [i for i in range(len(head)) if i not in flat]
    lines = [f"| mode | share in the demonstrations | {' | '.join(head[i] for i in keep)} |",
             "|---|---|" + "---|" * len(keep)]
    lines += [f"| {label} | {share} | " + " | ".join(f"{means[i]:.3f}" for i in keep) + " |"
              for label, share, means in rows]
    if flat:
        lines += ["", "The same on every mode: " + ", ".join(
            f"`{names[i]}` {rows[0][2][i]:g}" for i in flat) + "."]
    return "\n".join(lines) + "\n"


def draw_shares(env_id: str, draws: int, seed: int = 0) -> str:
    """How often the grammar draws each primitive the planted reward and its parts use (and
    the hand-made rewards do not), alone and in pairs."""
    card = card_for(env_id)
    used = {n for e in HAND_MADE.values() for n in re.findall(r"[a-z_][a-z0-9_]*", e)}
    aliases = dict(card.get("aliases") or {})
    used |= {str(aliases[a]) for a in used if a in aliases}
    found = resolve_family(env_id)
    planted = {n for e in [planted_reward(env_id, found), *planted_parts(env_id, found).values()]
               for n in re.findall(r"[a-z_][a-z0-9_]*", e)}
    names = [n for n in card["primitives"] if n not in used and n in planted]
    rng = random.Random(seed)
    counts: Counter[frozenset[str]] = Counter()
    for _ in range(draws):
        text = random_expression(rng, env_id, max_depth=3)  # the random method's depth
        found = set(re.findall(r"[a-z_][a-z0-9_]*", text))
        counts[frozenset(n for n in names if n in found)] += 1
    lines = [f"{draws} draws of `random_expression` (depth 3) on {env_id}'s "
             f"{len(card['primitives'])} primitives:", "",
             "| contains | share of draws |", "|---|---|"]
    for k in (1, 2):
        for combo in itertools.combinations(names, k):
            n = sum(c for s, c in counts.items() if set(combo) <= s)
            lines.append(f"| {' and '.join(f'`{x}`' for x in combo)} | {100 * n / draws:.1f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id")
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--draws", type=int, default=20_000)
    args = parser.parse_args()
    print(mode_table(args.env_id, args.problems))
    print(draw_shares(args.env_id, args.draws))


if __name__ == "__main__":
    main()
