"""The README's first example runs as written on a machine with no data downloaded; every
link of the docs and boards reaches its file and heading."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"

CHECKS = '''
assert problem == "Compute 49 + 45 + 44.", problem
assert info["primitives"]["outcome"] == 1.0 and info["primitives"]["format_boxed"] == 1.0
assert meta_reward.episodic_from_steps([[info["primitives"]]]) == [1.5]
assert [row["step"] for row in history] == [0, 1]
print("README example ok")
'''


def test_the_first_example_runs_with_no_download(tmp_path):
    first = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert first is not None and 'gym.make("derl/Arithmetic-v0")' in first.group(1)
    script = tmp_path / "example.py"
    script.write_text(first.group(1) + CHECKS, encoding="utf-8")
    env = {**os.environ, "DERL_BENCH_DATA": str(tmp_path / "no-data"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "README example ok" in done.stdout
    assert not (tmp_path / "no-data").exists()  # nothing was downloaded
    assert (tmp_path / "runs" / "first").is_dir()


def test_the_documentation_list_names_every_doc_and_card():
    text = README.read_text(encoding="utf-8")
    listed = text[text.index("## Documentation"):].split("\n## ", 1)[0]
    repo = README.parent
    pages = sorted(p.relative_to(repo).as_posix()
                   for folder in ("docs", "envs") for p in (repo / folder).glob("*.md"))
    assert pages and [page for page in pages if f"]({page})" not in listed] == []


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(page: Path) -> str:
    """A page's text without its fenced code, where a bracket is code, not a link."""
    return re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)


def _anchors(page: Path) -> Iterator[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, a
    repeated heading numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(page), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def test_every_link_of_the_docs_and_boards_reaches_its_file_and_heading():
    # The pages people write and the boards' rendered pages alike.
    repo = README.parent
    pages = [README, repo / "CONTRIBUTING.md", *repo.glob("docs/**/*.md"),
             *repo.glob("envs/**/*.md"), *repo.glob("leaderboards/**/*.md"),
             *repo.glob("baselines/**/*.md")]
    broken = []
    for page in pages:
        for target in LINK.findall(_prose(page)):
            if re.match(r"[a-z]+:", target):  # a URL
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (anchor and linked.suffix == ".md"
                                       and anchor not in set(_anchors(linked))):
                broken.append(f"{page.relative_to(repo)}: {target}")
    assert len(pages) > 20 and broken == []
