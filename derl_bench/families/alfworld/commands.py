"""ALFWorld's parts of the command stack, which its card's ``commands`` hook names: the compact
state a command policy reads (:class:`~derl_bench.families.alfworld.compact_state.CompactState`)
and the word-level tokenizer over ALFWorld's vocabulary
(:func:`~derl_bench.families.alfworld.vocab.build_alfworld_tokenizer`)."""

from __future__ import annotations

from derl_bench.families.alfworld.compact_state import CompactState
from derl_bench.families.alfworld.vocab import build_alfworld_tokenizer
from derl_bench.policies.command_model import CommandParts

COMMANDS = CommandParts(state=CompactState, tokenizer=build_alfworld_tokenizer)

__all__ = ["COMMANDS"]
