"""ALFWorld's parts of the command stack, which its card's ``commands`` hook names: the compact
state a command policy reads (:class:`~derl_bench.families.alfworld.compact_state.CompactState`)
and the word-level tokenizer over ALFWorld's vocabulary
(:func:`~derl_bench.families.alfworld.vocab.build_alfworld_tokenizer`); and one other view a
model may be built for, ``tried``: the compact state with the commands already tried in the
same situation (:class:`~derl_bench.families.alfworld.compact_state.TriedState`), its
records of the interface ``compact-tried-constrained``."""

from __future__ import annotations

from derl_bench.families.alfworld.compact_state import CompactState, TriedState
from derl_bench.families.alfworld.vocab import build_alfworld_tokenizer, build_tried_tokenizer
from derl_bench.policies.command_model import CommandParts

TRIED = CommandParts(state=TriedState, tokenizer=build_tried_tokenizer, name="tried",
                     interface="compact-tried-constrained")

COMMANDS = CommandParts(state=CompactState, tokenizer=build_alfworld_tokenizer, views=(TRIED,))

__all__ = ["COMMANDS", "TRIED"]
