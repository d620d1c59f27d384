"""Reward discovery that survives crashes: ``meta --resume`` after ``kill -9``, the proposers'
checkpoints, and inner runs on Ray whose worker is killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from derl_bench.cli import main
from derl_bench.meta import IslandEvolution, OptimizerConfig, RandomSearch
from derl_bench.meta.optimizer import MetaOptimizer
from derl_bench.meta.search import FixedReward
from derl_bench.meta.workers import ray_available

REPO = Path(__file__).resolve().parents[2]
INNER = {"env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 2, "group_size": 2,
         "prompts_per_step": 2, "max_new_tokens": 8, "tensorboard": False}
RECIPE = {"name": "resume", "method": "derl", "outer_steps": 3, "population": 3,
          "validation_episodes": 2, "optimizer_max_new_tokens": 16,
          "optimizer_sft_examples": 16, "optimizer_sft_steps": 2, "eval_levels": [],
          "seed": 4, "progress": False, "inner": INNER}
COMPARED = ("generation", "index", "expr", "status", "score", "train_reward", "valid",
            "start_model", "duplicate_of")


TRAINS_EVERY_SLOT = {"method": "fixed", "reward": "outcome + format_boxed"}


def _write_recipe(path: Path, **changes: object) -> Path:
    path.write_text(yaml.safe_dump({**RECIPE, **changes}))
    return path


def _meta(recipe: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "derl_bench", "meta", str(recipe),
                             "--output", str(out), *extra], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    output, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, output
    return output


def _records(out: Path) -> list[dict]:
    lines = (out / "candidates.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return sorted(({k: r.get(k) for k in COMPARED} for r in records),
                  key=lambda r: (r["generation"], r["index"]))


def _normalised(records: list[dict], out: Path) -> list[dict]:
    # Runs in different directories name their checkpoints differently; the rest must match.
    return [{k: (v.replace(str(out), "OUT") if isinstance(v, str) else v) for k, v in r.items()}
            for r in records]


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError("the run ended before the kill point: " + proc.stdout.read())
        if time.monotonic() > deadline:
            raise AssertionError("the kill point was never reached")
        time.sleep(0.02)


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference: the recipe run start to end without a kill (in this process)."""
    base = tmp_path_factory.mktemp("whole")
    recipe = _write_recipe(base / "recipe.yaml")
    assert main(["meta", str(recipe), "--output", str(base / "run"), "--executor",
                 "local"]) == 0
    return base / "run"


@pytest.mark.parametrize("kill_point", ["mid-generation", "before-first-checkpoint"])
def test_a_killed_run_resumes_to_the_same_candidates_and_scores(uninterrupted, tmp_path,
                                                               kill_point):
    recipe = _write_recipe(tmp_path / "recipe.yaml")
    out = tmp_path / "run"
    proc = _meta(recipe, out, "--executor", "local")
    if kill_point == "mid-generation":
        # Generation 1 has started and at least one of its inner runs has finished.
        _wait_for(lambda: any(r["generation"] == 1 for r in _lines(out / "candidates.jsonl")),
                  proc)
    else:
        _wait_for(lambda: (out / "config.yaml").exists(), proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = [r for r in _lines(out / "candidates.jsonl")]
    output = _finish(_meta(recipe, out, "--resume", "--executor", "local"))
    assert "best Meta-Reward" in output
    assert _normalised(_records(out), out) == _normalised(_records(uninterrupted), uninterrupted)
    resumed = json.loads((out / "summary.json").read_text())
    whole = json.loads((uninterrupted / "summary.json").read_text())
    assert resumed["best_expr"] == whole["best_expr"]
    assert [g["mean_score"] for g in resumed["generations"]] == [
        g["mean_score"] for g in whole["generations"]]
    if kill_point == "mid-generation":
        # The inner runs that had finished were not redone: their records are untouched.
        finished = {(r["generation"], r["index"]): r.get("seconds") for r in done_before}
        after = {(r["generation"], r["index"]): r.get("seconds")
                 for r in _lines(out / "candidates.jsonl")}
        assert finished and all(after[k] == v for k, v in finished.items())


def test_resume_refuses_a_changed_recipe_and_a_missing_run(uninterrupted, tmp_path, capsys):
    changed = _write_recipe(tmp_path / "changed.yaml", population=4)
    assert main(["meta", str(changed), "--output", str(uninterrupted), "--resume"]) == 2
    assert "population: 3 -> 4" in capsys.readouterr().err
    assert main(["meta", str(changed), "--output", str(tmp_path / "nothing"), "--resume"]) == 2
    assert "no reward-discovery run" in capsys.readouterr().err


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_run_into_a_finished_runs_folder_deletes_nothing(uninterrupted, tmp_path, capsys):
    before = _tree(uninterrupted)
    recipe = _write_recipe(tmp_path / "recipe.yaml")
    assert main(["meta", str(recipe), "--output", str(uninterrupted), "--executor", "local"]) == 2
    assert "already holds another run" in capsys.readouterr().err
    # Even --overwrite deletes nothing while the new recipe is wrong: its model is missing.
    gone = tmp_path / "no-such-model"
    broken = _write_recipe(tmp_path / "broken.yaml", inner={**INNER, "model": str(gone)})
    assert main(["meta", str(broken), "--output", str(uninterrupted), "--overwrite"]) == 2
    assert f"no such model folder: {gone}" in capsys.readouterr().err
    # Overrides go after the recipe, as with train.
    assert main(["meta", str(recipe), "--output", str(uninterrupted), "--resume",
                 "population=4"]) == 2
    assert "population: 3 -> 4" in capsys.readouterr().err
    assert main(["meta", str(recipe), "--output", str(tmp_path / "new"), "--workers", "0"]) == 2
    assert "workers must be at least 1" in capsys.readouterr().err
    assert _tree(uninterrupted) == before


def test_a_damaged_candidates_line_or_state_stops_a_resume(uninterrupted, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(uninterrupted, run)
    saved = run / "config.yaml"  # the copy is a run in its own folder
    saved.write_text(saved.read_text().replace(str(uninterrupted), str(run)))
    recipe = _write_recipe(tmp_path / "recipe.yaml")
    log = run / "candidates.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0], "{garbage", *lines[1:]]) + "\n")
    before = _tree(run)
    assert main(["meta", str(recipe), "--output", str(run), "--resume"]) == 2
    assert f"{log}, line 2, is not a candidate record" in capsys.readouterr().err
    log.write_text("\n".join([lines[0], "[1, 2]", *lines[1:]]) + "\n")
    assert main(["meta", str(recipe), "--output", str(run), "--resume"]) == 2
    assert "line 2, is JSON but not a candidate record" in capsys.readouterr().err
    log.write_text("\n".join(lines) + "\n")
    # A state written by another run (the folder's run id differs) is not resumed either.
    theirs = (run / "run-id").read_text().strip()
    (run / "run-id").write_text("0123abcd\n")
    before = _tree(run)
    assert main(["meta", str(recipe), "--output", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint.pt belongs to run {theirs}, but {run} holds run 0123abcd" in err
    assert _tree(run) == before
    (run / "run-id").write_text(theirs + "\n")
    intact = saved.read_text()
    saved.write_text("inner: {steps: [\n")
    before = _tree(run)
    assert main(["meta", str(recipe), "--output", str(run), "--resume"]) == 2
    assert f"{saved} is damaged" in capsys.readouterr().err
    assert _tree(run) == before
    saved.write_text(intact)
    (run / "state" / "checkpoint.pt").write_bytes(b"garbage")
    assert main(["meta", str(recipe), "--output", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint.pt cannot be read, it is damaged" in err and "weights_only" not in err
    assert (run / "results").is_dir() == (uninterrupted / "results").is_dir()
    assert {k for k in _tree(run)} == set(before)


@pytest.mark.parametrize("make", [
    lambda tmp: RandomSearch("math", seed=3),
    lambda tmp: IslandEvolution("math", seed=3, islands=2, island_size=2),
    lambda tmp: FixedReward("outcome", seed=3),
    lambda tmp: MetaOptimizer("math", OptimizerConfig(max_new_tokens=16, learning_rate=5e-3,
                                                      kl_coef=0.0), workdir=tmp, seed=3),
], ids=["random", "revolve", "fixed", "meta-optimizer"])
def test_a_restored_proposer_continues_exactly_as_the_original(tmp_path, make):
    import torch

    original, copy = make(tmp_path), make(tmp_path)
    scores = [1.0, 0.0, 0.5]
    original.observe(original.propose(3), scores)
    proposals = original.propose(3)
    saved = tmp_path / "state.pt"
    torch.save(original.state_dict(), saved)
    copy.load_state_dict(torch.load(saved, weights_only=True))
    for proposer in (original, copy):
        proposer.observe(proposals, scores)  # scores that differ: the optimiser state matters
    assert [p.expr for p in original.propose(4)] == [p.expr for p in copy.propose(4)]
    if isinstance(original, MetaOptimizer):
        for a, b in zip(original.model.parameters(), copy.model.parameters(), strict=True):
            assert torch.equal(a, b)


needs_ray = pytest.mark.skipif(not ray_available(), reason="ray is not installed")


def _kill_worker_mid_run(tmp_path: Path, index: int, retries: int, batch_inner: str = "false",
                         inner: dict | None = None) -> tuple[Path, Path, int, dict[int, dict]]:
    """Run a one-generation recipe on 2 Ray workers and SIGKILL the worker process of
    candidate ``index`` while it trains; returns the recipe, run directory, killed pid and
    the records by index. Inner runs are separate unless ``batch_inner`` says otherwise."""
    # A fixed reward trains every slot (a search could propose a reward constant on the probe
    # set, which is never trained, and the kill needs a running inner run).
    recipe = _write_recipe(tmp_path / "recipe.yaml", outer_steps=1,
                           inner={**INNER, "steps": 12, **(inner or {})}, retries=retries,
                           batch_inner=batch_inner, **TRAINS_EVERY_SLOT)
    out = tmp_path / "run"
    proc = _meta(recipe, out, "--executor", "ray", "--workers", "2")
    marker = out / "inner" / f"g000-c{index:02d}.worker"
    _wait_for(marker.exists, proc)
    assert not any(r["index"] == index for r in _lines(out / "candidates.jsonl"))
    pid = int(marker.read_text().strip().rsplit(":", 1)[1])
    os.kill(pid, signal.SIGKILL)
    _finish(proc)
    return recipe, out, pid, {r["index"]: r for r in _lines(out / "candidates.jsonl")}


@needs_ray
def test_an_inner_run_whose_ray_worker_is_killed_is_retried_and_scores_as_without_ray(tmp_path):
    recipe, out, pid, records = _kill_worker_mid_run(tmp_path, index=1, retries=1)
    killed = records[1]
    assert killed["status"] == "scored" and killed["attempts"] == 2
    assert len(killed["retried_after"]) == 1
    assert killed["worker"].rsplit(":", 1)[1] != str(pid)
    # The retried run computed what an in-process run of the same recipe computes.
    local = tmp_path / "local"
    assert main(["meta", str(recipe), "--output", str(local), "--executor", "local"]) == 0
    assert _normalised(_records(out), out) == _normalised(_records(local), local)


@needs_ray
def test_a_killed_population_reruns_its_inner_runs_separately(tmp_path):
    # 3 candidates on 2 workers: candidates 0 and 1 train as one population, 2 alone (the
    # fixed reward's slots differ in their seeds only, and start from one model). Losing the
    # population's worker says nothing about its rewards: even with no retries left they run
    # again, separately, and score as an in-process run of the same recipe does.
    from derl_bench.policies.tiny import init_tiny_model

    base = init_tiny_model(tmp_path / "base")
    recipe, out, pid, records = _kill_worker_mid_run(tmp_path, index=1, retries=0,
                                                     batch_inner="auto",
                                                     inner={"model": str(base)})
    for i in (0, 1):
        assert records[i]["status"] == "scored" and "retried_after" not in records[i]
        assert records[i]["worker"].rsplit(":", 1)[1] != str(pid)
        assert "as one population" in (out / "inner" / f"g000-c{i:02d}.error.log").read_text()
    assert records[2]["status"] == "scored"
    local = tmp_path / "local"
    assert main(["meta", str(recipe), "--output", str(local), "--executor", "local"]) == 0
    ours, theirs = _normalised(_records(out), out), _normalised(_records(local), local)
    assert [r["score"] for r in ours] == [r["score"] for r in theirs]


@needs_ray
def test_a_ray_worker_killed_with_no_retries_left_is_excluded_and_the_run_goes_on(tmp_path):
    _, out, _, records = _kill_worker_mid_run(tmp_path, index=0, retries=0)
    assert records[0]["status"] == "failed" and records[0]["score"] is None
    assert records[0]["error"]
    assert all(records[i]["status"] == "scored" for i in (1, 2))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed_inner_runs"] == 1


def test_without_ray_the_run_is_in_process_and_asking_for_ray_is_a_clear_error(tmp_path):
    # A Python where `import ray` fails, as on an install without the [distributed] extra.
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from derl_bench.meta.workers import make_executor, ray_available\n"
        "from derl_bench.cli import main\n"
        "assert not ray_available()\n"
        "assert make_executor('auto').name == 'local'\n"
        "raise SystemExit(main(['meta', "
        f"{str(_write_recipe(tmp_path / 'r.yaml', outer_steps=1, **TRAINS_EVERY_SLOT))!r},"
        f" '--output', {str(tmp_path / 'run')!r}, '--executor', 'ray']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'derl-bench[distributed]'" in proc.stderr
    auto = subprocess.run([sys.executable, "-c", code.replace("'--executor', 'ray'",
                                                               "'--executor', 'auto'")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert auto.returncode == 0, auto.stderr
    records = _lines(tmp_path / "run" / "candidates.jsonl")
    assert len(records) == 3 and all(r["status"] == "scored" for r in records)
    assert len({r["worker"] for r in records}) == 1  # one process ran them all
