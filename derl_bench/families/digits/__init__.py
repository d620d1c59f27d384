"""The digit-shift tasks, one package for the seven cards that share one env and one observers
module (``envs/digits_*.md``: ``derl/DigitsSparse-v0``, ``derl/DigitsHack-v0``,
``derl/DigitsGate-v0``, ``derl/DigitsTrap-v0``, ``derl/DigitsRecall-v0``,
``derl/DigitsRecallSparse-v0`` and ``derl/DigitsBalance-v0``): the env (:mod:`.env`) and
observers (:mod:`.observers`)."""
