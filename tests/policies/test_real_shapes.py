"""Real-shape models built in code: Qwen2.5's configuration, tokenizer layout and chat template."""

import json

import pytest

from derl_bench.cli import main
from derl_bench.policies import load_model_and_tokenizer
from derl_bench.policies.shapes import QWEN_SPECIAL_TOKENS, SHAPES, ModelShape


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("shapes") / "q05-short"
    assert main(["model", "init", "--shape", "qwen2.5-0.5b-short", str(path)]) == 0
    return path


def test_shapes_are_qwen25s_published_configs():
    # Hidden, intermediate, layers, heads, KV heads of the released Qwen2.5 configs.
    assert SHAPES["qwen2.5-0.5b"] == ModelShape(896, 4864, 24, 14, 2)
    assert (SHAPES["qwen2.5-1.5b"].hidden_size, SHAPES["qwen2.5-1.5b"].intermediate_size,
            SHAPES["qwen2.5-1.5b"].num_hidden_layers, SHAPES["qwen2.5-1.5b"].num_attention_heads,
            SHAPES["qwen2.5-1.5b"].num_key_value_heads) == (1536, 8960, 28, 12, 2)
    # Released model cards: 0.49B, 1.54B and 3.09B parameters.
    assert round(SHAPES["qwen2.5-0.5b"].parameters() / 1e9, 2) == 0.49
    assert round(SHAPES["qwen2.5-1.5b"].parameters() / 1e9, 2) == 1.54
    assert round(SHAPES["qwen2.5-3b"].parameters() / 1e9, 2) == 3.09
    short = SHAPES["qwen2.5-0.5b-short"]
    assert short.num_hidden_layers == 2 and short.hidden_size == 896
    assert short.vocab_size == 151936
    narrow = SHAPES["qwen2.5-narrow"]
    assert (narrow.vocab_size, narrow.head_dim) == (151936, SHAPES["qwen2.5-0.5b"].head_dim)


def test_init_writes_a_folder_that_loads_like_the_hub_model(short_model):
    config = json.loads((short_model / "config.json").read_text())
    assert {k: config[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                   "num_attention_heads", "num_key_value_heads", "vocab_size",
                                   "tie_word_embeddings", "max_position_embeddings")} == {
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 2,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "tie_word_embeddings": True, "max_position_embeddings": 32768}
    assert config["rope_parameters"]["rope_theta"] == 1_000_000.0
    assert (short_model / "model.safetensors").exists()
    model, tokenizer = load_model_and_tokenizer(short_model)
    assert model.config.model_type == "qwen2"
    assert model.get_input_embeddings().weight.shape == (151936, 896)
    assert len(tokenizer) == 151665
    for text, token_id, special in QWEN_SPECIAL_TOKENS:
        assert tokenizer.convert_tokens_to_ids(text) == token_id
        assert tokenizer.added_tokens_decoder[token_id].special == special, text
    assert tokenizer.eos_token_id == 151645 and tokenizer.pad_token_id == 151643
    assert tokenizer.padding_side == "left"


def test_chat_template_is_chatml_with_tools(short_model):
    _, tokenizer = load_model_and_tokenizer(short_model)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                    "helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert (ids[0], ids.count(151644), ids.count(151645)) == (151644, 3, 2)
    assert tokenizer.decode(ids) == text
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "add",
                                                             "arguments": {"a": 1}}}]}
    text = tokenizer.apply_chat_template(messages + [call, {"role": "tool", "content": "4"}],
                                         tools=tools, tokenize=False)
    assert "<tools>\n" + json.dumps(tools[0]) + "\n</tools>" in text
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>" in text
    ids = tokenizer("<tool_call>x</tool_call>", add_special_tokens=False)["input_ids"]
    assert ids[0] == 151657 and ids[-1] == 151658


def test_filler_ids_are_never_produced_by_text(short_model):
    _, tokenizer = load_model_and_tokenizer(short_model)
    text = "Natalia sold 48 clips in April. \\boxed{72} <think>go to fridge 1</think> ü 漢字 🙂"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert max(ids) < 4096


def test_init_refuses_unknown_shapes_and_existing_folders(short_model, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["model", "init", "--shape", "qwen9-1t", str(tmp_path / "x")])
    assert main(["model", "init", "--shape", "qwen2.5-0.5b-short", str(short_model)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (short_model / "model.safetensors").exists()


def test_the_gpu_cost_table_in_the_docs_is_what_its_script_computes():
    import runpy
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    script = runpy.run_path(str(repo / "scripts" / "gpu_costs.py"))
    cost = script["step_cost"](SHAPES["qwen2.5-0.5b"], rows=8, prompt_tokens=224, new_tokens=32)
    assert round(cost["kv_cache_bytes"] / 2**20) == 24
    assert cost["trainable_parameters"] == SHAPES["qwen2.5-0.5b"].parameters()
    table = script["table"]().splitlines()
    assert len(table) == 2 + 3 * 2 * 2 * 2
    docs = (repo / "docs" / "gpu.md").read_text(encoding="utf-8").splitlines()
    start = docs.index(table[0])
    assert docs[start:start + len(table)] == table
