"""A tiny random-initialised causal LM and a tokenizer built in code, for tests and CPU defaults.

Nothing is downloaded: the tokenizer is a byte-level BPE trained in-process on a small corpus
generated here (math problems, household and lab commands, the prompt scaffolding), wrapped as a
:class:`~transformers.PreTrainedTokenizerFast` with a ChatML chat template; the model is a
Qwen2-shaped decoder with a few small layers. Both are written with ``save_pretrained`` so any
code that loads a model from a path loads this one the same way::

    >>> import tempfile
    >>> from transformers import AutoModelForCausalLM
    >>> path = init_tiny_model(tempfile.mkdtemp() + "/tiny-lm")
    >>> AutoModelForCausalLM.from_pretrained(path).config.model_type
    'qwen2'
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from derl_bench.files import output_folder_problem
from derl_bench.progress import quiet_transformers

PAD, EOS, IM_START, IM_END = "<|endoftext|>", "<|im_end|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML, the format of the Qwen2.5 models the DERL paper trains."""


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the tiny model. The defaults train a few GRPO steps on 2 CPU cores in seconds."""

    vocab_size: int = 1024
    """Upper bound: BPE training stops early when the corpus has no more merges to offer."""
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 8192
    seed: int = 0


_OBJECTS = (
    "apple", "mug", "knife", "towel", "plate", "book", "lamp", "potato", "egg", "cup", "key",
    "pencil", "soapbar", "spatula", "bowl", "cellphone", "pillow", "vase", "watch", "creditcard",
)
_RECEPTACLES = (
    "countertop", "fridge", "microwave", "sinkbasin", "cabinet", "drawer", "shelf", "desk",
    "garbagecan", "sidetable", "diningtable", "stoveburner", "toilet", "bed", "sofa", "dresser",
)
_LAB = (
    "beaker", "thermometer", "stove", "freezer", "kitchen", "hallway", "greenhouse", "workshop",
    "battery", "wire", "light bulb", "seed", "flower pot", "water", "ice", "orange", "substance",
)
_VERBS = ("go to", "take", "put", "open", "close", "heat", "cool", "clean", "use", "examine",
          "move", "focus on", "look around", "pick up", "connect", "wait", "inventory",
          "teleport to")


def _corpus(n_lines: int, seed: int) -> list[str]:
    """Text shaped like what the envs show and what policies answer."""
    rng = random.Random(seed)
    lines = [
        "Please reason step by step, and put your final answer within \\boxed{}.",
        "You are an expert agent operating in the ALFRED embodied environment.",
        "You are an expert agent playing ScienceWorld, a text-based science simulation.",
        "Your admissible actions of the current situation are:",
        "Now it's your turn to take an action. You should first reason step-by-step about the "
        "current situation within <think> </think> tags, then choose one admissible action and "
        "present it within <action> </action> tags.",
        "Prior to this step, you have already taken steps. Below are the most recent observations "
        "and the corresponding actions you took:",
    ]
    for _ in range(n_lines):
        kind = rng.randrange(4)
        if kind == 0:
            a, b, c = rng.randint(1, 999), rng.randint(1, 99), rng.randint(2, 9)
            lines.append(
                f"Natalia sold {a} clips in April and {b} in May. Each costs ${c}. "
                f"So {a} + {b} = {a + b} and {a + b} * {c} = {(a + b) * c}. "
                f"The answer is \\boxed{{{(a + b) * c}}}. $\\frac{{{b}}}{{{c}}}$ \\sqrt{{{a}}} x^2"
            )
        elif kind == 1:
            obj, rec = rng.choice(_OBJECTS), rng.choice(_RECEPTACLES)
            lines.append(
                f"<think>I need the {obj}. It may be on the {rec} {rng.randint(1, 9)}.</think>"
                f"<action>{rng.choice(_VERBS)} {obj} {rng.randint(1, 3)} in/on {rec} "
                f"{rng.randint(1, 9)}</action> You arrive at {rec} {rng.randint(1, 9)}. "
                f"On the {rec}, you see a {obj}, and a {rng.choice(_OBJECTS)}."
            )
        elif kind == 2:
            thing = rng.choice(_LAB)
            lines.append(
                f"Your task is to boil {thing}. This room is called the {rng.choice(_LAB)}. "
                f"In it, you see: a {thing}, a {rng.choice(_LAB)}. "
                f"{rng.choice(_VERBS)} {thing}. The {thing} is now {rng.randint(0, 100)} degrees."
            )
        else:
            lines.append(
                "Observation: " + ", ".join(
                    f"'{rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.randint(1, 5)}'"
                    for _ in range(6)
                )
            )
    return lines


def train_byte_bpe(vocab_size: int, seed: int = 0,
                   special_tokens: tuple[str, ...] = SPECIAL_TOKENS) -> Any:
    """A ``tokenizers.Tokenizer``: byte-level BPE with Qwen2's normaliser and pre-tokeniser,
    trained on the generated corpus (``special_tokens`` take the first ids)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    # Qwen2's normaliser and pre-tokeniser: ``AutoTokenizer`` reloads a Qwen2-shaped model's
    # tokenizer with exactly these, so the ids survive a save/load round trip.
    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(3000, seed), trainer=trainer)
    return bpe


def build_tiny_tokenizer(vocab_size: int = 1024, seed: int = 0) -> object:
    """Train a byte-level BPE on the generated corpus and wrap it with a ChatML chat template.

    Byte-level means every string encodes (no unknown tokens), so real env text works.
    """
    from transformers import PreTrainedTokenizerFast

    bpe = train_byte_bpe(vocab_size, seed, SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=None,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


class DecoderShape(Protocol):
    """The layer sizes and seed of a decoder built in code (:class:`TinyModelSpec`,
    :class:`~derl_bench.policies.command_model.CommandModelSpec`)."""

    @property
    def hidden_size(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def num_hidden_layers(self) -> int: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def num_key_value_heads(self) -> int: ...
    @property
    def max_position_embeddings(self) -> int: ...
    @property
    def seed(self) -> int: ...


def build_seeded_decoder(config_class: Any, model_class: Any, tokenizer: Any,
                         spec: DecoderShape, **config: Any) -> Any:
    """A ``model_class`` decoder with random weights drawn after ``torch.manual_seed(spec.seed)``,
    sized for ``tokenizer`` (its vocabulary and pad id) and shaped by ``spec``, with tied
    embeddings; ``config`` holds the ``config_class`` keywords of its kind (``eos_token_id``
    among them, which its generation config also stops at)."""
    import torch

    model_config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        **config,
    )
    torch.manual_seed(spec.seed)
    model = model_class(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    eos = config["eos_token_id"]
    model.generation_config.eos_token_id = list(eos) if isinstance(eos, list) else eos
    return model


def build_tiny_model(tokenizer: Any, spec: TinyModelSpec | None = None) -> Any:
    """A Qwen2-shaped causal LM with random weights sized for ``tokenizer``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return build_seeded_decoder(Qwen2Config, Qwen2ForCausalLM, tokenizer,
                                spec or TinyModelSpec(),
                                eos_token_id=tokenizer.eos_token_id, bos_token_id=None)


class ModelFolderExistsError(FileExistsError):
    """A folder that is not empty stands where a model folder is to be written, and nothing
    said to replace it. The message names the Python argument, ``overwrite=True``; a command
    names its own flag with :meth:`replace_with`."""

    def __init__(self, path: Path, option: str = "overwrite=True") -> None:
        self.path, self.option = path, option
        super().__init__(f"{path} exists and is not empty (pass {option} to replace it)")

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its parts, not from its message, when it crosses a process boundary.
        return type(self), (self.path, self.option)

    def replace_with(self, option: str) -> ModelFolderExistsError:
        """The same refusal, naming ``option`` (``--overwrite``) as the way to replace it."""
        return type(self)(self.path, option)


def write_model_dir(path: str | Path, build: Callable[[], tuple[Any, Any]],
                    extra_files: dict[str, dict], overwrite: bool = False) -> Path:
    """Write ``build()``'s model and tokenizer (and ``extra_files``, JSON) to ``path``.

    The directory appears whole or not at all: everything is written to a sibling temporary
    directory first and renamed into place. An existing non-empty ``path`` is refused
    (:class:`ModelFolderExistsError`) before anything is built unless ``overwrite``, and
    ``overwrite`` replaces only a model folder (one holding ``config.json``), never a file or a
    folder of other files. A ``path`` under a file, or in a folder that cannot be written, is
    refused too (an ``OSError`` naming it).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} is a file, not a model folder")
    if path.exists() and any(path.iterdir()):
        if not overwrite:
            raise ModelFolderExistsError(path)
        if not (path / "config.json").is_file():
            # Replacing removes the whole folder: only a folder this function could have
            # written is fair game, so a mistyped PATH cannot take a user's files with it.
            raise FileExistsError(f"{path} is not a model folder (no config.json); overwrite "
                                  "replaces only a model folder")
    # A file where one of its folders would be is named as such, before anything is built
    # (mkdir would report it as "File exists").
    problem = None if path.exists() else output_folder_problem(path)
    if problem:
        raise OSError(problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    model, tokenizer = build()
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        with quiet_transformers():
            model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        for name, content in extra_files.items():
            (staging / name).write_text(json.dumps(content, indent=2))
        if path.exists():
            shutil.rmtree(path)
        staging.rename(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def init_tiny_model(path: str | Path, spec: TinyModelSpec | None = None,
                    overwrite: bool = False) -> Path:
    """Write a tiny model and its tokenizer to ``path`` (a directory) and return it
    (atomically, see :func:`write_model_dir`)."""
    spec = spec or TinyModelSpec()

    def build() -> tuple[Any, Any]:
        tokenizer = build_tiny_tokenizer(spec.vocab_size, spec.seed)
        return build_tiny_model(tokenizer, spec), tokenizer

    return write_model_dir(path, build, {"tiny_model_spec.json": asdict(spec)},
                           overwrite=overwrite)
