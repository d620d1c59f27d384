"""A game's PDDL-to-SAS translation is kept on disk beside the release and read back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from derl_bench.families.alfworld import games
from derl_bench.families.alfworld.game import TRANSLATIONS, _pddl2sas, _translate, load_game


@pytest.fixture
def release_copy(data_root, tmp_path) -> Path:
    """One real game in a release layout of its own (so the cache starts empty)."""
    source = games.game_path(games.level_games("L0", "eval")[0])
    target = tmp_path / "alfworld" / "json_2.1.1" / Path(*source.parts[-4:])
    target.parent.mkdir(parents=True)
    shutil.copy(source, target)
    return target


def _load(path: Path) -> tuple:
    import json

    raw = path.read_bytes()
    return _translate(str(path), raw, json.loads(raw))


def test_the_cached_translation_is_the_translation(release_copy):
    import json

    data = json.loads(release_copy.read_bytes())
    _, fresh = _pddl2sas(data["pddl_domain"], data["pddl_problem"])
    _, first = _load(release_copy)
    cache = release_copy.parents[4] / TRANSLATIONS
    assert [p.suffix for p in cache.iterdir()] == [".pickle"]  # nothing half-written left
    task, again = _load(release_copy)
    assert first == fresh == again
    assert len(task.actions) > 0
    load_game.cache_clear()
    game = load_game(str(release_copy))
    assert game.sas == fresh and game.walkthrough


def test_a_damaged_entry_is_translated_again_and_an_edited_game_gets_its_own(release_copy):
    _, sas = _load(release_copy)
    cache = release_copy.parents[4] / TRANSLATIONS
    [entry] = cache.iterdir()
    entry.write_bytes(b"not a pickle")
    assert _load(release_copy)[1] == sas
    assert entry.read_bytes() != b"not a pickle"  # replaced by a good one
    release_copy.write_bytes(release_copy.read_bytes() + b"\n")
    _load(release_copy)
    assert len(list(cache.iterdir())) == 2


def test_a_cache_that_cannot_be_written_is_skipped(release_copy):
    # A file where the cache folder would be: every write fails, as on a read-only root.
    blocker = release_copy.parents[4] / TRANSLATIONS
    blocker.write_text("in the way")
    assert _load(release_copy)[1]
    assert blocker.read_text() == "in the way"
    assert sorted(p.name for p in blocker.parent.iterdir()) == [TRANSLATIONS, "json_2.1.1"]
