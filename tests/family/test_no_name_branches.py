"""Nothing in derl_bench/ branches on a family or defaults to one: outside derl_bench/families/
and the modules a card names as its own (env, observers, hooks), no family, dataset or board
name is a literal in a comparison, a default, a call's argument or a dict's key; and outside
derl_bench/families/ no card's env id is a literal in a comparison or a default. Docstrings
and comments are not code: only those kinds of nodes are read."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from derl_bench.cards import load_card
from derl_bench.family import family_specs

PACKAGE = Path(__file__).resolve().parents[2] / "derl_bench"
FAMILIES = "derl_bench.families"

COMPARISON, DEFAULT, ARGUMENT, KEY = "comparison", "default", "argument", "key"
NAME_PLACES = (COMPARISON, DEFAULT, ARGUMENT, KEY)
"""Where a family, dataset or board name may not be written outside the families."""
ENV_ID_PLACES = (COMPARISON, DEFAULT)
"""Where a card's env id may not be written outside derl_bench/families/ (a call may name one:
``gym.make("derl/ALFWorld-v0")`` in an example run is not a branch)."""


def family_names() -> set[str]:
    names: set[str] = set()
    for spec in family_specs().values():
        names.add(spec.name)
        names.update(entry.benchmark for entry in spec.ids.values())
        names.update(load_card(spec.name).get("datasets") or {})
    return names


def card_env_ids() -> set[str]:
    return {env_id for spec in family_specs().values() for env_id in spec.ids}


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


def in_families(module: str) -> bool:
    return module == FAMILIES or module.startswith(FAMILIES + ".")


def _strings(node: ast.AST) -> list[str]:
    return [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)
            and isinstance(c.value, str)]


def _written(node: ast.expr) -> list[str]:
    """A call's argument as written: a string, or the strings of a tuple, list or set of
    them (an argument computed by another call is that call's own)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for element in node.elts for s in _written(element)]
    return []


def _defaults(tree: ast.AST) -> Iterator[ast.expr]:
    """The default values of every function's and lambda's parameters, and of every annotated
    class attribute (a dataclass's fields)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from node.args.defaults
            yield from (d for d in node.args.kw_defaults if d is not None)
        elif isinstance(node, ast.ClassDef):
            yield from (s.value for s in node.body
                        if isinstance(s, ast.AnnAssign) and s.value is not None)


def literals(tree: ast.AST) -> list[tuple[str, int, str]]:
    """``(place, line, string)`` for each string literal written in a comparison, a default,
    a call's argument or a dict's key, by line."""
    return sorted(_literals(tree), key=lambda found: found[1])


def _literals(tree: ast.AST) -> Iterator[tuple[str, int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            yield from ((COMPARISON, node.lineno, s) for s in _strings(node))
        elif isinstance(node, ast.Call):
            for arg in (*node.args, *(k.value for k in node.keywords)):
                yield from ((ARGUMENT, node.lineno, s) for s in _written(arg))
        elif isinstance(node, ast.Dict):
            yield from ((KEY, node.lineno, k.value) for k in node.keys
                        if isinstance(k, ast.Constant) and isinstance(k.value, str))
    for default in _defaults(tree):
        yield from ((DEFAULT, default.lineno, s) for s in _strings(default))


def name_comparisons(tree: ast.AST, names: set[str]) -> list[str]:
    return [f"line {line}: {value!r}" for place, line, value in literals(tree)
            if place == COMPARISON and value in names]


def name_literals(tree: ast.AST, names: set[str],
                  places: tuple[str, ...] = NAME_PLACES) -> list[str]:
    """Each literal of ``names`` in one of ``places``, as ``place line N: 'value'``."""
    return [f"{place} line {line}: {value!r}" for place, line, value in literals(tree)
            if place in places and value in names]


def env_id_literals(tree: ast.AST, env_ids: set[str]) -> list[str]:
    """Each card env id (a ``derl_bench:`` prefix too) in a comparison or a default."""
    return [f"{place} line {line}: {value!r}" for place, line, value in literals(tree)
            if place in ENV_ID_PLACES and value.rsplit(":", 1)[-1] in env_ids]


def _scan(check) -> dict[str, list[str]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        hits = check(module, ast.parse(path.read_text(encoding="utf-8")))
        if hits:
            found[module] = hits
    return found


def test_the_scan_finds_a_comparison_with_a_family_name():
    tree = ast.parse("if spec.name == 'alfworld' or dataset in ('gsm8k', 'x'):\n    pass\n")
    assert len(name_comparisons(tree, family_names())) == 2


def test_the_scan_finds_a_family_name_as_a_default():
    tree = ast.parse(
        "def f(family='alfworld', *, board='gsm8k', n=1):\n    pass\n"
        "g = lambda name=('x', 'reasoninggym'): name\n"
        "@dataclass\nclass C:\n    family: str = 'scienceworld'\n    n: int = 1\n")
    assert name_literals(tree, family_names()) == [
        "default line 1: 'alfworld'", "default line 1: 'gsm8k'", "default line 3: 'reasoninggym'",
        "default line 6: 'scienceworld'"]


def test_the_scan_finds_a_family_name_as_a_call_argument():
    tree = ast.parse("dataset_dir('alfworld', root)\ncard_manifest(family='math', level=f('x'))\n"
                     "check(('gsm8k', 1), [name, 'digitshack'])\n")
    assert name_literals(tree, family_names()) == [
        "argument line 1: 'alfworld'", "argument line 2: 'math'", "argument line 3: 'gsm8k'",
        "argument line 3: 'digitshack'"]


def test_the_scan_finds_a_family_name_as_a_dict_key():
    tree = ast.parse("PROMPTS = {'alfworld': a, 'other': b, **more}\nx = {1: 'gsm8k'}\n")
    assert name_literals(tree, family_names()) == ["key line 1: 'alfworld'"]


def test_the_scan_finds_a_card_env_id_in_a_comparison_or_a_default():
    tree = ast.parse(
        "if env_id != 'derl/ALFWorld-v0':\n    pass\n"
        "def f(env_id='derl_bench:derl/GSM8K-v0'):\n    pass\n"
        "class C:\n    env_id: str = 'derl/Arithmetic-v0'\n"
        "gym.make('derl/ALFWorld-v0')\n")  # a call may name an id
    assert env_id_literals(tree, card_env_ids()) == [
        "comparison line 1: 'derl/ALFWorld-v0'", "default line 3: 'derl_bench:derl/GSM8K-v0'",
        "default line 6: 'derl/Arithmetic-v0'"]


def test_the_scan_reads_no_docstring_or_comment():
    tree = ast.parse('"""Defaults to "alfworld" and derl/ALFWorld-v0."""\n'
                     'def f(x=None):  # x == "alfworld"\n'
                     '    """``env_id == "derl/ALFWorld-v0"``; ``{"gsm8k": 1}``."""\n')
    assert name_literals(tree, family_names()) == []
    assert env_id_literals(tree, card_env_ids()) == []


def test_no_module_outside_the_families_names_a_family_in_its_code():
    names, own = family_names(), own_modules()
    assert {"alfworld", "gsm8k", "reasoninggym"} <= names
    assert "derl_bench.families.math.env" in own
    assert _scan(lambda module, tree: [] if in_families(module) or module in own
                 else name_literals(tree, names)) == {}


def test_no_module_outside_the_families_compares_or_defaults_to_a_card_env_id():
    env_ids = card_env_ids()
    assert {"derl/ALFWorld-v0", "derl/GSM8K-v0"} <= env_ids
    assert _scan(lambda module, tree: [] if in_families(module)
                 else env_id_literals(tree, env_ids)) == {}
