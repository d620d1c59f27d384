"""Which file of a model folder is damaged, checked before the folder is loaded; and the
digest that pins a folder's weights in a result record.

Loading a folder whose weights are cut short or whose tokenizer is not JSON fails deep inside
safetensors, transformers or tokenizers, with a message that names no file
(``Expecting value: line 1 column 1 (char 0)``). :func:`damaged_model_file` reads what can be
checked cheaply, the weights' headers (not the weights) and the JSON files, and names the
first file that does not read.

:func:`model_digest` hashes what defines the policy (weights, config, tokenizer), not what
only a resumed run reads (optimizer and trainer state), so two copies of one model have one
digest wherever they lie.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def damaged_model_file(folder: str | Path) -> str | None:
    """``"<file> is damaged (<why>)"`` for the first file of ``folder`` that does not read, else
    None: a ``*.safetensors`` whose header is not whole (cut short, or not safetensors), or a
    ``*.json`` (the config, the tokenizer, ...) that is not UTF-8 JSON. A file that reads may
    still hold wrong numbers; that is not looked for."""
    from safetensors import safe_open

    folder = Path(folder)
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt"):
                pass
        except Exception as err:  # safetensors' errors are its own classes, and more
            return f"{path} is damaged ({err})"
    for path in sorted(folder.glob("*.json")):
        try:
            json.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError:
            return f"{path} is damaged (not UTF-8 text)"
        except json.JSONDecodeError as err:
            return f"{path} is damaged (not JSON: {err.msg} at line {err.lineno})"
        except RecursionError:
            return f"{path} is damaged (JSON nested too deeply to read)"
    return None


MODEL_FILE_PATTERNS = ("*.safetensors", "*.bin", "*.json", "*.txt", "*.model", "*.jinja")
"""The files of a model folder that define the policy: weights (``safetensors``, ``bin``),
the config, generation config and tokenizer (``json``, ``txt`` merges, a ``model``
SentencePiece file) and the chat template (``jinja``)."""
TRAINING_STATE_FILES = frozenset({"trainer_state.json", "training_args.bin"})
"""Files with a model file's ending that a trainer writes beside the weights: they hold the
run's state (and paths of its machine), not the policy."""


def model_files(folder: str | Path) -> list[Path]:
    """The files of ``folder`` (not its subfolders) that :func:`model_digest` hashes, sorted
    by name."""
    folder = Path(folder)
    found = {path for pattern in MODEL_FILE_PATTERNS for path in folder.glob(pattern)
             if path.is_file() and path.name not in TRAINING_STATE_FILES}
    return sorted(found, key=lambda path: path.name)


def model_digest(folder: str | Path) -> str | None:
    r"""The sha256 of ``folder``'s model files (:func:`model_files`) as ``sha256sum`` lists
    them: a line ``<sha256 of the file>  <file name>`` per file, in name order, so that
    ``sha256sum`` of those files in the folder (names in C-locale order), piped to
    ``sha256sum``, gives the same digest. ``None`` when ``folder`` holds no model file (not a
    folder, or not a model's).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "config.json").write_text("{}")
    ...     model_digest(d) == hashlib.sha256(
    ...         (hashlib.sha256(b"{}").hexdigest() + "  config.json\n").encode()).hexdigest()
    True
    """
    files = model_files(folder) if Path(folder).is_dir() else []
    if not files:
        return None
    from derl_bench.data.verify import sha256_file

    listing = hashlib.sha256()
    for path in files:
        listing.update(f"{sha256_file(path)}  {path.name}\n".encode())
    return listing.hexdigest()


__all__ = ["damaged_model_file", "model_digest", "model_files"]
