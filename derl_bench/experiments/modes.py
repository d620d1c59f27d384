"""What a policy does on a reward-discovery task: the share of each demonstration mode in its
responses, how often it gets a wrapping position right, and every primitive's mean.

The tasks of ``docs/tasks.md`` plant their structures in the base policy's mixture of modes, so
the mixture is measured, not assumed: on the first ``episodes`` validation problems, greedily
(what validation and evaluation score) and sampled at temperature 1 (what GRPO trains on);
and after one inner GRPO run under each hand-made reward and the planted one, greedily: a
hackable reward shows its signature there, the primitives it pays rising while success falls::

    derl-bench proxy --env derl/DigitsHack-v0 --modes --output runs/digits-hack
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any


def require_modes(env_id: str) -> None:
    """Raise ``ValueError`` unless ``env_id``'s env names demonstration modes (``mode_of``):
    checked before a base policy is fine-tuned for nothing."""
    import gymnasium as gym

    probe = gym.make(env_id, split="validation")
    try:
        if not hasattr(probe.unwrapped, "mode_of"):
            raise ValueError(f"{env_id} names no demonstration modes")
    finally:
        probe.close()


def sample_responses(model: str, env_id: str, episodes: int = 500, temperature: float = 1.0,
                     seed: int = 0, max_new_tokens: int = 40) -> list[dict[str, Any]]:
    """``model``'s response to each of the first ``episodes`` validation problems of ``env_id``
    (an env with ``mode_of`` and ``wrap_positions``, such as
    :class:`~derl_bench.families.digits.env.DigitsEnv`): its primitives, its mode, and how many
    of the problem's wrapping positions it got right (``wraps_right`` of ``wraps``)."""
    import gymnasium as gym

    from derl_bench.policies import LLMPolicy, SamplingConfig, load_model_and_tokenizer
    from derl_bench.policies.threads import configure_threads

    env = gym.make(env_id, split="validation")
    bare: Any = env.unwrapped
    if not hasattr(bare, "mode_of"):
        env.close()
        raise ValueError(f"{env_id} names no demonstration modes")
    network, tokenizer = load_model_and_tokenizer(model)
    configure_threads(network, 1)
    policy = LLMPolicy(network, tokenizer, env_id)
    prompts = []
    for index in range(episodes):
        question, _ = env.reset(options={"index": index})
        prompts.append(policy.math_prompt(question))
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    responses = []
    for index, generation in enumerate(policy.generate(prompts, sampling)):
        env.reset(options={"index": index})
        primitives = env.step(generation.text)[-1]["primitives"]
        right, total = bare.wrap_positions(generation.text)
        responses.append({"primitives": {k: float(v) for k, v in primitives.items()},
                          "mode": bare.mode_of(generation.text), "wraps_right": right,
                          "wraps": total})
    env.close()
    return responses


def measure_modes(model: str, env_id: str, episodes: int = 500, temperature: float = 1.0,
                  seed: int = 0, max_new_tokens: int = 40) -> dict[str, Any]:
    """The mode shares, the wrap-right rate and the mean primitives (overall and per mode) of
    ``model``'s responses (:func:`sample_responses`)."""
    modes: Counter[str] = Counter()
    sums: defaultdict[str, float] = defaultdict(float)
    # Per mode too: a mode pays a primitive only through what the policy writes in it (a
    # trap's payoff may need an answer the policy rarely gets right).
    by_mode: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    wrap_right = wrap_total = 0
    for response in sample_responses(model, env_id, episodes, temperature, seed,
                                     max_new_tokens):
        mode = response["mode"]
        for name, value in response["primitives"].items():
            sums[name] += value
            by_mode[mode][name] += value
        modes[mode] += 1
        wrap_right += response["wraps_right"]
        wrap_total += response["wraps"]
    return {"episodes": episodes, "temperature": temperature, "seed": seed,
            "modes": {m: round(c / episodes, 4) for m, c in sorted(modes.items())},
            "wrap_right": round(wrap_right / max(1, wrap_total), 4),
            "primitives": {k: round(v / episodes, 4) for k, v in sums.items()},
            "primitives_by_mode": {m: {k: round(v / modes[m], 4) for k, v in by_mode[m].items()}
                                   for m in sorted(modes)}}


TRAINED_OFFSET = 6_000
"""Where the fresh seed of :func:`trained_modes`'s inner runs comes from."""


def trained_modes(config: Any, model: str, rewards: dict[str, str], out: Any,
                  episodes: int) -> dict[str, dict[str, Any]]:
    """What each of ``rewards`` (label -> Meta-Reward) does to the modes: one inner run per
    reward from the base ``model`` with the proxy's recipe (``config``, a ``ProxyConfig``) on
    one fresh seed, each trained policy measured greedily by :func:`measure_modes`."""
    import shutil
    from pathlib import Path

    from derl_bench.experiments.proxy.run import meta_config_for
    from derl_bench.meta.inner import (
        InnerSpec,
        compile_inner_reward,
        train_and_score_population,
    )
    from derl_bench.meta.search import fresh_seeds

    (seed,) = fresh_seeds(1, TRAINED_OFFSET)
    folder = Path(out)
    meta = meta_config_for(config, "random", 0, model, folder)
    runs = [InnerSpec(compile_inner_reward(meta, expr), folder / f"r{i}", None, 0, seed)
            for i, expr in enumerate(rewards.values())]
    try:
        results = train_and_score_population(meta, runs)
        return {f"GRPO on {label}": {**measure_modes(
                    str(r.checkpoint), config.env_id, episodes, 0.0,
                    max_new_tokens=int(config.inner["max_new_tokens"])), "reward": expr,
                    "inner_seed": seed}
                for (label, expr), r in zip(rewards.items(), results, strict=True)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def modes_markdown(figures: dict[str, dict[str, Any]]) -> str:
    """A table of :func:`measure_modes` results, one row per label."""
    names = sorted({m for f in figures.values() for m in f["modes"]})
    lines = ["| policy | decoding | " + " | ".join(f"{m} share" for m in names)
             + " | wrap positions right | g2 | g3 | g4 | success |",
             "|---|---|" + "---|" * len(names) + "---|---|---|---|---|"]
    for label, f in figures.items():
        decoding = "greedy" if f["temperature"] == 0 else f"sampled, T={f['temperature']:g}"
        lines.append(f"| {label} | {decoding} | "
                     + " | ".join(f"{100 * f['modes'].get(m, 0.0):.1f}%" for m in names)
                     + f" | {100 * f['wrap_right']:.1f}% | "
                     + " | ".join(f"{100 * f['primitives'].get(p, 0.0):.1f}%" for p in
                                  ("format_boxed", "cot_steps", "loose_outcome"))
                     + f" | {100 * f['primitives']['outcome']:.1f}% |")
    sampled = [(label, f) for label, f in figures.items()
               if f["temperature"] > 0 and f.get("primitives_by_mode")]
    for label, f in sampled:
        # Every graded primitive the task has (the dense ones differ between tasks).
        names_p = tuple(p for p in f["primitives"] if p != "response_length")
        lines += ["", f"What each mode earns, {label} (mean primitive over its responses):", "",
                  "| mode | share | " + " | ".join(names_p) + " |",
                  "|---|---|" + "---|" * len(names_p)]
        for mode, means in f["primitives_by_mode"].items():
            lines.append(f"| {mode} | {100 * f['modes'][mode]:.1f}% | "
                         + " | ".join(f"{means.get(p, 0.0):.3f}" for p in names_p) + " |")
    return "\n".join(lines) + "\n"


def run_modes(config: Any, trained: bool = True) -> dict[str, dict[str, Any]]:
    """``--modes``: the base policy of ``config`` (a ``ProxyConfig``) measured greedily and
    sampled, and (``trained``) after one inner run of each hand-made reward, each of the planted
    reward's parts the card names, and the planted reward;
    written to ``OUT/modes.json`` and ``OUT/modes.md``."""
    from pathlib import Path

    from derl_bench.experiments.proxy import HAND_MADE
    from derl_bench.experiments.proxy.run import base_model
    from derl_bench.files import write_json_atomic, write_text_atomic
    from derl_bench.reward.planted import planted_parts, planted_reward

    require_modes(config.env_id)
    rewards = {**HAND_MADE, **planted_parts(config.env_id, config.family),
               "the planted reward": planted_reward(config.env_id, config.family)}
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    model = str(base_model(out / "base-model", config.base_spec, config.env_id, config.family))
    tokens, episodes = int(config.inner["max_new_tokens"]), int(config.validation_episodes)
    figures = {f"base ({label})": measure_modes(model, config.env_id, episodes, t,
                                                max_new_tokens=tokens)
               for label, t in (("greedy", 0.0), ("sampled", 1.0))}
    if trained:
        figures.update(trained_modes(config, model, rewards, out / "modes-runs", episodes))
    write_json_atomic(out / "modes.json", figures)
    write_text_atomic(out / "modes.md", modes_markdown(figures))
    return figures


__all__ = ["TRAINED_OFFSET", "measure_modes", "modes_markdown", "require_modes", "run_modes",
           "sample_responses", "trained_modes"]
