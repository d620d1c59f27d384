"""The proposer check: can a reward proposer learn, measured on cheap surrogate objectives.

Training an inner policy per proposal is what makes reward discovery expensive, and noisy. Before
any inner run is spent, this check asks whether a proposer's outer loop *can* learn: it runs the
proposer for ``generations`` x ``population`` proposals against a scoring rule whose optimum is
known, computed in microseconds from the reward's values on a probe set of the env's primitive
vectors (:mod:`derl_bench.meta.probe`), with no inner training.

Rules (``KIND:ARGUMENT``; every score lies in [-1, 1], 1 is the optimum, and a proposal that does
not compile scores -1):

- ``rank:EXPR`` — Spearman rank agreement of the proposal's values with the target reward
  ``EXPR`` over the probe set. Optimum: any reward that orders the probe responses exactly as
  the target does (a positive monotone transform of it, on the env's own vectors). A constant
  reward scores 0.
- ``pays:NAME`` — pays for primitive ``NAME`` with positive weight: over the probe vectors, the
  share where raising ``NAME`` from the low to the high end of its range (the rest held fixed)
  raises the reward, minus the share where it lowers it. Optimum: strictly increasing in
  ``NAME`` at every probe vector.
- ``noisy-rank:EXPR`` (and ``noisy-pays:NAME``) — the same score, but what the proposer
  *observes* is a validation-like measurement: the score mapped linearly onto a success rate in
  ``[noise_low, noise_high]`` and measured on ``noise_n`` problems (a binomial draw), the
  size of the noise the proxy's validation carries. The check reports the noise-free score of
  the proposals, which is what the proposer should improve.

Proposers, the registry's methods that search without warm starts
(:func:`~derl_bench.experiments.proposer_check.config.check_proposers`): ``derl`` (the
Meta-Optimizer with the outer-loop settings given), ``derl-frozen`` (the same cold-started model
and sampler with learning rate 0: the control that cannot learn), ``random`` (random search),
``revolve`` (island evolution) and any added from outside the package, built by the meta loop's own
:func:`~derl_bench.meta.loop.make_proposer`. The two Meta-Optimizer proposers are cold-started on
each corpus asked for (``paper``: the DERL paper's formulas; ``generator``: grammar draws), once
per corpus (fine-tuning seed 0) and shared by every seed, so a seed sets the proposal sampling,
the updates and the noise; ``derl`` and ``derl-frozen`` draw the same generation 0 (common
random numbers).

    derl-bench proposer-check --output runs/proposer-check              # the full check
    derl-bench proposer-check --small --output runs/proposer-check-ci   # CI-sized

Outputs: ``results.json`` (every proposal's score, every generation's statistics, the
summary), ``summary.md`` (the table) and ``curves.png`` (mean score per generation with a 95%
band). The endpoint, stated before any run: each seed's mean noise-free proposal score over
generations ``endpoint_from`` to the end, DERL minus each other proposer, paired by seed, with a
95% confidence interval.
"""

from derl_bench.experiments.proposer_check.config import (
    SMALL,
    CheckConfig,
    check_proposers,
    learner,
    proposer_runs,
    small,
)
from derl_bench.experiments.proposer_check.report import (
    endpoint,
    label,
    plot,
    summarize,
    summary_markdown,
)
from derl_bench.experiments.proposer_check.rules import (
    OPTIMUM,
    RULE_KINDS,
    Rule,
    observed,
    parse_rule,
    spearman,
)
from derl_bench.experiments.proposer_check.run import run_check, run_one

__all__ = ["OPTIMUM", "RULE_KINDS", "SMALL", "CheckConfig", "Rule",
           "check_proposers", "endpoint", "label", "learner", "observed", "parse_rule", "plot",
           "proposer_runs", "run_check", "run_one", "small", "spearman", "summarize",
           "summary_markdown"]
