"""The shared full-charset text space."""

from __future__ import annotations

import copy
import pickle

from derl_bench.envs.spaces import FullText, full_charset, text_space


def test_full_text_covers_the_bmp_and_allows_empty():
    space = text_space(50)
    assert len(space.character_set) == 0x10000 - 0x800
    assert space.contains("") and space.contains("Janet’s ducks → 50% ∑")
    assert not space.contains("\ud800")  # a lone surrogate is no character
    assert not space.contains("x" * 51)


def test_copies_and_pickles_keep_the_space_and_its_seeded_sampling():
    space = text_space(20)
    space.seed(3)
    clone = copy.deepcopy(space)
    assert clone == space and isinstance(clone, FullText)
    assert clone.sample() == space.sample()
    restored = pickle.loads(pickle.dumps(space))
    assert restored == space and restored.character_list == tuple(full_charset())
