"""The tiny model built in code, the policy around it, and the transformers backend."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from derl_bench.cli import main
from derl_bench.policies import LLMPolicy, SamplingConfig, TinyModelSpec, init_tiny_model
from derl_bench.policies.tiny import build_tiny_model, build_tiny_tokenizer


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return init_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def test_init_tiny_writes_a_loadable_model_and_tokenizer(tiny_path):
    names = {p.name for p in tiny_path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    assert model.config.vocab_size == len(tokenizer)
    assert 300 < len(tokenizer) <= TinyModelSpec().vocab_size  # BPE stops when merges run out
    assert model.config.num_hidden_layers == 2
    assert sum(p.numel() for p in model.parameters()) < 500_000
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token_id != tokenizer.eos_token_id


def test_tokenizer_round_trips_any_text_and_survives_reloading(tiny_path):
    text = "<think>mug in sink 1</think><action>go to sinkbasin 1</action> \\boxed{42} 雪 ü\n\n"
    reloaded = AutoTokenizer.from_pretrained(tiny_path)
    ids = build_tiny_tokenizer()(text)["input_ids"]
    assert reloaded(text)["input_ids"] == ids
    assert reloaded.decode(ids) == text


def test_chat_template_is_chatml(tiny_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    a = init_tiny_model(tmp_path / "a", TinyModelSpec(seed=3))
    b = init_tiny_model(tmp_path / "b", TinyModelSpec(seed=3))
    c = init_tiny_model(tmp_path / "c", TinyModelSpec(seed=4))
    wa, wb, wc = (AutoModelForCausalLM.from_pretrained(p).model.embed_tokens.weight
                  for p in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_the_tiny_model_is_the_seeded_qwen2_decoder_built_directly():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tiny_tokenizer()
    spec = TinyModelSpec(seed=3)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None)
    torch.manual_seed(spec.seed)
    direct = Qwen2ForCausalLM(config)
    built = build_tiny_model(tokenizer, spec)
    assert built.config.to_dict() == direct.config.to_dict()
    assert built.generation_config.pad_token_id == tokenizer.pad_token_id
    assert built.generation_config.eos_token_id == tokenizer.eos_token_id
    mine, theirs = built.state_dict(), direct.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_init_tiny_refuses_to_overwrite(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        init_tiny_model(tmp_path / "m")
    assert (tmp_path / "m" / "keep.txt").read_text() == "mine"
    assert main(["model", "init-tiny", str(tmp_path / "m")]) == 2


@pytest.mark.parametrize("command", [["init-tiny"], ["init", "--shape", "qwen2.5-narrow"]])
def test_a_folder_in_the_way_names_the_flag_on_the_command_line(tmp_path, capsys, command):
    """The command line names its own flag, the Python function its own argument."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "keep.txt").write_text("mine")
    assert main(["model", *command, str(tmp_path / "m")]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'm'} exists and is not empty (pass --overwrite to replace it)\n")
    with pytest.raises(FileExistsError, match=r"\(pass overwrite=True to replace it\)$"):
        init_tiny_model(tmp_path / "m")
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("command", [["init-tiny"], ["init", "--shape", "qwen2.5-narrow"]])
def test_a_model_path_under_a_file_is_named_as_such(tmp_path, capsys, command):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for target in (afile / "t", afile / "sub" / "t"):
        assert main(["model", *command, str(target)]) == 2
        assert capsys.readouterr().err == f"error: {target} cannot be created: {afile} is a file\n"
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]
    assert afile.read_text() == "mine"


@pytest.mark.parametrize("command", [["init-tiny"], ["init", "--shape", "qwen2.5-narrow"]])
def test_overwrite_replaces_a_model_folder_and_nothing_else(tmp_path, command):
    """``--overwrite`` removes the whole folder, so it must refuse a folder of a user's files
    and a plain file; a model folder is replaced."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    (tmp_path / "file.txt").write_text("mine too")
    for target in ("notes", "file.txt"):
        assert main(["model", *command, str(tmp_path / target), "--overwrite"]) == 2
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"
    assert (tmp_path / "file.txt").read_text() == "mine too"
    model = tmp_path / "model"
    assert main(["model", *command, str(model)]) == 0
    (model / "stale.txt").write_text("from the old model")
    assert main(["model", *command, str(model), "--overwrite"]) == 0
    assert (model / "config.json").is_file() and not (model / "stale.txt").exists()


def test_cli_init_tiny(tmp_path, capsys):
    assert main(["model", "init-tiny", str(tmp_path / "cli"), "--layers", "1", "--seed", "5"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "cli")
    spec = json.loads((tmp_path / "cli" / "tiny_model_spec.json").read_text())
    assert spec["num_hidden_layers"] == 1 and spec["seed"] == 5


def test_policy_generates_completions_that_stop_at_eos(tiny_path):
    policy = LLMPolicy.from_pretrained(tiny_path, family="math",
                                       sampling=SamplingConfig(max_new_tokens=12, seed=0))
    short = policy.math_prompt("What is 1 + 1?")
    long = policy.math_prompt("A much longer problem statement with many more words in it. " * 3)
    gens = policy.generate([short, long, short])
    assert [g.prompt_ids for g in gens] == [short, long, short]
    eos = policy.tokenizer.eos_token_id
    for g in gens:
        assert 1 <= len(g.completion_ids) <= 12
        assert eos not in g.completion_ids[:-1]  # cut at the first end token
        assert g.text == policy.tokenizer.decode(g.completion_ids, skip_special_tokens=True)
    # A sampling seed makes generation reproducible.
    again = policy.generate([short, long, short])
    assert [g.completion_ids for g in again] == [g.completion_ids for g in gens]


def test_policy_parses_actions_per_family(tiny_path):
    agent = LLMPolicy.from_pretrained(tiny_path, family="alfworld")
    math = LLMPolicy.from_pretrained(tiny_path, family="math")
    response = "<think>go</think><action>Open Fridge 1</action>"
    assert agent.parse_action(response) == "open fridge 1"
    assert math.parse_action(response) == response
    with pytest.raises(ValueError):
        LLMPolicy.from_pretrained(tiny_path, family="chess")
