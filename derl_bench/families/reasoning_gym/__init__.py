"""The reasoning_gym family (``envs/reasoning_gym.md``): ``derl/ReasoningGym-v0``, reasoning-gym's
procedural generators as single-step problems: its env (:mod:`.env`), observers
(:mod:`.observers`) and evaluation adapter (:mod:`.adapter`)."""
