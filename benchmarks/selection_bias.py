"""How optimistic is a score when the policy was picked on the same items? (derl/Arithmetic-v0)

Per seed, ``N`` candidate policies are trained as the proxy benchmark trains its inner runs
(``derl_bench.experiments.proxy``: the same base policy and inner recipe, reward
``outcome + format_boxed``, one seed per candidate, through ``run_meta``'s ``fixed`` method, which
also scores each candidate on the validation split). Every candidate is then decoded greedily on
the whole L0 eval set (500 problems), which is cut in two halves: the first is the eval set a
method would report, the second holds fresh problems of the same distribution. Two picks:

- **by eval**: the candidate with the best score on the reported half (what the released DERL
  code does: its candidates are scored on the test split it reports);
- **by validation**: the candidate with the best validation score (derl-bench's rule).

For each pick the script prints its reported-half score, its fresh-half score and their
difference (the optimism of the reported number), as mean ± SE over seeds::

    python benchmarks/selection_bias.py --output runs/selection-bias [--seeds 0 1 2 ...] [--n 8]

Deterministic for given seeds (CPU); the first run also fine-tunes the base policy (minutes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from derl_bench.experiments.proxy import ENV_ID, ProxyConfig, base_model, mean_se

REWARD = "outcome + format_boxed"
LEVEL = "L0"


def item_successes(model: str, max_new_tokens: int) -> list[bool]:
    """Greedy success of the policy at ``model`` on every problem of the L0 eval set, in
    manifest order (the protocol's decoding: ``evaluate_llm``'s, item by item)."""
    import gymnasium as gym

    from derl_bench.evaluation.families import adapter_for
    from derl_bench.grpo.checkpoint import quiet_transformers
    from derl_bench.policies import LLMPolicy, SamplingConfig
    from derl_bench.rollout import rollout_single_step

    adapter = adapter_for(ENV_ID)
    eval_set = adapter.eval_set(LEVEL)
    with quiet_transformers():
        policy = LLMPolicy.from_pretrained(
            model, adapter.spec, sampling=SamplingConfig(max_new_tokens, 0.0, 1.0, seed=0))
    env = gym.make(ENV_ID, **eval_set.spec.env_kwargs)
    try:
        indices = [adapter.reset_options(env.unwrapped, e)["index"] for e in eval_set.entries]
        episodes = rollout_single_step(env, policy, indices, 1, by_index=True)
    finally:
        env.close()
    return [e.steps[0].reward >= 1.0 for e in episodes]


def run_seed(seed: int, n: int, out: Path, model: str, proxy: ProxyConfig) -> dict[str, Any]:
    """Train ``n`` candidates and score each on validation and on both halves of L0."""
    from derl_bench.meta import MetaConfig, run_meta

    meta = MetaConfig(name=f"bias-s{seed}", method="fixed", reward=REWARD, outer_steps=1,
                      population=n, validation_episodes=proxy.validation_episodes,
                      inner={**proxy.inner, "model": model, "num_threads": 1}, seed=seed,
                      eval_levels=[], output_dir=str(out / f"s{seed}"), progress=False,
                      executor="local")
    found = run_meta(meta)
    candidates = []
    for c in sorted(found.candidates, key=lambda c: c["index"]):
        if c.get("status") != "scored":
            continue
        hits = item_successes(c["checkpoint"], int(proxy.inner["max_new_tokens"]))
        half = len(hits) // 2
        candidates.append({"index": c["index"], "validation": c["score"],
                           "reported": sum(hits[:half]) / half,
                           "fresh": sum(hits[half:]) / (len(hits) - half)})
    picks = {rule: max(candidates, key=lambda c, k=key: c[k])   # first of equals wins
             for rule, key in (("by_eval", "reported"), ("by_validation", "validation"))}
    return {"seed": seed, "candidates": candidates,
            "picks": {rule: {**c, "optimism": c["reported"] - c["fresh"]}
                      for rule, c in picks.items()}}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {rule: {key: mean_se([row["picks"][rule][key] for row in rows])
                   for key in ("reported", "fresh", "optimism")}
            for rule in ("by_eval", "by_validation")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/selection-bias")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--n", type=int, default=8, help="candidate policies per seed")
    args = parser.parse_args()
    out = Path(args.output)
    proxy = ProxyConfig(output=str(out))
    model = str(base_model(out / "base-model", proxy.base_spec, proxy.env_id, proxy.family))
    rows = [run_seed(seed, args.n, out, model, proxy) for seed in args.seeds]
    result = {"env_id": ENV_ID, "level": LEVEL, "reward": REWARD, "n": args.n,
              "seeds": args.seeds, "inner": proxy.inner,
              "validation_episodes": proxy.validation_episodes,
              "summary": summarize(rows), "rows": rows}
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    for rule, figures in result["summary"].items():
        print(rule, "  ".join(f"{k} {v['mean'] * 100:.2f} ± {v['se'] * 100:.2f}"
                              for k, v in figures.items()))


if __name__ == "__main__":
    main()
