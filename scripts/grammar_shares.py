"""How often the `random` method's grammar draws a reward holding each of two primitives, and
both, as the card's primitive set grows by uninformative extra primitives.

    python scripts/grammar_shares.py derl/DigitsRecallSparse-v0 digit_recall length_fit

A task's checks 2 and 3 pull against each other when its planted reward's parts are common in
the grammar (DigitsRecallSparse's verdict in its study): this prints how rare more primitives
make them, from 20,000 seeded draws at the `random` method's depth 3 per size.
"""

from __future__ import annotations

import argparse
import random
import re

from derl_bench.reward.generate import random_expression
from derl_bench.reward.primitives import primitive_set


def shares(env_id: str, first: str, second: str, extra: int, draws: int = 20000,
           seed: int = 0) -> tuple[float, float, float]:
    """The shares of ``draws`` seeded draws holding ``first``, ``second`` and both, with
    ``extra`` more primitives (named ``extra0``, ``extra1``, ... in [0, 1]) on the card."""
    base = primitive_set(env_id)
    ranges = {**base.ranges, **{f"extra{i}": (0.0, 1.0) for i in range(extra)}}
    chosen = base.with_primitives(ranges)
    rng = random.Random(seed)
    a = b = both = 0
    for _ in range(draws):
        expr = random_expression(rng, chosen, max_depth=3)
        has_a = re.search(rf"\b{first}\b", expr) is not None
        has_b = re.search(rf"\b{second}\b", expr) is not None
        a, b, both = a + has_a, b + has_b, both + (has_a and has_b)
    return a / draws, b / draws, both / draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_id")
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--extra", type=int, nargs="+", default=[0, 5, 10, 15])
    args = parser.parse_args()
    size = len(primitive_set(args.env_id).names)
    print(f"| primitives | {args.first} | {args.second} | both |")
    print("|---|---|---|---|")
    for extra in args.extra:
        a, b, both = shares(args.env_id, args.first, args.second, extra)
        print(f"| {size + extra} | {100 * a:.1f}% | {100 * b:.1f}% | {100 * both:.2f}% |")


if __name__ == "__main__":
    main()
