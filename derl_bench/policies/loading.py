"""Loading a causal LM and its tokenizer: a HF name or folder, or a LoRA adapter checkpoint.

A folder holding ``adapter_config.json`` is a LoRA adapter checkpoint: it loads as its base
model (the path recorded in the adapter's config) plus the adapter, trainable.

What a model name means is decided in one place, :func:`resolve_model`. A hub id such as
``Qwen/Qwen2.5-0.5B-Instruct`` is also a valid relative path, so the rule is:

1. an existing folder is a model folder;
2. a name that starts with ``./``, ``../``, ``/`` or ``~``, or whose first part exists here
   (``runs/x/final-model`` where ``runs/`` does), is a path, and a missing one is refused
   ("no such model folder") without asking the hub;
3. anything else is a hub id: it is taken from the local Hugging Face cache when the hub cannot
   be reached, and refused at once when it is in neither (the hub's own download would retry
   for most of a minute first).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from derl_bench.progress import quiet_transformers

ADAPTER_CONFIG = "adapter_config.json"

HUB_TIMEOUT_S = 5.0
"""How long the check of a hub id waits for the hub to answer (name lookup included)."""


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a local folder holding a LoRA adapter (not a whole model)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


class ModelNotFoundError(FileNotFoundError):
    """A model that is not there: a local path that does not exist (no hub lookup is tried for
    it), or a hub id that is neither in the local cache nor on a hub that can be reached."""


class ModelLoadError(ValueError):
    """A model folder (or hub model) whose files do not load: cut short, garbage, not a model's."""


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def is_model_path(name: str) -> bool:
    """Whether ``name`` is meant as a path rather than a hub id: it starts with ``./``, ``../``,
    ``/`` or ``~``, or its first part exists (relative to the working folder).

        >>> is_model_path("./models/mine"), is_model_path("/no/such/run")
        (True, True)
        >>> is_model_path("Qwen/Qwen2.5-1.5B-Instruct")  # unless a folder Qwen/ is here
        False
    """
    if name in (".", "..", "~") or name.startswith(("./", "../", "/", "~")):
        return True
    parts = Path(name).parts
    return bool(parts) and Path(parts[0]).exists()


@dataclass(frozen=True)
class ModelSource:
    """Where a model loads from: a local folder, or a hub id (``hub``) that is read from the
    local cache only (``cache_only``) when the hub cannot be reached."""

    name: str
    hub: bool = False
    cache_only: bool = False


def resolve_model(name_or_path: str | Path) -> ModelSource:
    """What ``name_or_path`` names (the module docstring's rule), or :class:`ModelNotFoundError`
    saying why it cannot be a model. A hub id costs one request to the hub (at most
    :data:`HUB_TIMEOUT_S`), and none once it has been found there by this process.

        >>> resolve_model("/no/such/run")
        Traceback (most recent call last):
        ...
        derl_bench.policies.loading.ModelNotFoundError: no such model folder: /no/such/run
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelNotFoundError(f"the model {text} is a file, not a model folder")
        return ModelSource(text)
    if is_model_path(text) or not _HUB_ID.fullmatch(text):
        raise ModelNotFoundError(f"no such model folder: {text}")
    return ModelSource(text, hub=True, cache_only=_hub_cache_only(text))


def model_problem(name_or_path: str | Path) -> str | None:
    """Why ``name_or_path`` cannot be a model (:func:`resolve_model`), or None.

        >>> model_problem("/no/such/run/final-model")
        'no such model folder: /no/such/run/final-model'
    """
    try:
        resolve_model(name_or_path)
    except ModelNotFoundError as err:
        return str(err)
    return None


_FOUND_ON_HUB: set[tuple[str, str]] = set()
"""(endpoint, hub id) pairs this process has found on the hub: a run that loads its start model
again and again (reward discovery's inner runs) asks the hub once."""


def _hub_cache_only(repo_id: str) -> bool:
    """Whether the hub id ``repo_id`` is to be read from the local cache only (the hub cannot be
    reached, or offline mode is on); :class:`ModelNotFoundError` when it can be had from
    neither."""
    from huggingface_hub import constants, try_to_load_from_cache

    cached = isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    where = f"no such model folder: {repo_id}; as a Hugging Face hub id it is not in the " \
        f"local cache ({constants.HF_HUB_CACHE})"
    if constants.is_offline_mode():
        if cached:
            return True
        raise ModelNotFoundError(f"{where}, and HF_HUB_OFFLINE is set")
    if (constants.ENDPOINT, repo_id) in _FOUND_ON_HUB:
        return False
    answer, detail = _ask_hub(repo_id)
    if answer == "found":
        _FOUND_ON_HUB.add((constants.ENDPOINT, repo_id))
    if answer in ("found", "answered"):
        return False
    if cached:  # whatever the hub says, the copy here is what the hub gave before
        return True
    if answer == "missing":
        raise ModelNotFoundError(f"{where} and the hub ({constants.ENDPOINT}) has no such model "
                                 "(a private or gated one needs `hf auth login`)")
    raise ModelNotFoundError(f"{where} and the hub ({constants.ENDPOINT}) cannot be reached "
                             f"({detail})")


def _ask_hub(repo_id: str) -> tuple[str, str]:
    """Ask the hub, once and without retries, for ``repo_id``'s ``config.json``: ``("found",
    "")``, ``("missing", why)``, ``("unreachable", why)``, or ``("answered", why)`` for any
    other answer, which is the loader's to judge. The question runs in a thread so that a name
    lookup that hangs (which no socket timeout bounds) is given up on too."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )

    answers: list[tuple[str, str]] = []

    def ask() -> None:
        try:
            get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=HUB_TIMEOUT_S)
            answers.append(("found", ""))
        except RepositoryNotFoundError as err:  # also a gated repo without a token
            answers.append(("missing", _first_line(err)))
        except (EntryNotFoundError, HfHubHTTPError) as err:
            # The hub answered: the repo is there (loading says what it lacks), or the hub is
            # busy, which the loader's own retries are for.
            answers.append(("answered", _first_line(err)))
        except Exception as err:  # any transport error: no hub to be had here
            answers.append(("unreachable", _first_line(err)))

    asker = threading.Thread(target=ask, name="derl-bench-hub-check", daemon=True)
    asker.start()
    asker.join(HUB_TIMEOUT_S + 1)
    return answers[0] if answers else ("unreachable", f"no answer within {HUB_TIMEOUT_S:g} s")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def load_model_and_tokenizer(name_or_path: str | Path, device: str = "cpu",
                             dtype: str | None = None) -> tuple[Any, Any]:
    """``AutoModelForCausalLM`` and ``AutoTokenizer`` from a name or path, ready for GRPO:
    left padding for generation and a pad token (the end token when the model has none).

    A LoRA adapter checkpoint loads as its base model plus the adapter, trainable
    (:func:`load_model_and_adapter`). What the name means is :func:`resolve_model`'s: a path
    that does not exist is a :class:`ModelNotFoundError`, never a hub lookup, and a hub id the
    hub cannot be asked for is read from the local cache only. Files that do not load are a
    :class:`ModelLoadError` naming the model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(name_or_path)
    if not source.hub and is_adapter_dir(name_or_path):
        return load_model_and_adapter(name_or_path, device, dtype)

    # Without it, every file the hub is asked for would be retried for most of a minute.
    local: dict[str, Any] = {"local_files_only": True} if source.cache_only else {}
    torch_dtype = getattr(torch, dtype) if dtype and dtype != "auto" else (
        "auto" if dtype == "auto" else torch.float32)
    with _load_errors(source):
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path), **local)
        with quiet_transformers():
            # transformers' look for an adapter takes only adapter_kwargs' local_files_only
            model = AutoModelForCausalLM.from_pretrained(
                str(name_or_path), dtype=torch_dtype, **local,
                **({"adapter_kwargs": dict(local)} if local else {}))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # transformers annotates PreTrainedModel.to through a decorator mypy cannot follow
    return model.to(device), tokenizer  # type: ignore[arg-type]


@contextlib.contextmanager
def _load_errors(source: ModelSource) -> Iterator[None]:
    """Turn what transformers and safetensors raise for files that are not a loadable model
    (a weights file cut short or of garbage, a config that is not one) into one
    :class:`ModelLoadError` naming the model, instead of a traceback from deep inside them."""
    import torch
    from safetensors import SafetensorError

    try:
        yield
    except torch.OutOfMemoryError:
        raise  # the machine's limit, not the files'; the command line names it as such
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as err:
        what = f"the model {source.name}" if source.hub else f"the model folder {source.name}"
        raise ModelLoadError(f"{what} cannot be loaded: {type(err).__name__}: "
                             f"{_first_line(err)}") from err


def load_model_and_adapter(path: str | Path, device: str = "cpu", dtype: str | None = None,
                           ) -> tuple[Any, Any]:
    """An adapter checkpoint as base model + adapter (trainable) and the checkpoint's tokenizer."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    config = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
    base_path = config.get("base_model_name_or_path")
    if not base_path:
        raise ValueError(f"{path}: {ADAPTER_CONFIG} names no base model")
    if not Path(base_path).exists() and Path(base_path).is_absolute():
        raise FileNotFoundError(f"{path}: the adapter's base model {base_path} is gone")
    base, tokenizer = load_model_and_tokenizer(base_path, device, dtype)
    if (Path(path) / "tokenizer_config.json").exists():
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    model = PeftModel.from_pretrained(base, str(path), is_trainable=True)
    return model.to(device), tokenizer


__all__ = ["ADAPTER_CONFIG", "HUB_TIMEOUT_S", "ModelLoadError", "ModelNotFoundError", "ModelSource",
           "is_adapter_dir", "is_model_path", "load_model_and_adapter", "load_model_and_tokenizer",
           "model_problem", "resolve_model"]
