"""The data layer: root resolution, download (atomic, checksummed, resumable) and verify."""

from __future__ import annotations

import shutil
import threading
import zipfile
from pathlib import Path

import pytest

from conftest import MirrorHandler, serve_directory
from derl_bench.cli import main
from derl_bench.data import download as dl
from derl_bench.data.root import DataNotFoundError, data_root, dataset_dir
from derl_bench.data.sources import Check, Dataset, Source, datasets, tree_files
from derl_bench.data.verify import verify_dataset


def test_data_root_prefers_env_var(monkeypatch, tmp_path):
    monkeypatch.setenv("DERL_BENCH_DATA", str(tmp_path / "root"))
    assert data_root() == (tmp_path / "root").resolve()


def test_data_root_defaults_to_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("DERL_BENCH_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert data_root() == tmp_path / "derl-bench" / "data"


def test_missing_dataset_says_how_to_fetch_it(tmp_path):
    with pytest.raises(DataNotFoundError, match="derl-bench data download gsm8k"):
        dataset_dir("gsm8k", tmp_path)


def test_session_data_root_verifies(data_root, capsys):
    assert main(["data", "verify", "--root", str(data_root)]) == 0
    out = capsys.readouterr().out
    assert "gsm8k         test             1319" in out
    assert "alfworld      valid_unseen      134" in out
    assert "FAIL" not in out


def test_every_dataset_is_complete_with_a_marker(data_root):
    for name in datasets():
        assert (data_root / name / ".complete").is_file(), name
        assert all(r.ok for r in verify_dataset(datasets()[name], data_root)), name


def test_math_file_list_matches_release_counts():
    files = tree_files(datasets()["math"].sources[0])
    assert len(files) == 12500 and len(set(files)) == 12500
    assert sum(f.startswith("train/") for f in files) == 7500


def test_verify_fails_on_a_tampered_file(data_root, tmp_path, capsys):
    root = tmp_path / "root"
    shutil.copytree(data_root / "gsm8k", root / "gsm8k")
    with open(root / "gsm8k" / "test.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"question": "extra", "answer": "#### 1"}\n')
    assert main(["data", "verify", "gsm8k", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "FAIL (1320 items, expected 1319)" in out


def test_download_resumes_a_partial_file_with_a_range_request(upstream_data, tmp_path):
    root = tmp_path / "root"
    full = (upstream_data / "gsm8k" / "test.jsonl").read_bytes()
    part = root / "gsm8k" / "test.jsonl.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(full[: len(full) // 2])
    MirrorHandler.requests_seen.clear()
    with serve_directory(upstream_data) as url:
        dl.download("gsm8k", root, mirror=url, show_progress=False)
    assert (root / "gsm8k" / "test.jsonl").read_bytes() == full
    assert ("/gsm8k/test.jsonl", f"bytes={len(full) // 2}-") in MirrorHandler.requests_seen
    assert not part.exists()


def test_checksum_mismatch_leaves_nothing_behind(upstream_data, tmp_path):
    mirror = tmp_path / "mirror"
    shutil.copytree(upstream_data / "gsm8k", mirror / "gsm8k")
    with open(mirror / "gsm8k" / "test.jsonl", "ab") as fh:
        fh.write(b"\n")
    root = tmp_path / "root"
    with serve_directory(mirror) as url, pytest.raises(dl.DownloadError, match="checksum mismatch"):
        dl.download("gsm8k", root, mirror=url, show_progress=False)
    assert not (root / "gsm8k" / "test.jsonl").exists()
    assert not (root / "gsm8k" / "test.jsonl.part").exists()
    assert not (root / "gsm8k" / ".complete").exists()


def test_unreachable_mirror_gives_a_clear_error(tmp_path, capsys):
    with serve_directory(tmp_path) as url:  # serves an empty folder: every file is a 404
        status = main(["data", "download", "gsm8k", "--mirror", url, "--root", str(tmp_path / "r"),
                       "--quiet"])
    assert status == 1
    assert "HTTP 404" in capsys.readouterr().err
    assert not (tmp_path / "r" / "gsm8k" / ".complete").exists()


def test_unknown_dataset_name_exits_2(capsys):
    assert main(["data", "download", "nope"]) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err


def test_zip_with_unsafe_paths_is_refused(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    (mirror / "evil").mkdir(parents=True)
    with zipfile.ZipFile(mirror / "evil" / "games.zip", "w") as zf:
        zf.writestr("../escaped.txt", "x")
    evil = Dataset("evil", "a zip that escapes its folder", "none",
                   (Source("evil/games.zip", "unused", kind="zip", extract_to="evil"),),
                   (Check("all", "glob", "evil/games", 1, pattern="*"),))
    monkeypatch.setitem(datasets(), "evil", evil)
    with serve_directory(mirror) as url, pytest.raises(dl.DownloadError, match="unsafe path"):
        dl.download("evil", tmp_path / "root", mirror=url, show_progress=False)
    assert not (tmp_path / "root" / "escaped.txt").exists()
    assert not (tmp_path / "escaped.txt").exists()


def test_second_download_only_verifies(data_root, mirror_url):
    before = {p: p.stat().st_mtime_ns for p in (data_root / "gsm8k").iterdir()}
    MirrorHandler.requests_seen.clear()
    dl.download("gsm8k", data_root, mirror=mirror_url, show_progress=False)
    assert MirrorHandler.requests_seen == []
    assert {p: p.stat().st_mtime_ns for p in (data_root / "gsm8k").iterdir()} == before


def test_tree_checksum_is_order_independent(tmp_path: Path):
    for name in ("b.json", "a.json", "sub/c.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    forward = dl.tree_sha256(tmp_path)
    files = sorted((p for p in tmp_path.rglob("*") if p.is_file()), reverse=True)
    assert dl.tree_sha256(tmp_path, files) == forward
    (tmp_path / "a.json").write_text("changed")
    assert dl.tree_sha256(tmp_path) != forward


def test_cold_start_corpus_reads_the_papers_formulas(data_root):
    from derl_bench.data.corpus import cold_start_formulas

    formulas = cold_start_formulas(data_root)
    assert len(formulas) == 206
    assert formulas[0] == "0.4 * g1 + 0.3 * g2 + 0.2 * g3 + 0.1 * g4"
    assert all("<formula>" not in f and f for f in formulas)


def test_cold_start_corpus_missing_says_how_to_download(tmp_path):
    from derl_bench.data.corpus import cold_start_formulas
    from derl_bench.data.root import DataNotFoundError

    with pytest.raises(DataNotFoundError, match="derl-bench data download derl"):
        cold_start_formulas(tmp_path)


def _installed_gsm8k(data_root: Path, root: Path) -> dict[str, bytes]:
    shutil.copytree(data_root / "gsm8k", root / "gsm8k")
    return {p.name: p.read_bytes() for p in (root / "gsm8k").iterdir()}


def test_a_mirror_serving_wrong_content_leaves_good_data_intact(data_root, tmp_path, capsys):
    # A captive portal answers every path with the same HTML page.
    portal = tmp_path / "portal"
    for source in datasets()["gsm8k"].sources:
        (portal / source.path).parent.mkdir(parents=True, exist_ok=True)
        (portal / source.path).write_text("<html><body>Please log in</body></html>\n")
    root = tmp_path / "root"
    before = _installed_gsm8k(data_root, root)
    with serve_directory(portal) as url:
        status = main(["data", "download", "gsm8k", "--force", "--mirror", url,
                       "--root", str(root), "--quiet"])
    assert status == 1
    assert "checksum mismatch" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (root / "gsm8k").iterdir()} == before
    assert main(["data", "verify", "gsm8k", "--root", str(root)]) == 0


def test_an_unreachable_mirror_keeps_the_dataset_usable(data_root, tmp_path, monkeypatch):
    root = tmp_path / "root"
    before = _installed_gsm8k(data_root, root)
    with serve_directory(tmp_path / "empty") as url:  # every file is a 404
        with pytest.raises(dl.DownloadError, match="HTTP 404"):
            dl.download("gsm8k", root, mirror=url, force=True, show_progress=False)
    assert {p.name: p.read_bytes() for p in (root / "gsm8k").iterdir()} == before
    assert dataset_dir("gsm8k", root) == root / "gsm8k"


def test_verify_fails_without_the_marker_the_envs_need(data_root, tmp_path, capsys):
    root = tmp_path / "root"
    _installed_gsm8k(data_root, root)
    (root / "gsm8k" / ".complete").unlink()
    assert main(["data", "verify", "gsm8k", "--root", str(root)]) == 1
    assert "the download did not finish" in capsys.readouterr().out


def test_a_second_concurrent_download_waits_for_the_first(upstream_data, tmp_path):
    root = tmp_path / "root"
    waiting = threading.Event()
    outcome: list[object] = []

    def second() -> None:
        try:
            outcome.append(dl.download("gsm8k", root, mirror=url, show_progress=False,
                                       on_wait=lambda message: waiting.set()))
        except Exception as err:  # reported through outcome and asserted below
            outcome.append(err)

    with serve_directory(upstream_data) as url:
        with dl.dataset_lock("gsm8k", root):
            thread = threading.Thread(target=second)
            thread.start()
            assert waiting.wait(timeout=60)
            assert not (root / ".gsm8k.download").exists()  # it has not started fetching
        thread.join(timeout=60)
    assert len(outcome) == 1 and isinstance(outcome[0], list)
    assert all(r.ok for r in outcome[0])
    assert dataset_dir("gsm8k", root).is_dir()


def test_download_into_a_root_that_is_a_file_exits_2(tmp_path, capsys):
    (tmp_path / "root").write_text("not a folder")
    assert main(["data", "download", "gsm8k", "--root", str(tmp_path / "root"), "--quiet"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
