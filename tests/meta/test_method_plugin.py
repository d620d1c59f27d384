"""A reward-discovery method that lives outside the package runs end to end: the greedy
hill-climb of tests/meta/methods_ext/, found through DERL_BENCH_METHOD_PATH or an installed
distribution's entry point, is offered by ``derl-bench meta``, runs the meta loop, joins the
proxy benchmark and gets its own method group on the boards; nothing of derl_bench/ names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from derl_bench.cli import main
from derl_bench.grpo.config import ConfigError
from derl_bench.meta import MetaConfig
from derl_bench.meta import methods as registry
from derl_bench.meta.methods import MethodError, method_named, method_names
from tests.dist import write_dist_info
from tests.meta.methods_ext.hill_climb import GROUP

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ENTRY = "tests.meta.methods_ext.hill_climb:METHOD"
TINY_INNER = {"env_id": "derl/Arithmetic-v0", "model": "tiny", "steps": 1, "group_size": 2,
              "prompts_per_step": 1, "max_new_tokens": 8, "tensorboard": False}


@pytest.fixture
def method_path(monkeypatch):
    """Sets DERL_BENCH_METHOD_PATH to the given entries; the registry forgets them after."""
    def use(*entries: str) -> None:
        monkeypatch.setenv(registry.METHOD_PATH_SETTING, ",".join(entries))
        registry.reload()

    yield use
    monkeypatch.undo()
    registry.reload()


@pytest.fixture
def hill_climb(method_path):
    method_path(ENTRY)
    return method_named("hill-climb")


def test_built_in_methods_are_one_module_each():
    assert method_names() == ("derl", "derl-pop", "derl-frozen", "random", "revolve", "fixed",
                              "control-negative", "control-planted", "control-one-part")
    for method in registry.BUILT_IN:
        module = method.proposer.__module__.rsplit(".", 1)[-1]
        assert module in {"derl", "derl_frozen", "random", "revolve", "fixed",
                          "control_negative", "control_planted", "control_one_part"}, method.name
    with pytest.raises(ConfigError, match="method must be one of"):
        method_named("hill-climb")


def test_the_method_is_found_through_the_path_and_forgotten_without_it(hill_climb, method_path):
    assert hill_climb.group == GROUP and not hill_climb.learns
    assert method_names()[-1] == "hill-climb"
    config = MetaConfig(method="hill-climb", population=1, inner=TINY_INNER)
    assert not config.warm_starts
    with pytest.raises(ConfigError, match="protocol derl-official runs the methods derl, "
                       "derl-pop, derl-frozen, not 'hill-climb'"):
        MetaConfig(method="hill-climb", protocol="derl-official", inner=TINY_INNER)
    method_path()
    assert "hill-climb" not in method_names()
    with pytest.raises(ConfigError, match="method must be one of"):
        MetaConfig(method="hill-climb", inner=TINY_INNER)


def test_a_file_path_entry_and_a_bad_entry(method_path):
    method_path(f"{HERE / 'methods_ext' / 'hill_climb.py'}:METHOD")
    assert method_named("hill-climb").summary.startswith("greedy hill-climbing")
    method_path("tests.meta.methods_ext.hill_climb")  # a module whose METHOD is the method
    assert "hill-climb" in method_names()
    method_path("tests.meta.methods_ext.hill_climb:GROUP")
    with pytest.raises(MethodError, match="names str, not a method"):
        method_names()
    method_path("tests.meta.methods_ext.no_such_module:METHOD")
    with pytest.raises(MethodError, match="cannot import"):
        method_names()
    method_path(ENTRY, f"{HERE / 'methods_ext' / 'hill_climb.py'}:METHOD")
    with pytest.raises(MethodError, match="'hill-climb' is defined twice"):
        method_names()


def test_an_installed_distribution_adds_the_method_through_its_entry_point(tmp_path,
                                                                          monkeypatch):
    write_dist_info(tmp_path, "derl-bench-hill-climb", "derl_bench.methods",
                    f"hill-climb = {ENTRY}")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.reload()
    try:
        assert method_named("hill-climb").group == GROUP
        from derl_bench.experiments.proposer_check import check_proposers
        from derl_bench.experiments.proxy import proxy_methods, search_methods

        assert search_methods() == ("random", "revolve", "hill-climb", "derl", "derl-pop",
                                    "derl-frozen", "control-negative", "control-planted",
                                    "control-one-part")
        assert "hill-climb" in proxy_methods()
        assert check_proposers() == ("derl", "derl-frozen", "random", "revolve", "hill-climb")
    finally:
        monkeypatch.undo()
        registry.reload()
    assert "hill-climb" not in method_names()


def test_the_method_runs_through_derl_bench_meta(hill_climb, tmp_path, capsys):
    recipe = tmp_path / "meta.yaml"
    recipe.write_text(json.dumps({"name": "hill", "method": "random", "outer_steps": 2,
                                  "population": 2, "validation_episodes": 2,
                                  "eval_levels": [], "executor": "local", "progress": False,
                                  "inner": TINY_INNER}))
    run = tmp_path / "run"
    assert main(["meta", str(recipe), "--method", "hill-climb", "--output", str(run)]) == 0
    assert "best Meta-Reward:" in capsys.readouterr().out
    candidates = [json.loads(line) for line in (run / "candidates.jsonl").read_text().splitlines()]
    assert [c["generation"] for c in candidates] == [0, 0, 1, 1]
    assert {c["origin"] for c in candidates if c["generation"] == 0} == {"random"}
    best = max((c for c in candidates if c["generation"] == 0 and c["status"] == "scored"),
               key=lambda c: (c["score"], -c["index"]))
    for child in (c for c in candidates if c["generation"] == 1):
        assert child["origin"] == "mutation" and child["parents"] == [best["expr"]]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["method"] == "hill-climb"


def test_without_the_setting_derl_bench_meta_refuses_the_method(tmp_path, capsys):
    recipe = tmp_path / "meta.yaml"
    recipe.write_text(json.dumps({"method": "random", "inner": TINY_INNER}))
    with pytest.raises(SystemExit):
        main(["meta", str(recipe), "--method", "hill-climb"])
    assert "invalid choice: 'hill-climb'" in capsys.readouterr().err


def test_the_boards_give_the_method_its_own_group(hill_climb, tmp_path):
    source = REPO / "leaderboards" / "arithmetic" / "derl-s0-L0.json"
    record = json.loads(source.read_text())
    assert record["method"].startswith("derl")
    record["method"] = record["method"].replace("derl", "hill-climb", 1)
    boards = tmp_path / "leaderboards"
    (boards / "arithmetic").mkdir(parents=True)
    (boards / "arithmetic" / "hill-climb-s0-L0.json").write_text(json.dumps(record))
    (boards / "arithmetic" / source.name).write_bytes(source.read_bytes())
    assert main(["leaderboard", "validate", "--dir", str(boards)]) == 0
    assert main(["leaderboard", "render", "--dir", str(boards), "--no-charts"]) == 0
    page = (boards / "index.html").read_text()
    assert f'data-group="{GROUP}"' in page and f'value="{GROUP}"' in page
    assert 'value="other"' not in page
    assert 'data-group="RL, searched reward"' in page


def test_the_method_runs_on_the_proxy_board(hill_climb, tmp_path):
    from derl_bench.experiments.proxy import ProxyConfig, run_proxy, small

    config = small(ProxyConfig(output=str(tmp_path / "proxy"), workers=1,
                               methods=["hill-climb"], retrain_seeds=0))
    result = run_proxy(config, records=tmp_path / "board", log=lambda *_: None)
    assert set(result["summary"]) == {"hill-climb"}
    assert {"L0", "L1", "L2"} <= set(result["summary"]["hill-climb"])
    records = sorted(p.name for p in (tmp_path / "board").glob("*.json"))
    assert records == ["hill-climb-s0-L0.json", "hill-climb-s0-L1.json",
                       "hill-climb-s0-L2.json"]
    record = json.loads((tmp_path / "board" / records[0]).read_text())
    assert record["method"].startswith("hill-climb")


def test_a_bad_method_path_is_an_error_of_the_command(method_path, tmp_path, capsys):
    method_path("tests.meta.methods_ext.no_such_module:METHOD")
    recipe = tmp_path / "meta.yaml"
    recipe.write_text(json.dumps({"method": "random", "inner": TINY_INNER}))
    assert main(["meta", str(recipe), "--method", "derl"]) == 2
    assert "DERL_BENCH_METHOD_PATH: cannot import" in capsys.readouterr().err
