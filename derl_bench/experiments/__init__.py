"""Experiments: studies that run the lower stages end to end and report what they measured.

- :mod:`derl_bench.experiments.proposer_check` — can a reward proposer learn? Each proposer
  against cheap scoring rules with a known optimum, no inner training.
- :mod:`derl_bench.experiments.rehearse` — the training, meta and evaluation commands at a real
  model shape on this machine (``derl-bench model rehearse``).
- :mod:`derl_bench.experiments.stats` — paired comparisons over seeds (confidence intervals,
  minimal detectable effects).
"""
