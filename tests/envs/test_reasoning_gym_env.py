"""derl/ReasoningGym-v0: reasoning-gym tasks as a family: levels, checksummed slices, the
generator's own score as the grader, and the tiny model training and evaluating on it."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import yaml
from gymnasium.utils.env_checker import check_env

import derl_bench  # noqa: F401
from derl_bench.cards import CardError, load_card, sha256_lines
from derl_bench.cli import main
from derl_bench.families.reasoning_gym.env import (
    LEVELS,
    _generate,
    extract_answer,
    generate,
    generators,
    manifest_key,
)
from derl_bench.leaderboard import record_problems

TASKS = ("chain_sum", "basic_arithmetic")
ENV_ID = "derl/ReasoningGym-v0"


@pytest.mark.parametrize("task", TASKS)
def test_passes_gymnasiums_checker_and_grades_with_the_generators_score(task):
    env = gym.make(ENV_ID, task=task, level="L0")
    check_env(env.unwrapped, skip_render_check=True)
    _, info = env.reset(seed=3)
    answer = info["reference_answer"]
    _, reward, terminated, _, info = env.step(f"So the answer is \\boxed{{{answer}}}.")
    assert (reward, terminated) == (1.0, True)
    assert info["primitives"] == {"outcome": 1.0, "rg_score": 1.0, "answer_parsed": 1.0,
                                  "format_boxed": 1.0, "response_length": 26.0 + len(answer),
                                  "env_reward": 1.0}
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step("no idea")
    assert reward == 0.0 and info["primitives"]["answer_parsed"] == 0.0
    assert info["primitives"]["rg_score"] == 0.0


def test_an_unboxed_answer_is_extracted_and_scored_but_not_formatted():
    env = gym.make(ENV_ID, task="chain_sum", level="L0", split="eval")
    _, info = env.reset(options={"index": 5})
    _, reward, _, _, info = env.step(f"The answer is {info['reference_answer']}.")
    primitives = info["primitives"]
    assert reward == 1.0 and primitives["format_boxed"] == 0.0
    assert primitives["answer_parsed"] == 1.0
    assert extract_answer("answer: 12\nthanks") == "12"


def test_eval_slices_are_the_cards_checksummed_manifests():
    card = load_card("reasoning_gym")
    for task in TASKS:
        for level in LEVELS:
            problems = generate(task, level, "eval")
            assert len(problems) == card["sizes"]["eval"] == len({p.problem_id for p in problems})
            assert (sha256_lines([p.problem_id for p in problems])
                    == card["data_checksums"][manifest_key(task, level)])


def test_a_changed_checksum_is_refused(monkeypatch):
    card = load_card("reasoning_gym")
    key = manifest_key("chain_sum", "L1")
    tampered = {**card, "data_checksums": {**card["data_checksums"], key: "0" * 64}}
    monkeypatch.setattr("derl_bench.families.reasoning_gym.env.load_card", lambda family: tampered)
    _generate.cache_clear()
    try:
        with pytest.raises(CardError, match="manifest sha256"):
            generate("chain_sum", "L1", "eval")
    finally:
        _generate.cache_clear()


@pytest.mark.parametrize("task", TASKS)
def test_slices_share_no_question_and_levels_are_what_the_card_says(task):
    questions = {split: {p.question for p in generate(task, "L0", split)}
                 for split in ("train", "validation", "eval")}
    assert not questions["train"] & questions["validation"]
    assert not questions["train"] & questions["eval"]
    assert not questions["validation"] & questions["eval"]
    train = {p.question for p in generate(task, "L0", "train")}
    for level in ("L1", "L2"):
        assert not train & {p.question for p in generate(task, level, "eval")}
    held_out = set(load_card("reasoning_gym")["tasks"][task]["held_out"])
    assert {p.kind for p in generate(task, "L2", "eval")} == held_out
    assert {p.kind for p in generate(task, "L1", "eval")} == {task}
    assert generators(task, "L1")[0][1] == generators(task, "L0")[0][1] + 1


def test_task_and_config_are_parameters_and_bad_ones_are_refused():
    two = gym.make(ENV_ID, task="chain_sum", split="validation", config={"max_terms": 2})
    assert all(p.question.count("+") + p.question.count("-") == 1
               for p in two.unwrapped.problems)
    with pytest.raises(ValueError, match="fewer than 5000 distinct problems"):
        gym.make(ENV_ID, task="chain_sum", config={"max_terms": 2, "max_digits": 1})
    with pytest.raises(ValueError, match="no task"):
        gym.make(ENV_ID, task="no_such_task")
    with pytest.raises(ValueError, match="level must be one of"):
        gym.make(ENV_ID, task="chain_sum", level="L7")
    with pytest.raises(ValueError, match="no held-out generators"):
        gym.make(ENV_ID, task="products", level="L2")


def test_train_and_evaluate_run_with_the_tiny_model(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "rg", "env_id": ENV_ID, "env_kwargs": {"task": "basic_arithmetic"},
        "model": "tiny", "steps": 2, "group_size": 2, "prompts_per_step": 2,
        "max_new_tokens": 8, "tensorboard": False, "progress": False,
        "meta_reward": "0.5 * rg_score + 0.5 * format_boxed"}))
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--output", str(run)]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and "reward/mean" in json.loads(lines[-1])
    checkpoint = sorted((run / "checkpoints").iterdir())[-1]
    out = tmp_path / "record.json"
    assert main(["evaluate", "--env", ENV_ID, "--level", "L2", "--policy", f"llm:{checkpoint}",
                 "--max-new-tokens", "8", "--limit", "4", "--checkpoint", "final (step 2)",
                 "--no-progress", "--output", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["env"]["kwargs"] == {"task": "chain_sum", "level": "L2", "split": "eval"}
    assert record["results"]["n"] == 4 and record["setup"]["checkpoint"] == "final (step 2)"
    # a --limit run is a quick check, not a board entry; everything else about it is valid
    assert record_problems(record) == ["$.results.n: n=4 is too small: the eval set has 200 "
                                       "episodes"]


def test_sft_warm_starts_on_the_chosen_task(tmp_path):
    from derl_bench.sft import SFTConfig, run_sft

    report = run_sft(SFTConfig(env_id=ENV_ID, output=str(tmp_path / "m"), steps=2,
                               batch_size=2, env_kwargs={"task": "basic_arithmetic"}))
    assert len(report["losses"]) == 2 and (tmp_path / "m" / "config.json").is_file()
    assert report["config"]["env_kwargs"] == {"task": "basic_arithmetic"}
