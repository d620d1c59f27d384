"""The ``derl-official`` protocol: the released DERL code's Meta-Optimizer and outer loop."""

from __future__ import annotations

import copy
import json
import random
import re
import warnings

import pytest
import torch
import yaml

from derl_bench.cli import main
from derl_bench.grpo.config import ConfigError
from derl_bench.meta import (
    MetaConfig,
    MetaResult,
    OptimizerConfig,
    Proposal,
    meta_config_from_dict,
)
from derl_bench.meta.config import PROTOCOLS
from derl_bench.meta.loop import _warm_start_model
from derl_bench.meta.optimizer import MetaOptimizer
from derl_bench.reward.whitelist import check_formula, formula_text, whitelist_ids, whitelisted

TINY_INNER = {"model": "tiny", "steps": 1, "group_size": 2, "prompts_per_step": 1,
              "max_new_tokens": 8, "tensorboard": False}


# -- the official rules, transcribed from constrained_rollout.py and expression_check.py -----

OFFICIAL_FULL_TOKENS = {"+", "-", "*", "/", "(", ")", "g1", "g2", "g3", "g4",
                        "g", "1", "2", "3", "4"}
OFFICIAL_CHARS = re.compile(r"^[+\-*/().:e0-9\s]+$")


def official_allows(token_str: str) -> bool:
    return token_str in OFFICIAL_FULL_TOKENS or bool(OFFICIAL_CHARS.match(token_str))


def official_check(expr: str) -> bool:
    stack = 0
    for char in expr:
        if char == "(":
            stack += 1
        elif char == ")":
            stack -= 1
            if stack < 0:
                return False
    if stack != 0:
        return False
    if "g1" not in expr and "g2" not in expr and "g3" not in expr and "g4" not in expr:
        return False
    try:
        with warnings.catch_warnings():  # "(g1)(g2)" warns before it fails
            warnings.simplefilter("ignore", SyntaxWarning)
            result = eval(expr, {"__builtins__": None},  # noqa: S307 - the rule under test
                          {"g1": 1.0, "g2": 1.0, "g3": 1e-6, "g4": 1.0 + 1e-6})
    except Exception:
        return False
    return isinstance(result, (int, float))


def test_the_whitelist_is_the_official_rule_on_every_token_of_the_tiny_vocabulary(tmp_path):
    from derl_bench.policies import TinyModelSpec, init_tiny_model, load_model_and_tokenizer

    init_tiny_model(tmp_path / "m", TinyModelSpec(seed=1), overwrite=True)
    _, tokenizer = load_model_and_tokenizer(str(tmp_path / "m"), "cpu")
    expected = {i for i in range(tokenizer.vocab_size)
                if official_allows(tokenizer.decode([i], clean_up_tokenization_spaces=False))}
    expected |= {t for t in (tokenizer.eos_token_id, tokenizer.bos_token_id,
                             tokenizer.pad_token_id, tokenizer.unk_token_id) if t is not None}
    assert whitelist_ids(tokenizer) == sorted(expected)
    assert 0 < len(expected) < tokenizer.vocab_size


@pytest.mark.parametrize("text", [
    "g1", "g2", "g3", "g4", "g", "1", "+", "-", "*", "/", "(", ")", "0.5", "1e-3", " ", "\n",
    "\t", " *", " +", "e", "ee", ":", "().", "12345", " 0", "g1 ", " g1", "G1", "g5", "g12",
    "x", "**", "exp", "", "<|im_end|>", "0,5", "_", "[", "=", "%", "E",
])
def test_whitelisted_agrees_with_the_official_rule(text):
    assert whitelisted(text) == official_allows(text)


@pytest.mark.parametrize("expr", [
    "0.4 * g1 + 0.3 * g2 + 0.2 * g3 + 0.1 * g4", "g1", "g1 / g3", "g1 / (g2 - 1)",
    "g1 // 2", "g1 ** 2", "(-1) ** 0.5 * g1", "g1 * 1e400", "2 * 3", "(g1", "g1)",
    "g1 g2", "e * g1", "(g1)(g2)", "1 .e + g1", "1:2 + g1", "g12", "g1 + 0001", "()",
    "g1 - -g2", "1e-6 + g4", "1e - 6 + g4", ".5 * g1", "5. * g1", "g1 % 0", "g3 ** -400",
    "0 ** -1 + g1", "g4 * 10 ** 20", "", "g1 +", "-g1", "+g2",
])
def test_check_formula_agrees_with_the_official_check(expr):
    assert (check_formula(expr) is None) == official_check(expr), check_formula(expr)


def test_check_formula_agrees_on_random_whitelisted_text():
    pieces = ["g1", "g2", "g3", "g4", "g", "1", "2", "0.5", "e", "-", "+", "*", "/", "(",
              ")", " ", ".", ":", "1e-3"]
    rng = random.Random(0)
    checked = valid = 0
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 9))).strip().strip(".")
        if "**" in text:  # an integer tower could keep Python's eval busy for ever
            continue
        checked += 1
        ours = check_formula(text) is None
        assert ours == official_check(text), text
        valid += ours
    assert checked > 3000 and valid > 50


def test_a_sample_becomes_its_first_line_stripped_of_spaces_and_full_stops():
    # Whitespace is stripped before the full stops, so a space before a stop stays.
    assert formula_text("  g1 + 0.5 * g2.\nsecond line") == "g1 + 0.5 * g2"
    assert formula_text("g1 + g2 .") == "g1 + g2 "
    assert formula_text("...g1...") == "g1"


# -- the preset ---------------------------------------------------------------------------

def test_the_preset_fills_what_the_recipe_leaves_unset_and_explicit_fields_win():
    config = meta_config_from_dict({"protocol": "derl-official", "method": "derl-pop",
                                    "optimizer_learning_rate": 1e-3,
                                    "inner": {**TINY_INNER, "env_id": "derl/GSM8K-v0"}})
    assert config.optimizer.learning_rate == 1e-3  # explicit wins, written flat
    for key, value in PROTOCOLS["derl-official"].items():
        section, _, name = key.rpartition(".")
        if key not in ("optimizer.learning_rate", "outer_steps"):
            assert getattr(getattr(config, section) if section else config, name) == value, key
    assert config.outer_steps == 50 and config.population == 8
    explicit = meta_config_from_dict({"protocol": "derl-official", "inner": {
        **TINY_INNER, "env_id": "derl/GSM8K-v0", "reward_semantics": "derl"}})
    assert explicit.inner.reward_semantics == "derl" and explicit.outer_steps == 20
    default = meta_config_from_dict({"inner": {**TINY_INNER, "env_id": "derl/GSM8K-v0"}})
    assert default == MetaConfig(inner={**TINY_INNER, "env_id": "derl/GSM8K-v0"})


def test_the_preset_refuses_what_the_released_code_does_not_have(tmp_path):
    with pytest.raises(ConfigError, match="methods derl, derl-pop, derl-frozen"):
        meta_config_from_dict({"protocol": "derl-official", "method": "random",
                               "inner": {**TINY_INNER, "env_id": "derl/GSM8K-v0"}})
    with pytest.raises(ConfigError, match="g1..g4"):
        meta_config_from_dict({"protocol": "derl-official",
                               "inner": {**TINY_INNER, "env_id": "derl/ALFWorld-v0"}})
    with pytest.raises(ConfigError, match="protocol must be one of"):
        meta_config_from_dict({"protocol": "official", "inner": TINY_INNER})
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"inner": {**TINY_INNER, "env_id": "derl/GSM8K-v0"}}))
    assert main(["meta", str(recipe), "protocol=derl-official", "method=revolve"]) == 2


def test_the_preset_keeps_the_eval_split_guard(data_root, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"inner": {**TINY_INNER, "env_id": "derl/GSM8K-v0"}}))
    status = main(["meta", str(recipe), "protocol=derl-official", "validation_split=test",
                   "--output", str(tmp_path / "run")])
    assert status == 2 and not (tmp_path / "run" / "candidates.jsonl").exists()


# -- the update: invalid proposals dropped, the group refilled -----------------------------

@pytest.fixture(scope="module")
def official_optimizer(data_root, tmp_path_factory):
    settings = OptimizerConfig(learning_rate=1e-2, max_new_tokens=128, temperature=0.7,
                               decoder="whitelist", invalid="drop", advantage="raw")
    return MetaOptimizer("derl/GSM8K-v0", settings,
                         workdir=tmp_path_factory.mktemp("official"), seed=3)


def _proposal(optimizer: MetaOptimizer, formula: str) -> Proposal:
    ids = optimizer.tokenizer(formula, add_special_tokens=False)["input_ids"]
    return Proposal(formula.replace(" ", ""), "meta-optimizer", extra={
        "completion_ids": ids, "train_ids": ids, "complete": check_formula(formula) is None})


def test_the_official_prompt_and_sampler_reach_the_meta_optimizer(official_optimizer):
    from derl_bench.data.corpus import cold_start_instruction

    prompt = official_optimizer.tokenizer.decode(official_optimizer.prompt_ids)
    assert cold_start_instruction() in prompt and "g4 (length_limit_min_reward)" in prompt
    proposals = official_optimizer.propose(6)
    allowed = set(official_optimizer.whitelist)
    for p in proposals:
        assert set(p.extra["completion_ids"]) <= allowed
        assert len(p.extra["completion_ids"]) <= 128
        assert p.extra["complete"] == official_check(p.extra["formula"])
        assert p.expr == p.extra["formula"].replace(" ", "")


def test_invalid_proposals_leave_the_update_and_the_first_valid_one_refills_the_group(
        official_optimizer):
    opt = official_optimizer
    valid_a, valid_b = _proposal(opt, "g1 + 0.5 * g2"), _proposal(opt, "g1 * g4")
    invalid = _proposal(opt, "g1 + (g2")
    assert not invalid.extra["complete"]
    state = copy.deepcopy(opt.state_dict())
    stats = opt.observe([invalid, valid_a, invalid, valid_b], [-1.0, 0.25, -1.0, 0.5],
                        [False, True, False, True])
    assert stats["meta/valid"] == 2 and stats["meta/padded"] == 2
    dropped = {k: v.clone() for k, v in opt.model.state_dict().items()}
    # The same update on the group the official code builds: the valid ones, then copies of
    # the first valid one with its score.
    opt.load_state_dict(copy.deepcopy(state))
    opt.invalid = "score"
    try:
        opt.observe([valid_a, valid_b, valid_a, valid_a], [0.25, 0.5, 0.25, 0.25])
    finally:
        opt.invalid = "drop"
    assert any(not torch.equal(dropped[k], state["model"][k]) for k in dropped)
    for key, value in opt.model.state_dict().items():
        assert torch.allclose(value, dropped[key]), key
    opt.load_state_dict(copy.deepcopy(state))
    assert opt.observe([invalid, invalid], [-1.0, -1.0], [False, False]) == {
        "meta/valid": 0.0, "meta/padded": 0.0}
    for key, value in opt.model.state_dict().items():
        assert torch.equal(value, state["model"][key]), key


def test_previous_generation_warm_start_is_not_the_best_so_far():
    config = MetaConfig(method="derl-pop", population=2, warm_start_from="previous",
                        inner={**TINY_INNER, "env_id": "derl/Arithmetic-v0"})
    records = [
        {"generation": 0, "index": 0, "status": "scored", "score": 0.9, "checkpoint": "a"},
        {"generation": 1, "index": 1, "status": "scored", "score": 0.2, "checkpoint": "c"},
        {"generation": 1, "index": 0, "status": "scored", "score": 0.2, "checkpoint": "b"},
        {"generation": 1, "index": 2, "status": "invalid", "score": -1.0},
        {"generation": 2, "index": 0, "status": "invalid", "score": -1.0},
    ]
    result = MetaResult(best_checkpoint="a", best_score=0.9, candidates=records)
    assert _warm_start_model(config, result, 0) is None
    assert _warm_start_model(config, result, 1) == "a"
    assert _warm_start_model(config, result, 2) == "b"  # ties go to the lower index
    assert _warm_start_model(config, result, 3) is None  # nothing scored: the base model
    best = MetaConfig(method="derl-pop", population=2,
                      inner={**TINY_INNER, "env_id": "derl/Arithmetic-v0"})
    assert _warm_start_model(best, result, 2) == "a"


# -- whole runs through the command line --------------------------------------------------

def _recipe(tmp_path, env_id: str, **fields) -> str:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "official", "validation_episodes": 2, "eval_levels": [], "executor": "local",
        "progress": False, "seed": 1, "inner": {**TINY_INNER, "env_id": env_id}, **fields}))
    return str(recipe)


def _lines(run) -> list[dict]:
    return [json.loads(line) for line in (run / "candidates.jsonl").read_text().splitlines()]


def test_an_official_derl_run_on_gsm8k_scores_invalid_proposals_minus_one(data_root, tmp_path):
    run = tmp_path / "run"
    status = main(["meta", _recipe(tmp_path, "derl/GSM8K-v0"), "protocol=derl-official",
                   "outer_steps=1", "population=4", "optimizer_sft_steps=4",
                   "--output", str(run)])
    assert status in (0, 1)  # 1: no proposal was valid, so nothing was trained
    saved = yaml.safe_load((run / "config.yaml").read_text())
    optimizer = saved["optimizer"]
    assert optimizer["decoder"] == "whitelist" and optimizer["temperature"] == 0.7
    assert optimizer["max_new_tokens"] == 128 and optimizer["advantage"] == "raw"
    assert optimizer["learning_rate"] == 1e-6 and optimizer["cold_start"] == "paper"
    assert optimizer["sft_steps"] == 4  # the flat override reached the nested field
    assert saved["inner"]["reward_semantics"] == "derl-official"
    lines = _lines(run)
    assert len(lines) == 4
    invalid = [r for r in lines if r["status"] == "invalid"]
    assert invalid, "a cold start of 4 steps writes invalid formulas"
    for record in invalid:
        assert record["score"] == -1.0 and "official expression check" in record["error"]
        assert not (run / "inner" / f"g000-c{record['index']:02d}").exists()
    generation = json.loads((run / "summary.json").read_text())["generations"][0]
    valid = len(lines) - len(invalid)
    assert generation["meta/valid"] == valid
    assert generation["meta/padded"] == (4 - valid if valid else 0)
    state = torch.load(run / "state" / "checkpoint.pt", weights_only=True)
    from transformers import AutoTokenizer

    allowed = set(whitelist_ids(AutoTokenizer.from_pretrained(run / "meta-optimizer")))
    for proposal in state["proposals"]:
        assert len(proposal["extra"]["completion_ids"]) <= 128
        assert set(proposal["extra"]["completion_ids"]) <= allowed


@pytest.fixture(scope="module")
def formula_writer(data_root, tmp_path_factory):
    """A tiny Meta-Optimizer fine-tuned on the official prompt to answer one valid formula or
    one invalid one, about equally often: a real model whose samples are a mix."""
    folder = tmp_path_factory.mktemp("writer")
    writer = MetaOptimizer("derl/Arithmetic-v0",
                           OptimizerConfig(max_new_tokens=128, decoder="whitelist"),
                           workdir=folder, seed=0)
    # No space before a g: " g" is one token of this vocabulary and not on the whitelist.
    texts = [writer.tokenizer(t, add_special_tokens=False)["input_ids"] + [writer.eos_id]
             for t in ("g1+g2", "g1+(g2")]
    writer._fine_tune(texts, 40, seed=0, batch_size=8)
    writer.save(folder / "model")
    return str(folder / "model")


def test_an_official_derl_pop_run_on_arithmetic_warm_starts_from_the_previous_generation(
        formula_writer, tmp_path):
    run = tmp_path / "run"
    status = main(["meta", _recipe(tmp_path, "derl/Arithmetic-v0"), "protocol=derl-official",
                   "method=derl-pop", "outer_steps=3", "population=4",
                   f"optimizer_model={formula_writer}", "optimizer_sft_steps=0",
                   "--output", str(run)])
    assert status == 0
    lines = sorted(_lines(run), key=lambda r: (r["generation"], r["index"]))
    generations = json.loads((run / "summary.json").read_text())["generations"]
    warm = 0
    for generation, stats in enumerate(generations):
        records = [r for r in lines if r["generation"] == generation]
        valid = [r for r in records if r["status"] == "scored"]
        assert all(r["expr"] == "g1+g2" for r in valid)
        for record in records:
            if record["status"] == "invalid":
                assert record["expr"] == "g1+(g2" and record["score"] == -1.0
                assert "run" not in record
        # The update saw the valid proposals and copies of the first one, never an invalid one.
        assert stats["meta/valid"] == len(valid)
        assert stats["meta/padded"] == (4 - len(valid) if valid else 0)
        if generation == 0:
            continue
        previous = [r for r in lines if r["generation"] == generation - 1
                    and r["status"] == "scored"]
        start = (max(previous, key=lambda r: (r["score"], -r["index"]))["checkpoint"]
                 if previous else None)
        assert all(r["start_model"] == start for r in records)
        warm += start is not None
    assert warm >= 1 and any(g["meta/padded"] > 0 for g in generations)
    trained = [r for r in lines if r.get("run") and r["start_model"] is not None]
    inner = yaml.safe_load((tmp_path / "run" / "inner" / trained[0]["run"].rsplit("/", 1)[1]
                            / "config.yaml").read_text())
    assert inner["reward_semantics"] == "derl-official"
    assert inner["data_offset"] == trained[0]["generation"]
    assert inner["model"] == trained[0]["start_model"]
