"""``derl-bench model``: build, fine-tune and merge models.

``init-tiny PATH`` writes a tiny random Qwen2-shaped model whose tokenizer is trained in code
(tests and the recipes' ``model: tiny`` default use it); ``init --shape qwen2.5-0.5b PATH``
writes a random model of a real Qwen2.5 architecture (:mod:`derl_bench.policies.shapes`);
``merge`` folds a LoRA adapter checkpoint into its base model; ``rehearse`` runs the training,
meta and evaluation commands at a real shape on this machine
(:mod:`derl_bench.experiments.rehearse`); ``agent-base`` builds a command policy (ALFWorld's by
default) from the searching teacher (:mod:`derl_bench.sft.dagger`).
Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from derl_bench.cli._errors import CommandError


def register(subparsers: Any) -> None:
    """Add ``model init-tiny``, ``init``, ``merge``, ``rehearse``, ``sft`` and
    ``agent-base``."""
    parser = subparsers.add_parser("model", help="create models for training")
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    tiny = sub.add_parser("init-tiny", help="write a tiny random-initialised model to PATH")
    tiny.add_argument("path", metavar="PATH", help="output directory (must be empty or absent)")
    tiny.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    tiny.add_argument("--layers", type=int, default=2)
    tiny.add_argument("--hidden-size", type=int, default=64)
    tiny.add_argument("--vocab-size", type=int, default=1024)
    tiny.add_argument("--overwrite", action="store_true", help="replace an existing PATH")
    tiny.set_defaults(func=run_init_tiny)
    from derl_bench.policies.shapes import SHAPES

    init = sub.add_parser(
        "init", help="write a random model of a real architecture (e.g. Qwen2.5-0.5B) to PATH",
        description="Write a HF model folder with the exact Qwen2.5 configuration of --shape, "
        "random weights and a tokenizer built in code with Qwen2.5's vocabulary size, special "
        "tokens and chat template (see docs/gpu.md for what differs from the released one).")
    init.add_argument("path", metavar="PATH", help="output directory (must be empty or absent)")
    init.add_argument("--shape", required=True, choices=sorted(SHAPES))
    init.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    init.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                      help="storage dtype of the weights (bfloat16, as released)")
    init.add_argument("--overwrite", action="store_true", help="replace an existing PATH")
    init.set_defaults(func=run_init_shape)
    merge = sub.add_parser(
        "merge", help="fold a LoRA adapter checkpoint into its base model",
        description="Load the adapter checkpoint CHECKPOINT with its base model, add "
        "(alpha/r) B A to every adapted weight and write a whole model folder to PATH.")
    merge.add_argument("checkpoint", metavar="CHECKPOINT", help="a LoRA run's checkpoint")
    merge.add_argument("path", metavar="PATH", help="output directory (must be empty or absent)")
    merge.add_argument("--overwrite", action="store_true", help="replace an existing PATH")
    merge.set_defaults(func=run_merge)
    rehearse = sub.add_parser(
        "rehearse", help="run train, meta and evaluate at a real shape on this machine",
        description="Build a random model of --shape under OUTPUT and run derl-bench train "
        "(GSM8K and ALFWorld, 2 steps), meta (1 generation x 2 candidates x 1 inner step) and "
        "evaluate (4 episodes), full and LoRA, on the lean path and on transformers, in float32 "
        "and bfloat16; record seconds, peak RSS, KV-cache size and greedy agreement of the two "
        "paths in OUTPUT/rehearsal.json (docs/gpu.md).")
    rehearse.add_argument("output", metavar="OUTPUT", help="working and report directory")
    rehearse.add_argument("--shape", default="qwen2.5-0.5b-short", choices=sorted(SHAPES))
    rehearse.add_argument("--lora", choices=("off", "on", "both"), default="both")
    rehearse.add_argument("--paths", default="lean,transformers",
                          help="comma-separated: lean, transformers")
    rehearse.add_argument("--dtypes", default="float32,bfloat16",
                          help="comma-separated: float32, bfloat16")
    rehearse.add_argument("--no-meta", action="store_true", help="skip derl-bench meta")
    rehearse.add_argument("--no-agents", action="store_true", help="skip the ALFWorld run")
    rehearse.add_argument("--device", default="cpu", help="where every model runs (e.g. cuda)")
    rehearse.set_defaults(func=run_rehearse)
    sft = sub.add_parser(
        "sft", help="warm-start a policy by supervised fine-tuning on an env's demonstrations",
        description="Fine-tune a model on an env's own demonstrations (math family: reference "
        "solutions; ALFWorld: expert walkthroughs) with the prompts GRPO uses, and save it to "
        "PATH (written whole or not at all).")
    sft.add_argument("path", metavar="PATH", help="output directory (must be empty or absent)")
    sft.add_argument("--env", required=True, help="env id, e.g. derl/Arithmetic-v0")
    sft.add_argument("--model", default="tiny", help="HF name, local path, or tiny (default)")
    sft.add_argument("--split", default="train")
    sft.add_argument("--level", default=None, help="agent envs: L0, L1 or L2")
    sft.add_argument("--steps", type=int, default=200)
    sft.add_argument("--batch-size", type=int, default=32)
    sft.add_argument("--learning-rate", type=float, default=3e-3)
    sft.add_argument("--format-dropout", type=float, default=0.0,
                     help="math: probability of dropping the final \\boxed{} of a demonstration")
    sft.add_argument("--seed", type=int, default=0)
    sft.add_argument("--tool-calls", action="store_true",
                     help="agents: demonstrate each walkthrough step as a call of the act tool "
                     "(the chat TRL's multi-turn trainer plays, trainer: trl) instead of "
                     "<think>...<action>")
    sft.set_defaults(func=run_sft_command)
    base = sub.add_parser(
        "agent-base", help="build a command policy (ALFWorld's by default) from the searching "
        "teacher (behaviour cloning, then DAgger)",
        description="Train a small command model on the env's compact state (its card's "
        "commands hook) to pick the searching teacher's commands: behaviour cloning on teacher "
        "episodes with random detours, then DAgger rounds (derl_bench.sft.dagger). Seeded: the "
        "same command writes the same weights. PATH is written whole or not at all, with "
        "dagger.json.")
    base.add_argument("path", metavar="PATH", help="output directory (must be empty or absent)")
    base.add_argument("--env", default="derl/ALFWorld-v0",
                      help="an agent env whose card has a commands hook (default: %(default)s)")
    base.add_argument("--level", default="L0", choices=("L0", "L1", "L2"),
                      help="whose training games (L2: task types 1-4 only)")
    base.add_argument("--seed", type=int, default=0)
    base.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                      help="other DaggerConfig fields, e.g. bc_updates=2000 rounds=4")
    base.set_defaults(func=run_agent_base)


def run_init_tiny(args: argparse.Namespace) -> int:
    from derl_bench.policies.tiny import TinyModelSpec, init_tiny_model

    if args.layers < 1 or args.hidden_size < 8 or args.hidden_size % 4 or args.vocab_size < 300:
        raise CommandError("need --layers >= 1, --hidden-size a multiple of 4 (>= 8) and "
                           "--vocab-size >= 300")
    spec = TinyModelSpec(vocab_size=args.vocab_size, hidden_size=args.hidden_size,
                         intermediate_size=2 * args.hidden_size,
                         num_hidden_layers=args.layers, seed=args.seed)
    return _write_folder(lambda: init_tiny_model(args.path, spec, overwrite=args.overwrite))


def _write_folder(write: Callable[[], Path]) -> int:
    """Run ``write`` (which writes a model folder atomically) and print the folder; a folder
    in the way or a refused source is a :class:`CommandError` or an ``OSError``."""
    from derl_bench.policies.tiny import ModelFolderExistsError

    try:
        path = write()
    except ModelFolderExistsError as err:  # the library names its argument, not our flag
        raise CommandError(str(err.replace_with("--overwrite"))) from err
    except ValueError as err:
        raise CommandError(str(err)) from err
    print(path)
    return 0


def run_init_shape(args: argparse.Namespace) -> int:
    from derl_bench.policies.shapes import init_shape_model

    return _write_folder(lambda: init_shape_model(
        args.path, args.shape, seed=args.seed, dtype=args.dtype, overwrite=args.overwrite))


def run_merge(args: argparse.Namespace) -> int:
    from derl_bench.policies.lora import merge_adapter

    return _write_folder(lambda: merge_adapter(args.checkpoint, args.path,
                                               overwrite=args.overwrite))


def run_rehearse(args: argparse.Namespace) -> int:
    from derl_bench.experiments.rehearse import DTYPES, PATHS, format_table, rehearse

    paths = tuple(p for p in args.paths.split(",") if p)
    dtypes = tuple(d for d in args.dtypes.split(",") if d)
    if not paths or any(p not in PATHS for p in paths) or not dtypes or \
            any(d not in DTYPES for d in dtypes):
        raise CommandError(f"--paths takes {', '.join(PATHS)} and --dtypes {', '.join(DTYPES)}")
    loras = {"off": (False,), "on": (True,), "both": (False, True)}[args.lora]
    results = rehearse(args.shape, Path(args.output), loras, paths, dtypes,
                       meta=not args.no_meta, agents=not args.no_agents, device=args.device)
    print(format_table(results))
    for r in results:
        if not r.ok:
            print(f"\n{r.name} lora={r.lora} {r.path} {r.dtype} failed:\n{r.error}",
                  file=sys.stderr)
    return 0 if all(r.ok for r in results) else 1


def run_sft_command(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from derl_bench.cli._runs import hold_output
    from derl_bench.sft import SFTConfig, run_sft

    if args.env not in gym.registry:
        raise CommandError(f"unknown env {args.env!r}")
    try:
        config = SFTConfig(env_id=args.env, output=args.path, model=args.model,
                           split=args.split, level=args.level, steps=args.steps,
                           batch_size=args.batch_size, learning_rate=args.learning_rate,
                           format_dropout=args.format_dropout, seed=args.seed)
        demos = None
        if args.tool_calls:
            from derl_bench.family import family_spec
            from derl_bench.grpo.trl import tool_call_demos

            if not family_spec(args.env).multi_turn:
                raise ValueError(f"--tool-calls needs an agent env, not {args.env!r}")
            demos = tool_call_demos
        # The model folder appears whole at the end: it is held from beside it.
        with hold_output(args.path, args, whole=True):
            report = run_sft(config, progress=True, demos=demos)
    except ValueError as err:
        raise CommandError(str(err)) from err
    print(f"{args.path}  loss {report['loss_first']:.3f} -> {report['loss_last']:.3f}")
    return 0


def run_agent_base(args: argparse.Namespace) -> int:
    import dataclasses

    import yaml

    from derl_bench.cli._runs import hold_output
    from derl_bench.sft.dagger import DaggerConfig, run_dagger

    fields = {f.name: f for f in dataclasses.fields(DaggerConfig)}
    set_by_flags = {"output", "env_id", "level", "seed"}
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or key not in fields or key in set_by_flags:
            raise CommandError(f"--set takes KEY=VALUE with KEY one of "
                               f"{', '.join(sorted(set(fields) - set_by_flags))}; got {item!r}")
        overrides[key] = yaml.safe_load(value)
    try:
        config = DaggerConfig(output=args.path, env_id=args.env, level=args.level,
                              seed=args.seed, **overrides)
        _check_agent_base(config)
        with hold_output(args.path, args, whole=True):
            record = run_dagger(config, log=print)
    except (ValueError, TypeError) as err:
        raise CommandError(str(err)) from err
    last = record["rounds"][-1] if record["rounds"] else record["bc"]
    print(f"{args.path}  {record['parameters']:,} parameters, {record['seconds']:.0f} s; "
          f"last round's success {last['success']:.3f}")
    return 0


def _check_agent_base(config: Any) -> None:
    """Refuse settings that cannot train, before anything is loaded."""
    counts = ("pool", "bc_games", "bc_updates", "batch_size", "envs", "num_threads",
              "max_episode_steps")
    for name in counts:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    for name in ("rounds", "round_games", "round_updates"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    for name in ("detour_share", "teacher_share", "teacher_decay"):
        value = getattr(config, name)
        if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    if config.view is not None and not isinstance(config.view, str):
        raise ValueError(f"view must be the name of a view, got {config.view!r}")
    rate = config.learning_rate
    if not isinstance(rate, int | float) or not 0.0 < rate < float("inf"):
        raise ValueError(f"learning_rate must be a finite number > 0, got {rate!r}")
