"""The math family (``envs/math.md``): ``derl/GSM8K-v0`` and ``derl/MATH-v0``, its env
(:mod:`.env`), observers (:mod:`.observers`), evaluation adapter (:mod:`.adapter`) and
datasets (:mod:`.data`)."""
