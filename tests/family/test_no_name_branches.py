"""Nothing in derl_bench/ branches on a family's name: outside the modules a card names as its
own (env, observers, hooks), no comparison has a family, dataset or board name as a literal."""

from __future__ import annotations

import ast
from pathlib import Path

from derl_bench.cards import load_card
from derl_bench.family import family_specs

PACKAGE = Path(__file__).resolve().parents[2] / "derl_bench"


def family_names() -> set[str]:
    names: set[str] = set()
    for spec in family_specs().values():
        names.add(spec.name)
        names.update(entry.benchmark for entry in spec.ids.values())
        names.update(load_card(spec.name).get("datasets") or {})
    return names


def own_modules() -> set[str]:
    """The modules the cards name: each is one family's own code."""
    paths = set()
    for spec in family_specs().values():
        for entry in spec.ids.values():
            paths.update((entry.entry_point, entry.observers))
        paths.update(spec.hooks.values())
    return {path.partition(":")[0] for path in paths}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def name_comparisons(tree: ast.AST, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        literals = [c.value for side in (node.left, *node.comparators) for c in ast.walk(side)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        if any(value in names for value in literals):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_a_comparison_with_a_family_name():
    tree = ast.parse("if spec.name == 'alfworld' or dataset in ('gsm8k', 'x'):\n    pass\n")
    assert len(name_comparisons(tree, family_names())) == 2


def test_no_module_outside_a_familys_own_compares_a_family_name():
    names, own = family_names(), own_modules()
    assert {"alfworld", "gsm8k", "reasoninggym"} <= names
    assert "derl_bench.families.math.env" in own
    offenders = {
        module_name(path): hits for path in sorted(PACKAGE.rglob("*.py"))
        if module_name(path) not in own
        and (hits := name_comparisons(ast.parse(path.read_text(encoding="utf-8")), names))
    }
    assert offenders == {}
