"""One package per env family: ``derl_bench/families/<name>/`` holds the family's env,
observers, prompt(s), evaluation adapter and data sources.

A family's card stays in the top-level ``envs/`` folder (``envs/<name>.md``), where users read
it; its ``entry_point``, ``observers`` and ``hooks:`` name the modules here by dotted path.

Among the stages, the families sit after :mod:`derl_bench.evaluation`: a family's parts
subclass the stages' base classes (the envs' single-step problem env, the observers' base, the
prompts, :class:`~derl_bench.evaluation.families.LevelsAdapter`), so a
family package may import any earlier stage, and no stage imports a family. The stages reach a
family's parts only through its card (:meth:`derl_bench.family.FamilySpec.part`), resolved
where a command starts and handed down.
"""
