"""ALFWorld's word-level tokenizer, built from ALFWorld's own vocabulary, for the command model.

A byte-level BPE trained on generic text splits ``alarmclock 10`` into several pieces and spends
most of a prompt on them. ALFWorld's language is closed: every command and observation is
made of the grammar's words (``alfred.twl2``), the names of ALFRED's object and receptacle types
and instance numbers. So the vocabulary is built from those sources, in code:

- the words of the grammar's templates and feedback sentences (``go``, ``take``, ``from``,
  ``move``, ``heat``, ``with``, ...), read from the logic folder of the data root
  (``alfworld/logic/alfred.twl2``) or, without a data root, the alfworld package's copy;
- the object and receptacle types of ALFRED (``alfworld/gen/constants.py``: ``OBJECTS``,
  ``OBJECTS_WSLICED``, ``RECEPTACLES``, ``MOVABLE_RECEPTACLES``), lower-cased as the games print
  them (``CellPhone`` -> ``cellphone``; ALFWorld's demangler only lower-cases and strips ids);
- the words of the task descriptions' templates (``alfworld/gen/goal_library.py``);
- the fixed words of :class:`~derl_bench.families.alfworld.compact_state.CompactState`'s
  rendering;
- instance numbers ``0`` to ``99`` as whole tokens (scenes hold at most a few dozen of a type).

The alfworld files are read as text (``ast``), never imported: importing alfworld creates
``$ALFWORLD_DATA``. Each type name and each number is one token, the pre-tokeniser splits on
whitespace only, so ``tokens(a + " " + b) == tokens(a) + tokens(b)`` and decoding a command's
tokens gives the command back. The tokenizer is the command model's generic word-level
:class:`~transformers.PreTrainedTokenizerFast`
(:func:`~derl_bench.policies.command_model.word_tokenizer`) with ``<pad>``, ``<unk>``,
``<bos>``, ``<eos>`` and the end-of-command token ``<eoc>`` that
:mod:`derl_bench.policies.commands` appends to every command; saved with ``save_pretrained``, a
model folder loads with ``AutoTokenizer`` like any HF model.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Any

from derl_bench.families.alfworld.compact_state import STATE_WORDS, TRIED_WORDS
from derl_bench.policies.command_model import SPECIAL_TOKENS, word_tokenizer

MAX_INSTANCE = 99
_TYPE_LISTS = ("OBJECTS", "OBJECTS_WSLICED", "RECEPTACLES", "MOVABLE_RECEPTACLES")


def alfworld_package_dir() -> Path:
    """The installed alfworld package's folder, found without importing it."""
    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the alfworld package is needed to build the ALFWorld vocabulary "
                          "(pip install 'derl-bench[alfworld]')")
    return Path(next(iter(spec.submodule_search_locations)))


def logic_file(data_root: str | Path | None = None) -> Path:
    """``alfred.twl2``: the data root's ``alfworld/logic`` copy when there is one, else the
    package's (the download verifies they are the same file)."""
    from derl_bench.data.root import DataNotFoundError, dataset_dir

    try:
        root = Path(data_root) if data_root is not None else None
        candidate = dataset_dir("alfworld", root) / "logic" / "alfred.twl2"
        if candidate.is_file():
            return candidate
    except DataNotFoundError:  # no ALFWorld data: the package's copy is the same grammar
        pass
    return alfworld_package_dir() / "data" / "alfred.twl2"


def grammar_words(grammar_text: str) -> set[str]:
    """Literal words of a TextWorld grammar's templates and feedback sentences.

    Placeholders (``{o.name}``, ``#look.feedback#``, ``[{... | ...}]``) are dropped: what they
    expand to is types and numbers, which come from the type lists.
    """
    sentences = re.findall(r'"rhs"\s*:\s*"((?:[^"\\]|\\.)*)"', grammar_text)
    sentences += re.findall(r'template\s*::\s*"((?:[^"\\]|\\.)*)"', grammar_text)
    words: set[str] = set()
    for sentence in sentences:
        text = re.sub(r"\[[^\]]*\]|\{[^}]*\}|#[^#]*#", " ", sentence.replace("\\n", " "))
        words.update(re.findall(r"[a-z]+(?:/[a-z]+)?", text.lower()))
    return words


def _strings_in(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


def type_names(constants_file: Path) -> set[str]:
    """ALFRED's object and receptacle type names, lower-cased, from ``gen/constants.py``."""
    tree = ast.parse(constants_file.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in _TYPE_LISTS for t in node.targets):
            names.update(s.lower() for s in _strings_in(node.value) if s.isalpha())
    return names


def goal_template_words(goal_library_file: Path) -> set[str]:
    """Words of the task descriptions' templates (``gen/goal_library.py``)."""
    tree = ast.parse(goal_library_file.read_text(encoding="utf-8"))
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "templates":
                    for template in _strings_in(value):
                        words.update(re.findall(r"[a-z]+", re.sub(r"\{[^}]*\}", " ",
                                                                  template.lower())))
    return words


def alfworld_vocabulary(data_root: str | Path | None = None) -> list[str]:
    """The tokens, in id order: special tokens, numbers ``0..99``, then words sorted."""
    package = alfworld_package_dir()
    words = grammar_words(logic_file(data_root).read_text(encoding="utf-8"))
    words |= type_names(package / "gen" / "constants.py")
    words |= goal_template_words(package / "gen" / "goal_library.py")
    words |= set(STATE_WORDS)
    numbers = [str(n) for n in range(MAX_INSTANCE + 1)]
    words -= set(numbers) | set(SPECIAL_TOKENS)
    return [*SPECIAL_TOKENS, *numbers, *sorted(words)]


def build_alfworld_tokenizer(data_root: str | Path | None = None) -> Any:
    """The word-level tokenizer over :func:`alfworld_vocabulary` as a ``PreTrainedTokenizerFast``
    (:func:`~derl_bench.policies.command_model.word_tokenizer`)."""
    return word_tokenizer(alfworld_vocabulary(data_root))


def build_tried_tokenizer(data_root: str | Path | None = None) -> Any:
    """The tokenizer of :class:`~derl_bench.families.alfworld.compact_state.TriedState`'s
    view: :func:`build_alfworld_tokenizer`'s tokens, then its own words
    (:data:`~derl_bench.families.alfworld.compact_state.TRIED_WORDS`) after them, so every
    other token keeps its id."""
    return word_tokenizer([*alfworld_vocabulary(data_root), *TRIED_WORDS])
