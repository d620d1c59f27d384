"""Settings are checked before any work: a bad one is refused with a message naming it and what
it may be, exit 2 on the command line, and nothing written (docs/guarantees.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from derl_bench.cli import main
from derl_bench.grpo.config import ConfigError, load_config
from derl_bench.meta import load_meta_config

REPO = Path(__file__).resolve().parents[1]
GSM8K = str(REPO / "baselines" / "gsm8k-outcome.yaml")
META = str(REPO / "baselines" / "meta-derl-gsm8k.yaml")


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], output: Path) -> str:
    """Run the command line; check that it exits 2 without a traceback and leaves ``output``
    absent; return what it printed on stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert not output.exists(), sorted(p.name for p in output.rglob("*"))
    return err


def test_a_recipe_that_sets_a_key_twice_is_refused(tmp_path, capsys):
    recipe = tmp_path / "twice.yaml"
    recipe.write_text("env_id: derl/Arithmetic-v0\nsteps: 2\nseed: 0\nsteps: 5\n")
    with pytest.raises(ConfigError, match=r"twice.yaml, line 4: 'steps' is set twice \(first "
                                          r"on line 2\)"):
        load_config(recipe)
    err = refused(capsys, ["train", str(recipe), "--output", str(tmp_path / "run")],
                  tmp_path / "run")
    assert "line 4: 'steps' is set twice" in err
    # A meta recipe's sections are held to the same rule, and so is an override's mapping.
    meta = tmp_path / "meta.yaml"
    meta.write_text("method: random\ninner:\n  env_id: derl/Arithmetic-v0\n  model: tiny\n"
                    "  model: other\n")
    with pytest.raises(ConfigError, match="line 5: 'model' is set twice"):
        load_meta_config(meta)
    err = refused(capsys, ["meta", str(meta), "--output", str(tmp_path / "run")],
                  tmp_path / "run")
    assert "meta.yaml, line 5: 'model' is set twice (first on line 4)" in err
    with pytest.raises(ConfigError, match="'grader_timeout' is set twice"):
        load_config(GSM8K, ["env_kwargs={grader_timeout: 1, grader_timeout: 2}"])


@pytest.mark.parametrize(("override", "message"), [
    ("learning_rate=.inf", "learning_rate must be a finite number > 0, got inf"),
    ("learning_rate=.nan", "learning_rate must be a finite number > 0, got nan"),
    ("max_grad_norm=-1", "max_grad_norm must be a number > 0, got -1"),
    ("temperature=-1", "temperature must be a finite number > 0, got -1 (GRPO learns"),
    ("temperature=0", "at temperature 0, greedy decoding, they are all alike"),
    ("top_p=0", "top_p must be in (0, 1], got 0 (1 keeps every token)"),
    ("num_threads=0", "num_threads must be a whole number >= 1, got 0"),
    ("max_new_tokens=0", "max_new_tokens must be a whole number >= 1, got 0"),
    ("seed=-1", "seed must be a whole number >= 0, got -1"),
])
def test_train_refuses_a_bad_number_before_any_work(override, message, tmp_path, capsys):
    with pytest.raises(ConfigError) as raised:
        load_config(GSM8K, [override])
    assert message in str(raised.value)
    err = refused(capsys, ["train", GSM8K, "--output", str(tmp_path / "run"), override],
                  tmp_path / "run")
    assert message in err


def test_sampling_settings_are_checked_where_they_are_defined():
    from derl_bench.policies import SamplingConfig

    assert SamplingConfig(8, temperature=0.0).temperature == 0.0  # greedy decoding
    for bad, message in ((dict(temperature=-1.0), "temperature must be a finite number >= 0, "
                                                  "got -1.0 (0 decodes greedily)"),
                         (dict(top_p=0.0), "top_p must be in (0, 1], got 0.0"),
                         (dict(max_new_tokens=0), "max_new_tokens must be a whole number >= 1"),
                         (dict(seed=-3), "seed must be a whole number >= 0, got -3")):
        with pytest.raises(ValueError, match=re.escape(message)):
            SamplingConfig(**bad)


@pytest.mark.parametrize(("override", "message"), [
    ("device=gpu", "device must be cpu, cuda or cuda:N (N a GPU's index), got 'gpu'"),
    ("dtype=float99", "dtype must be one of auto, float32, bfloat16, float16 (or empty: "
                      "float32), got 'float99'"),
    ("backend=onnx", "backend must be one of ('transformers', 'vllm'), got 'onnx'"),
    ("env_kwargs={split: test}", "env_kwargs may not set split: give it as the config's own "
                                 "split field (split: test)"),
    ("env_kwargs={level: L1}", "env_kwargs may not set level: give it as the config's own "
                               "level field (level: L1)"),
    ("level=L7", "level: derl/GSM8K-v0 is not made at a level: its one level, L0, names its "
                 "eval set"),
])
def test_train_refuses_an_unknown_name_before_any_work(override, message, tmp_path, capsys):
    with pytest.raises(ConfigError) as raised:
        load_config(GSM8K, [override])
    assert message in str(raised.value)
    err = refused(capsys, ["train", GSM8K, "--output", str(tmp_path / "run"), override],
                  tmp_path / "run")
    assert message in err


def test_an_agent_level_must_be_on_the_card(tmp_path, capsys):
    recipe = str(REPO / "baselines" / "alfworld-outcome.yaml")
    message = "level: derl/ALFWorld-v0 has no level 'L7'; its card's levels are L0, L1, L2"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(recipe, ["level=L7"])
    assert message in refused(capsys, ["train", recipe, "--output", str(tmp_path / "run"),
                                       "level=L7"], tmp_path / "run")


def test_a_device_this_machine_lacks_is_named(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = load_config(GSM8K, ["device=cuda"])  # a recipe may be written for another machine
    with pytest.raises(ConfigError, match="device 'cuda': this machine has no CUDA GPU"):
        config.check_machine()
    err = refused(capsys, ["train", GSM8K, "--output", str(tmp_path / "run"), "device=cuda:0"],
                  tmp_path / "run")
    assert "device 'cuda:0': this machine has no CUDA GPU that torch can use" in err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    err = refused(capsys, ["train", GSM8K, "--output", str(tmp_path / "run"), "device=cuda:2"],
                  tmp_path / "run")
    assert "device 'cuda:2': this machine's CUDA GPUs are cuda:0 to cuda:1" in err


def test_the_vllm_backend_without_vllm_is_named(tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(ConfigError, match="backend 'vllm' needs the vllm package"):
        load_config(GSM8K, ["backend=vllm"]).check_machine()
    err = refused(capsys, ["train", GSM8K, "--output", str(tmp_path / "run"), "backend=vllm"],
                  tmp_path / "run")
    assert "pip install 'derl-bench[vllm]'" in err


@pytest.mark.parametrize(("override", "message"), [
    ("eval_levels=[L7]", "eval_levels: derl/GSM8K-v0 has no level 'L7'; its card's levels are "
                         "L0"),
    ("optimizer.learning_rate=.inf", "optimizer.learning_rate must be a finite number > 0, got "
                                     "inf"),
    ("optimizer.learning_rate=0", "(a Meta-Optimizer that never learns is method: "
                                  "derl-frozen)"),
    ("optimizer.temperature=-1", "optimizer.temperature must be a finite number > 0, got -1"),
    ("optimizer.max_new_tokens=0", "optimizer.max_new_tokens must be a whole number >= 1"),
    ("inner.learning_rate=.inf", "inner: learning_rate must be a finite number > 0, got inf"),
    ("inner.env_kwargs={split: test}", "inner: env_kwargs may not set split"),
    ("validation_temperature=-1", "validation_temperature must be a finite number >= 0, got -1 "
                                  "(0 decodes greedily)"),
    ("seed=-1", "seed must be a whole number >= 0, got -1"),
    ("validation_seed=-1", "validation_seed must be a whole number >= 0, got -1"),
    ("inner.device=tpu", "inner: device must be cpu, cuda or cuda:N"),
])
def test_meta_refuses_a_bad_setting_before_any_work(override, message, tmp_path, capsys):
    with pytest.raises(ConfigError) as raised:
        load_meta_config(META, [override])
    assert message in str(raised.value)
    err = refused(capsys, ["meta", META, "--output", str(tmp_path / "run"), override],
                  tmp_path / "run")
    assert f"error: {message}" in err or message in err


def test_the_headline_levels_default_to_the_cards(tmp_path):
    assert load_meta_config(META).eval_levels == ["L0"]  # GSM8K's one level, its test set
    assert load_meta_config(META, ["eval_levels=[]"]).eval_levels == []
    assert load_meta_config(META, ["inner.env_id=derl/Arithmetic-v0"]).eval_levels == [
        "L0", "L1", "L2"]


def test_meta_names_a_device_this_machine_lacks(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    err = refused(capsys, ["meta", META, "--output", str(tmp_path / "run"),
                           "inner.device=cuda"], tmp_path / "run")
    assert "error: inner: device 'cuda': this machine has no CUDA GPU" in err
    # Inner runs on a Ray cluster elsewhere are that cluster's to check; the Meta-Optimizer
    # still runs here, on the inner runs' device.
    remote = load_meta_config(META, ["inner.device=cuda", "executor=ray",
                                     "ray_address=ray://head:10001"])
    with pytest.raises(ConfigError, match="the Meta-Optimizer runs here, on inner.device"):
        remote.check_machine()
    load_meta_config(META, ["inner.device=cuda", "executor=ray", "method=random",
                            "ray_address=ray://head:10001"]).check_machine()


@pytest.mark.parametrize(("args", "api", "message"), [
    (["--learning-rate", "inf"], {"learning_rate": float("inf")},
     "learning_rate must be a finite number > 0, got inf"),
    (["--learning-rate", "-0.1"], {"learning_rate": -0.1},
     "learning_rate must be a finite number > 0, got -0.1"),
    (["--seed", "-1"], {"seed": -1}, "seed must be a whole number >= 0, got -1"),
    (["--level", "L1"], {"level": "L1"},
     "level: derl/Arithmetic-v0 is not made at a level: its levels, L0, L1, L2, name its eval "
     "sets"),
])
def test_model_sft_refuses_a_bad_setting_before_any_work(args, api, message, tmp_path, capsys):
    from derl_bench.sft import SFTConfig

    out = tmp_path / "base"
    err = refused(capsys, ["model", "sft", str(out), "--env", "derl/Arithmetic-v0", *args], out)
    assert f"error: {message}" in err
    assert not list(tmp_path.iterdir())  # no staging folder beside it either
    with pytest.raises(ValueError, match=re.escape(message)):
        SFTConfig(env_id="derl/Arithmetic-v0", output=str(out), **api)


def test_sft_settings_without_an_option_are_checked_too(tmp_path):
    from derl_bench.sft import SFTConfig

    with pytest.raises(ValueError, match="num_threads must be a whole number >= 1, got 0"):
        SFTConfig(env_id="derl/Arithmetic-v0", output=str(tmp_path), num_threads=0)
    with pytest.raises(ValueError, match="env_kwargs may not set split"):
        SFTConfig(env_id="derl/Arithmetic-v0", output=str(tmp_path),
                  env_kwargs={"split": "L0-eval"})


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "random", "--seed", "-1"],
     "error: seed must be a whole number >= 0, got -1 (episode i is seeded seed + i)"),
    (["--policy", "llm:tiny", "--device", "gpu"],
     "error: device must be cpu, cuda or cuda:N (N a GPU's index), got 'gpu'"),
    (["--policy", "llm:tiny", "--max-new-tokens", "0"],
     "error: max_new_tokens must be a whole number >= 1, got 0"),
])
def test_evaluate_refuses_a_bad_setting_before_any_work(args, message, tmp_path, capsys):
    from derl_bench.evaluation import ProtocolError, evaluate

    out = tmp_path / "out"
    err = refused(capsys, ["evaluate", "--env", "derl/Arithmetic-v0", "--level", "L0",
                           "--limit", "2", "--no-progress", "--output", str(out / "r.json"),
                           "--trajectories", str(out / "t.jsonl"), *args], out)
    assert message in err
    options = {"--seed": "base_seed", "--device": "device", "--max-new-tokens": "max_new_tokens"}
    value: object = args[3] if args[2] == "--device" else int(args[3])
    with pytest.raises(ProtocolError, match=re.escape(message.removeprefix("error: "))):
        evaluate("derl/Arithmetic-v0", "L0", args[1], limit=2, **{options[args[2]]: value})


def test_evaluate_names_a_device_this_machine_lacks(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "out"
    err = refused(capsys, ["evaluate", "--env", "derl/Arithmetic-v0", "--level", "L0",
                           "--policy", f"llm:{tmp_path / 'model'}", "--device", "cuda",
                           "--output", str(out / "r.json")], out)
    assert "error: device 'cuda': this machine has no CUDA GPU" in err


TINY_ARITHMETIC = {"env_id": "derl/Arithmetic-v0", "model": "tiny", "group_size": 2,
                   "prompts_per_step": 1, "max_new_tokens": 4, "tensorboard": False,
                   "progress": False, "kl_coef": 0.0,
                   # differs between samples even for a random model, so the first step moves
                   "meta_reward": "outcome - 0.01 * response_length"}


def test_a_run_whose_loss_turns_non_finite_stops_and_names_its_last_good_checkpoint(
        tmp_path, capsys):
    import yaml

    from derl_bench.grpo.checkpoint import list_checkpoints

    # A finite learning rate so large that the first step throws every weight to ~1e30: the
    # second step's logits overflow and its loss is NaN.
    recipe = tmp_path / "huge.yaml"
    recipe.write_text(yaml.safe_dump({**TINY_ARITHMETIC, "steps": 2, "learning_rate": 1e30}))
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--output", str(run)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "training diverged in step 2 of 2: the loss is nan" in err
    assert f"its last good checkpoint (finite weights) is {run / 'checkpoints' / 'step-1'}" in err
    assert [p.name for p in list_checkpoints(run)] == ["step-1"]  # no NaN weights saved


def test_the_api_raises_when_training_diverges(tmp_path):
    from derl_bench.grpo.config import config_from_dict
    from derl_bench.grpo.trainer import train
    from derl_bench.grpo.update import DivergedError

    config = config_from_dict({**TINY_ARITHMETIC, "steps": 2, "learning_rate": 1e30,
                               "save_every": 0, "output_dir": str(tmp_path / "run")})
    with pytest.raises(DivergedError, match=r"step 2 of 2: .* it had saved no checkpoint"):
        train(config)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_population_that_diverges_stops_too(tmp_path):
    from derl_bench.family import resolve_family
    from derl_bench.grpo.config import compile_run_reward, config_from_dict
    from derl_bench.grpo.population import train_population
    from derl_bench.grpo.update import DivergedError

    configs = [config_from_dict({**TINY_ARITHMETIC, "steps": 2, "learning_rate": 1e30,
                                 "meta_reward": reward, "output_dir": str(tmp_path / f"m{i}")})
               for i, reward in enumerate(["-response_length", "outcome - response_length"])]
    with pytest.raises(DivergedError, match=re.escape(
            f"step 2 of 2: the loss is nan and the gradient norm nan; the run stopped without "
            f"saving that step, and its last good checkpoint (finite weights) is "
            f"{tmp_path / 'm0' / 'checkpoints' / 'step-1'}")):
        family = resolve_family(configs[0].env_id)
        train_population(configs, [compile_run_reward(c, family) for c in configs], family)

def test_fine_tuning_that_diverges_stops_and_saves_nothing(tmp_path, capsys):
    from derl_bench.grpo.update import DivergedError
    from derl_bench.sft import SFTConfig, run_sft

    out = tmp_path / "base"
    err = refused(capsys, ["model", "sft", str(out), "--env", "derl/Arithmetic-v0", "--steps",
                           "3", "--batch-size", "2", "--learning-rate", "1e30"], out)
    assert "error: fine-tuning diverged in step 2 of 3: the loss is nan" in err
    assert not list(tmp_path.iterdir())
    with pytest.raises(DivergedError, match="nothing was saved"):
        run_sft(SFTConfig(env_id="derl/Arithmetic-v0", output=str(out), steps=3, batch_size=2,
                          learning_rate=1e30))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("field", "text", "value", "message"), [
    ("learning_rate", ".inf", float("inf"), "learning_rate must be a finite number > 0, got inf"),
    ("max_grad_norm", "-1", -1, "max_grad_norm must be a number > 0, got -1"),
    ("num_threads", "0", 0, "num_threads must be a whole number >= 1, got 0"),
])
def test_a_command_policy_recipe_is_checked_too(field, text, value, message, tmp_path, capsys):
    from derl_bench.grpo.commands import CommandGRPOConfig

    recipe = tmp_path / "meta.yaml"
    recipe.write_text("method: random\npopulation: 2\neval_levels: []\n"
                      "inner: {env_id: derl/ALFWorld-v0, model: tiny, level: L0}\n")
    err = refused(capsys, ["meta", str(recipe), "--output", str(tmp_path / "run"),
                           f"inner_commands={{steps: 1, {field}: {text}}}"], tmp_path / "run")
    assert f"error: inner_commands: {message}" in err
    with pytest.raises(ValueError, match=re.escape(message)):
        CommandGRPOConfig(model="base", output_dir=str(tmp_path / "run"),
                          env_id="derl/ALFWorld-v0", **{field: value})
