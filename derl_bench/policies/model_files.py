"""Which file of a model folder is damaged, checked before the folder is loaded.

Loading a folder whose weights are cut short or whose tokenizer is not JSON fails deep inside
safetensors, transformers or tokenizers, with a message that names no file
(``Expecting value: line 1 column 1 (char 0)``). :func:`damaged_model_file` reads what can be
checked cheaply, the weights' headers (not the weights) and the JSON files, and names the
first file that does not read.
"""

from __future__ import annotations

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


__all__ = ["damaged_model_file"]
