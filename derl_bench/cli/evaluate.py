"""``derl-bench evaluate``: run a policy on one env and level, write a result record.

    derl-bench evaluate --env derl/ALFWorld-v0 --level L1 --policy random --output rec.json
    derl-bench evaluate --env derl/GSM8K-v0 --level L0 --policy mypkg.agent:act --num-envs 4
    derl-bench evaluate --env derl/ALFWorld-v0 --level L0 --commands runs/alfworld-base \
        --method teacher-dagger --train-seed 0 --checkpoint final --output rec.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from derl_bench.cli._errors import (
    RECIPE_MAX_BYTES,
    CommandError,
    require_distinct,
    require_input,
    require_output,
)

if TYPE_CHECKING:
    from derl_bench.evaluation.families import FamilyAdapter


def register(subparsers: Any) -> None:
    """Add the ``evaluate`` subcommand."""
    p = subparsers.add_parser(
        "evaluate",
        help="run a policy on a level's eval set and write a result record",
        description="Run every episode of the level's eval set (in manifest order, episode i "
                    "seeded base+i) and write a versioned result record (docs/evaluation.md).",
    )
    p.add_argument("--env", required=True, help="env id, e.g. derl/ALFWorld-v0")
    p.add_argument("--level", required=True, choices=("L0", "L1", "L2"))
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--policy",
                       help="random | oracle | stall (ScienceWorld) | majority (math) | "
                            "llm:MODEL | module:function | file.py:function")
    which.add_argument("--commands", type=Path, metavar="MODEL_DIR",
                       help="a command policy's model folder (ALFWorld): it reads the compact "
                            "state and picks among the admissible commands, greedily (or "
                            "sampled with --temperature); the record's policy_interface is "
                            "compact-constrained. Needs --method and --checkpoint")
    p.add_argument("--output", type=Path, help="result record path (default: print to stdout)")
    p.add_argument("--trajectories", type=Path, help="also write a per-episode JSONL log here")
    p.add_argument("--num-envs", type=int, default=1, help="parallel envs (worker processes)")
    p.add_argument("--limit", type=int,
                   help="run only the first N episodes (a quick check; such a record does not "
                        "validate for a leaderboard)")
    p.add_argument("--seed", type=int, default=0,
                   help="base seed (episode i uses seed + i); with --commands --temperature, "
                        "the seed of the draws")
    p.add_argument("--temperature", type=float, metavar="T",
                   help="with --commands: draw each command from softmax(log p / T) over the "
                        "admissible commands (1 is the distribution command GRPO trains) "
                        "instead of taking the likeliest; the policy spec records T and --seed")
    p.add_argument("--method", help="method name for the record (default: the policy's)")
    p.add_argument("--train-seed", type=int, metavar="N",
                   help="with --commands: the training run's seed, named in the method "
                        "('derl (seed 2)', filed as derl-s2-L0.json)")
    p.add_argument("--model", help="model name for the record (default: the policy's)")
    p.add_argument("--recipe", type=Path,
                   help="training recipe file: cited by its path and sha256 under baselines/ "
                        "or the board's evidence folder, else its settings go into the record")
    p.add_argument("--meta-reward", help="the Meta-Reward expression the policy was trained with")
    p.add_argument("--checkpoint", metavar="RULE",
                   help="which weights are evaluated, in words (e.g. 'final', 'step 150', "
                        "'best validation success'); a board requires it for trained policies")
    p.add_argument("--protocol", choices=("strict", "rlvmr"), default="strict",
                   help="strict (default; what the boards rank) or rlvmr: RLVMR's validation "
                        "(128 seeded draws for ScienceWorld with --seed as its env.seed, the "
                        "100-tick limit, its prompt, temperature 0.4 and action parsing)")
    p.add_argument("--max-new-tokens", type=int, default=512,
                   help="cap on each response of an llm: policy")
    p.add_argument("--device", default="cpu",
                   help="where an llm: policy runs: cpu (default), cuda, cuda:1, ...")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="an llm: policy's dtype (default float32)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def _meta_reward(expression: str | None, adapter: FamilyAdapter) -> dict[str, str] | None:
    if not expression:
        return None
    from derl_bench.evaluation.record import meta_reward_block

    return meta_reward_block(expression, adapter)


def _check_files(args: argparse.Namespace) -> None:
    """Refuse, before any episode runs, a recipe that is not a readable regular file (a FIFO
    or a device would block the hash or never end), an output that cannot be written (the
    result would be computed and then lost), and two options that name one file."""
    if args.recipe is not None:
        require_input("--recipe", args.recipe, RECIPE_MAX_BYTES)
    for option, path in (("--output", args.output), ("--trajectories", args.trajectories)):
        if path is not None:
            require_output(option, path)
    require_distinct({"--recipe": args.recipe, "--output": args.output,
                      "--trajectories": args.trajectories})


def _check_names(args: argparse.Namespace) -> None:
    from derl_bench.evaluation.schema import RESULT_SCHEMA, schema_errors

    setup = RESULT_SCHEMA["properties"]["setup"]["properties"]
    for name, schema in (("method", RESULT_SCHEMA["properties"]["method"]),
                         ("model", RESULT_SCHEMA["properties"]["model"]),
                         ("checkpoint", setup["checkpoint"])):
        value = getattr(args, name)
        errors = [] if value is None else schema_errors(value, schema, f"--{name}")
        if errors:
            raise CommandError(f"{errors[0]} (use plain words: a leaderboard rejects anything "
                               "else)")


def run(args: argparse.Namespace) -> int:
    """Run the evaluation; exit status 0 on success. Bad input raises: a refused option before
    any episode, damaged data (a file that differs from the data catalogue, or does not parse)
    where it is read."""
    from derl_bench.evaluation import adapter_for, check_settings, evaluate
    from derl_bench.evaluation.record import recipe_block
    from derl_bench.files import write_json_atomic, write_jsonl_atomic
    from derl_bench.policies.loading import model_problem
    from derl_bench.progress import progress_bar

    if args.num_envs < 1 or (args.limit is not None and args.limit < 1):
        raise CommandError("--num-envs and --limit must be positive")
    check_settings(base_seed=args.seed, max_new_tokens=args.max_new_tokens, device=args.device,
                   dtype=args.dtype,
                   loads_model=bool(args.policy and args.policy.startswith("llm:")))
    if args.commands is None and args.train_seed is not None:
        raise CommandError("--train-seed goes with --commands (name the seed in --method)")
    if args.commands is None and args.temperature is not None:
        raise CommandError("--temperature goes with --commands (an llm: policy's sampling is "
                           "its spec's: llm:MODEL,temperature=T)")
    _check_files(args)
    _check_names(args)
    if args.commands is not None:
        return _run_commands(args)
    if args.policy.startswith("llm:"):
        problem = model_problem(args.policy[len("llm:"):])
        if problem:
            raise CommandError(f"--policy: {problem}")
    try:
        adapter = adapter_for(args.env)  # the env's rules and family, handed to the evaluation
        eval_set = adapter.eval_set(args.level, protocol=args.protocol, seed=args.seed)
        meta_reward = _meta_reward(args.meta_reward, adapter)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    try:
        recipe = recipe_block(args.recipe, benchmark=adapter.benchmark)
    except ValueError as exc:
        raise CommandError(f"--recipe: {exc}") from exc
    total = min(eval_set.size, args.limit) if args.limit else eval_set.size
    bar = progress_bar(total=total, desc=f"{args.env} {args.level}", unit="ep",
                       disable=args.no_progress, file=sys.stderr)
    done = {"episodes": 0, "successes": 0}

    def tick(episode: Any) -> None:
        done["episodes"] += 1
        done["successes"] += bool(episode.success)
        bar.update(1)
        bar.set_postfix(success=f"{done['successes'] / done['episodes']:.3f}", refresh=False)

    try:
        record, results = evaluate(
            adapter, args.level, args.policy, num_envs=args.num_envs, limit=args.limit,
            base_seed=args.seed, method=args.method, model=args.model, recipe=recipe,
            meta_reward=meta_reward, keep_trajectories=args.trajectories is not None,
            max_new_tokens=args.max_new_tokens, on_episode=tick, protocol=args.protocol,
            checkpoint=args.checkpoint, device=args.device, dtype=args.dtype)
    finally:
        bar.close()
    if args.trajectories is not None:
        write_jsonl_atomic(args.trajectories, [r.log_line() for r in results])
    if args.output is not None:
        write_json_atomic(args.output, record)
        rate = record["results"]["success_rate"]
        print(f"{args.env} {args.level} {record['method']}: success "
              f"{rate['mean']:.3f} ± {rate['se']:.3f} (n={record['results']['n']}) -> "
              f"{args.output}", file=sys.stderr)
    else:
        print(json.dumps(record, indent=2))
    return 0


def _run_commands(args: argparse.Namespace) -> int:
    """``--commands MODEL_DIR``: evaluate a command policy and write its record."""
    from derl_bench.evaluation import adapter_for
    from derl_bench.evaluation.commands import evaluate_commands
    from derl_bench.evaluation.record import command_record, recipe_block
    from derl_bench.evaluation.schema import COMPACT_CONSTRAINED
    from derl_bench.files import write_json_atomic
    from derl_bench.rollout.commands import CommandEpisode

    refused = [(args.protocol != "strict", "--commands evaluates under the strict protocol"),
               (not args.method, "--commands needs --method (e.g. teacher-dagger, grpo-outcome, "
                                 "derl)"),
               (not args.checkpoint, "--commands needs --checkpoint (which weights: 'final', "
                                     "'step 150', ...)"),
               (args.train_seed is not None and args.train_seed < 0,
                "--train-seed must be 0 or more"),
               (args.seed != 0 and args.temperature is None,
                "--seed does not apply to greedy --commands: its games are chosen by index "
                "and played greedily, with no seed (name the training seed with --train-seed; "
                "--temperature samples, seeded by --seed)"),
               (args.temperature is not None
                and not (math.isfinite(args.temperature) and args.temperature > 0),
                "--temperature must be a number > 0 (leave it out to play greedily)"),
               (not args.commands.is_dir(), f"--commands: {args.commands} is not a folder")]
    for bad, message in refused:
        if bad:
            raise CommandError(message)
    from derl_bench.evaluation.record import command_policy
    from derl_bench.evaluation.schema import RESULT_SCHEMA, schema_errors

    fields = RESULT_SCHEMA["properties"]
    errors = (schema_errors(args.model or args.commands.name, fields["model"], "the model name")
              + schema_errors(command_policy(args.commands, args.temperature, args.seed),
                              fields["policy"],
                              "the policy spec"))
    if errors:
        raise CommandError(f"{errors[0]} (name the model with --model; give the folder as a "
                           "plain path)")
    try:
        adapter = adapter_for(args.env)
        adapter.level(args.level)
        meta_reward = _meta_reward(args.meta_reward, adapter)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    try:
        recipe = recipe_block(args.recipe, benchmark=adapter.benchmark)
    except ValueError as exc:
        raise CommandError(f"--recipe: {exc}") from exc
    if COMPACT_CONSTRAINED not in adapter.policy_interfaces:
        raise CommandError(f"{args.env} has no command policies (no compact state)")
    episodes: list[CommandEpisode] = []
    try:
        evaluation = evaluate_commands(args.commands, args.level, env=adapter,
                                       limit=args.limit, envs=args.num_envs,
                                       episodes_out=episodes,
                                       temperature=args.temperature, seed=args.seed)
        record = command_record(evaluation, episodes, method=args.method,
                                model=args.model or args.commands.name,
                                model_dir=args.commands, checkpoint=args.checkpoint,
                                seed=args.train_seed, meta_reward=meta_reward,
                                recipe=recipe, env=adapter)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    if args.trajectories is not None:
        from derl_bench.evaluation.commands import command_log_line
        from derl_bench.files import write_jsonl_atomic

        write_jsonl_atomic(args.trajectories, [command_log_line(e) for e in episodes])
    if args.output is not None:
        write_json_atomic(args.output, record)
        rate = record["results"]["success_rate"]
        print(f"{args.env} {args.level} {record['method']} [{record['policy_interface']}]: "
              f"success "
              f"{rate['mean']:.3f} ± {rate['se']:.3f} (n={record['results']['n']}) -> "
              f"{args.output}", file=sys.stderr)
    else:
        print(json.dumps(record, indent=2))
    return 0
