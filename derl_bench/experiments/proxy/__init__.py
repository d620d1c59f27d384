"""The proxy benchmark: every reward-design method on ``derl/Arithmetic-v0``, one budget.

Methods (each run for every seed):

- hand-made rewards: ``outcome``, ``outcome + format`` (``outcome + format_boxed``, the
  paper's Table 2 row) and ``average`` (the mean of the four math aliases ``g1..g4``);
- black-box search: ``random`` (random search) and ``revolve`` (island evolution);
- ``derl`` and ``derl-pop`` (the Meta-Optimizer LLM trained by GRPO on validation scores), and
  ``derl-frozen``, the control that isolates learning (the same cold-started Meta-Optimizer and
  sampler with learning rate 0);
- ``outcome-pop`` and ``random-pop``: outcome-only and random search with DERL-pop's warm start
  (each generation continues from the best policy so far), since part of what DERL-pop gains
  over a cold-started method is that warm start alone.

The full benchmark (the defaults, :data:`PAPER_BUDGET`) runs DERL, ``derl-frozen``, random
search, island evolution and the best hand-made reward at the official DERL code's budget, 20
generations x 8, for seeds 0-4. Every inner run has the same recipe (``inner``) and starts from
the same base policy: the tiny model fine-tuned on the env's reference solutions
(:func:`base_model`), so it starts with low but non-zero competence and often misses the answer
format. Inner run k of a seed trains with the same inner seed in every method (common random
numbers, :func:`~derl_bench.meta.search.slot_seed`): a hand-made reward spends its runs on
itself, a search method on the rewards it proposes, and a proposal that repeats an earlier
reward's behaviour keeps that run's score. Each method keeps its best policy by validation
(1,000 problems) and evaluates it on L0/L1/L2 (the card's eval splits, greedy decoding).

The primary endpoint, stated in ``docs/proxy.md`` before the paper-budget run, is the
proposals' mean validation score over generations ``endpoint_from`` onwards, DERL minus each
other method paired by seed (:mod:`derl_bench.experiments.evidence`)::

    derl-bench proxy --output runs/proxy --records leaderboards/arithmetic  # the full benchmark
    derl-bench proxy --small --output runs/proxy-small    # the CI-sized version

Outputs: ``results.json`` (every figure, every run's generations and proposals), the plots of
:data:`FIGURES`, per-run folders, and with ``--records DIR`` the result records plus the
per-generation evidence in ``DIR/evidence/``.
"""

from derl_bench.experiments.proxy.config import (
    ENV_ID,
    HAND_MADE,
    LEVELS,
    PAPER_BUDGET,
    SMALL,
    WARM_STARTED,
    BaseModelSpec,
    ProxyConfig,
    proxy_methods,
    search_methods,
    small,
)
from derl_bench.experiments.proxy.report import EVIDENCE, FIGURES, mean_se, summarize
from derl_bench.experiments.proxy.run import base_model, copy_records, run_job, run_proxy

__all__ = ["ENV_ID", "EVIDENCE", "FIGURES", "HAND_MADE", "LEVELS", "PAPER_BUDGET",
           "SMALL", "WARM_STARTED", "BaseModelSpec", "ProxyConfig", "base_model",
           "copy_records", "mean_se", "proxy_methods", "run_job", "run_proxy", "search_methods",
           "small", "summarize"]
