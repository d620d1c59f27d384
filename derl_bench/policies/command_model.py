"""The command model: a small decoder over a family's own words, and what a family gives the
command stack.

A command policy (:mod:`derl_bench.policies.commands`) picks one of the env's admissible
commands from a prompt that a state tracker renders from what the agent has read. Two parts of
that belong to the family and come from its card's ``commands`` hook, a :class:`CommandParts`:
the state tracker (a new one per episode) and the tokenizer over the family's closed language
(built in code, given the data root). ALFWorld's are in :mod:`derl_bench.families.alfworld`.
The rest is generic and lives here: the special tokens every such tokenizer carries (the
end-of-command token :data:`EOC` among them), a word-level tokenizer over a list of tokens
(:func:`word_tokenizer`), and the decoder sized for it (:func:`build_command_model`,
:func:`init_command_model`)::

    >>> tok = word_tokenizer([*SPECIAL_TOKENS, "1", "go", "to", "cabinet"])
    >>> tok("go to cabinet 1", add_special_tokens=False)["input_ids"]
    [6, 7, 8, 5]
    >>> tok.decode([6, 7, 8, 5])
    'go to cabinet 1'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from derl_bench.cards import CardError
from derl_bench.family import Family, resolve_family
from derl_bench.policies.tiny import build_seeded_decoder, write_model_dir

PAD, UNK, BOS, EOS, EOC = "<pad>", "<unk>", "<bos>", "<eos>", "<eoc>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS, EOC)
"""The first tokens of a command model's vocabulary, in id order; ``<eoc>`` ends every command
(:class:`~derl_bench.policies.commands.CommandPolicy` appends it)."""


@dataclass(frozen=True)
class CommandParts:
    """What a family gives the command stack: the object its card's ``commands`` hook names
    (a resolved family's ``commands``, :func:`command_parts`).

    ``state`` makes a new state tracker for an episode (the class itself will do): an object
    with ``reset(observation, info)``, ``update(command, observation, info)`` and ``render()``
    (:class:`~derl_bench.rollout.commands.AgentState`), built from the game's text alone.
    ``tokenizer(data_root)`` builds the command model's tokenizer (``None``: the default data
    root): every word ``state.render()`` writes and every admissible command's is one token,
    and :data:`SPECIAL_TOKENS` are its first tokens (:func:`word_tokenizer` builds one from a
    list of tokens)."""

    state: Callable[[], Any]
    tokenizer: Callable[[str | Path | None], Any]
    name: str = "compact"
    """The view's name, which a model folder built for it records (:data:`VIEW_FILE`)."""
    interface: str = "compact-constrained"
    """The ``policy_interface`` of a record of a model reading this view."""
    views: tuple[CommandParts, ...] = ()
    """Other views of the game the family offers (another state tracker and its tokenizer);
    a model is built for one and keeps reading it (:meth:`view`, :func:`model_view`)."""

    def view(self, name: str | None) -> CommandParts:
        """The parts of the view ``name`` (``None``: this default view); a
        :class:`~derl_bench.cards.CardError` naming the offered views for an unknown one."""
        if name is None:
            return self
        for parts in (self, *self.views):
            if parts.name == name:
                return parts
        offered = ", ".join(p.name for p in (self, *self.views))
        raise CardError(f"no command view {name!r}; the family offers: {offered}")


VIEW_FILE = "command_view.json"
"""A model folder's record of the view it reads (``{"view": NAME}``), written for any view but
the family's default; a folder without it reads the default view."""


def model_view(model_dir: str | Path) -> str | None:
    """The view the model in ``model_dir`` was built for (``None``: the default view)."""
    path = Path(model_dir) / VIEW_FILE
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not the model's view ({exc})") from exc
    if not isinstance(found, dict) or not isinstance(found.get("view"), str):
        raise ValueError(f'{path} is not the model\'s view: it must hold {{"view": NAME}}')
    return str(found["view"])


def view_files(parts: CommandParts, default: CommandParts) -> dict[str, Any]:
    """The files a model folder of ``parts``'s view holds to say so (none for ``default``,
    the family's default view, so the default's folders stay as they were)."""
    return {} if parts.name == default.name else {VIEW_FILE: {"view": parts.name}}


def write_view_files(folder: str | Path, parts: CommandParts, default: CommandParts) -> None:
    """Write :func:`view_files` into the model folder ``folder`` (as
    :func:`~derl_bench.policies.tiny.write_model_dir` writes its extra files)."""
    for name, content in view_files(parts, default).items():
        (Path(folder) / name).write_text(json.dumps(content, indent=2))


def command_parts(family: Family) -> CommandParts:
    """The command stack's parts of ``family``; a :class:`~derl_bench.cards.CardError` when its
    card names no ``commands`` hook (the family has no command policies).

    >>> command_parts(resolve_family("derl/ALFWorld-v0")).state.__name__
    'CompactState'
    """
    if family.commands is None:
        raise CardError(f"card {family.name!r} names no 'commands' hook")
    return family.commands


def word_tokenizer(tokens: Sequence[str]) -> Any:
    """The word-level tokenizer over ``tokens`` (ids in order; :data:`SPECIAL_TOKENS` first) as
    a ``PreTrainedTokenizerFast``.

    The pre-tokeniser splits on whitespace only, so ``tokens(a + " " + b) == tokens(a) +
    tokens(b)`` and decoding a command's tokens gives the command back. No special token is
    added when encoding: callers put ``<bos>`` before a prompt and ``<eoc>`` after a command
    themselves, so encoding stays a plain concatenation of words.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(tokens)}
    word_level = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder with an unused prefix joins the words with single spaces, so a
    # command's tokens decode to the command.
    word_level.decoder = decoders.WordPiece(prefix="\x00", cleanup=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=word_level,
        pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS,
        additional_special_tokens=[EOC],
        padding_side="right",
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )


@dataclass(frozen=True)
class CommandModelSpec:
    """Shape of the command model: a small decoder over a family's word vocabulary."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024
    seed: int = 0


def build_command_model(tokenizer: Any, spec: CommandModelSpec | None = None) -> Any:
    """A random-initialised causal LM sized for ``tokenizer``; free generation stops at
    ``<eoc>`` or ``<eos>``.

    The decoder is Llama-shaped: the same layers as Qwen2 (RMSNorm, rotary embeddings,
    grouped-query attention, SwiGLU) without the query/key/value biases, and run by the same
    lean forward pass (:mod:`derl_bench.policies.fast`). Not Qwen2 itself because transformers
    (5.x) loads the tokenizer of any ``qwen2`` folder as Qwen2's byte-level BPE whatever
    ``tokenizer_config.json`` says, which would split every word into bytes; for ``llama`` it
    keeps the saved ``tokenizer.json``, so ``AutoTokenizer`` gives back this word-level tokenizer.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    eoc = tokenizer.convert_tokens_to_ids(EOC)
    return build_seeded_decoder(LlamaConfig, LlamaForCausalLM, tokenizer,
                                spec or CommandModelSpec(),
                                bos_token_id=tokenizer.bos_token_id,
                                eos_token_id=[eoc, tokenizer.eos_token_id])


def init_command_model(path: str | Path, env_id: str, spec: CommandModelSpec | None = None,
                       data_root: str | Path | None = None, overwrite: bool = False, *,
                       view: str | None = None) -> Path:
    """Write the command model and the tokenizer of ``env_id``'s family (its card's
    ``commands`` hook; ``view`` names another view it offers) to ``path`` (atomically, see
    :func:`~derl_bench.policies.tiny.write_model_dir`) and return it."""
    default = command_parts(resolve_family(env_id))
    parts = default.view(view)
    spec = spec or CommandModelSpec()

    def build() -> tuple[Any, Any]:
        tokenizer = parts.tokenizer(data_root)
        return build_command_model(tokenizer, spec), tokenizer

    return write_model_dir(path, build, {"command_model_spec.json": asdict(spec),
                                         **view_files(parts, default)},
                           overwrite=overwrite)


__all__ = ["BOS", "EOC", "EOS", "PAD", "SPECIAL_TOKENS", "UNK", "VIEW_FILE", "CommandModelSpec",
           "CommandParts", "build_command_model", "command_parts", "init_command_model",
           "model_view", "view_files", "word_tokenizer", "write_view_files"]
