"""The arithmetic family (``envs/arithmetic.md``): ``derl/Arithmetic-v0``, the CPU-scale proxy
task, its env (:mod:`.env`) and observers (:mod:`.observers`)."""
