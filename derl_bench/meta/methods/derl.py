"""``derl``: DERL's Meta-Optimizer, a language model that writes Meta-Rewards and is trained by
GRPO on the validation scores of the policies they train (:mod:`derl_bench.meta.optimizer`;
its settings are the recipe's ``optimizer`` section,
:class:`~derl_bench.meta.optimizer_config.OptimizerConfig`)."""

from __future__ import annotations

from typing import Any

from derl_bench.meta.methods.base import Method
from derl_bench.meta.search import Proposer

OPTIMIZER_SETTINGS = ("optimizer", "invalid_score")
"""The recipe fields the Meta-Optimizer's methods read."""
POPULATION_WHY = "GRPO compares rewards within a group"


def meta_optimizer(recipe: Any, env_id: str, cold_start: bool, frozen: bool = False) -> Proposer:
    """The Meta-Optimizer of a run of ``recipe``, cold-started unless ``cold_start`` is false
    (a resumed run loads its weights instead); ``frozen``: at learning rate 0."""
    from derl_bench.meta.optimizer import MetaOptimizer
    from derl_bench.reward.primitives import env_primitives

    settings = recipe.optimizer
    optimizer = MetaOptimizer(env_primitives(env_id, recipe.family), settings, recipe.run_dir,
                              recipe.seed,
                              invalid_score=recipe.invalid_score, device=recipe.inner.device,
                              frozen=frozen)
    if settings.sft_examples and cold_start:
        optimizer.cold_start(settings.sft_examples, settings.sft_steps, seed=recipe.seed,
                             corpus=settings.cold_start, cache=settings.cache)
    return optimizer


METHOD = Method(
    name="derl",
    summary="an LLM Meta-Optimizer trained by GRPO on validation scores",
    proposer=meta_optimizer,
    learns=True,
    min_population=2,
    population_why=POPULATION_WHY,
    settings=OPTIMIZER_SETTINGS,
    protocols=("derl", "derl-official"),
)
