"""The README's first example runs as written on a machine with no data downloaded."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
