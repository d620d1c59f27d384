"""The ``rlvmr`` protocol against transcriptions of RLVMR's own code (zzjweb/digitalhuman,
RLVMR/code/, built on verl-agent): episode draws, action projection, prompts, records."""

from __future__ import annotations

import json
import random
import re

import pytest

from derl_bench.evaluation import evaluate, load_policy
from derl_bench.evaluation.policies import AVAILABLE_ACTIONS
from derl_bench.evaluation.rlvmr import TEMPERATURE
from derl_bench.families.alfworld.prompts import ALFWORLD_TEMPLATE_NO_HIS
from derl_bench.families.scienceworld.prompts import SCIWORLD_TEMPLATE_NO_HIS
from derl_bench.families.scienceworld.rlvmr import (
    scienceworld_draws,
    scienceworld_entries,
    scienceworld_task_names,
)
from derl_bench.families.scienceworld.splits import format_pairs, split_pairs
from derl_bench.family import resolve_family
from derl_bench.leaderboard import problems_in_text
from derl_bench.observers.think_action import parse_think_action, verl_agent_parser
from derl_bench.policies.prompts import AgentTurn
from derl_bench.policies.rlvmr_prompts import RLVMRPrompt

# -- transcriptions of RLVMR's code ---------------------------------------------------------------


def rlvmr_validation_tasks(variations_idx: list, env_seed: int, val_batch_size: int,
                           validations: int) -> list[list[tuple[int, int]]]:
    """What the validation workers of RLVMR load, one list per validation.

    make_envs (env_manager.py) builds the validation envs with ``seed=config.env.seed + 1000``;
    SciWorldMultiProcessEnv (sciworld/envs.py) starts worker i with ``seed + i``; each worker
    process runs ``_worker``, which seeds the module-level ``random``, draws once on start and
    once per ``reset`` (``data is None`` on every reset the manager sends).
    """
    seed = env_seed + 1000
    loaded: list[list[tuple[int, int]]] = [[] for _ in range(validations)]
    for i in range(val_batch_size):
        seed_i = seed + i
        # --- _worker(remote, seed_i, ...) ---
        random.seed(seed_i)
        task_id, task_variation = random.choice(variations_idx)
        for v in range(validations):
            # --- cmd == 'reset', data is None ---
            task_id, task_variation = random.choice(variations_idx)
            task_num = task_id
            loaded[v].append((task_num, task_variation))
    return loaded


def sciworld_projection(actions: list[str], available_actions: list | None = None,
                        meta_think: bool = False) -> tuple[list[str], list[int]]:
    """sciworld/projection.py, minus the available-action bookkeeping."""
    valids = [0] * len(actions)
    processed_actions = []
    for i in range(len(actions)):
        original_str = actions[i]
        start_tag = "<action>"
        end_tag = "</action>"
        start_idx = original_str.find(start_tag)
        end_idx = original_str.find(end_tag)
        if start_idx == -1 or end_idx == -1:
            processed_actions.append(original_str[-20:])
            continue
        extracted_action = original_str[start_idx + len(start_tag):end_idx].strip()
        processed_actions.append(extracted_action)
        valids[i] = 1
        think_start_idx = original_str.find("<think>")
        think_end_idx = original_str.find("</think>")
        if think_start_idx == -1 or think_end_idx == -1:
            valids[i] = 0
        if re.search(r"[\u4e00-\u9fff]", original_str):
            valids[i] = 0
    return processed_actions, valids


def alfworld_projection(actions: list[str]) -> tuple[list[str], list[int]]:
    """alfworld/projection.py, ``alfworld_projection``."""
    valids = [0] * len(actions)
    for i in range(len(actions)):
        original_str = actions[i]
        actions[i] = actions[i].lower()
        start_tag = "<action>"
        end_tag = "</action>"
        start_idx = actions[i].find(start_tag)
        end_idx = actions[i].find(end_tag)
        if start_idx == -1 or end_idx == -1:
            actions[i] = actions[i][-30:]
            continue
        extracted_action = actions[i][start_idx + len(start_tag):end_idx].strip().lower()
        actions[i] = extracted_action
        valids[i] = 1
        think_start_idx = original_str.find("<think>")
        think_end_idx = original_str.find("</think>")
        if think_start_idx == -1 or think_end_idx == -1:
            valids[i] = 0
        if re.search(r"[\u4e00-\u9fff]", original_str):
            valids[i] = 0
    return actions, valids


RESPONSES = [
    "</action><think>x</think><action>look</action>",
    "<think>the stove heats</think><action>Focus on Substance in Metal Pot</action>",
    "<think>t</think>\n<action>  open door to kitchen  </action> trailing",
    "<action>look around</action>",
    "I would open the fridge and then put the apple in the microwave",
    "<think>先</think><action>look</action>",
    "<action>a</action><action>b</action>",
    "<action>unterminated",
    "",
    "<THINK>x</THINK><ACTION>Go North</ACTION>",
]


# -- episode draws --------------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["L0", "L1", "L2"])
@pytest.mark.parametrize("env_seed", [0, 7])
def test_draws_equal_rlvmr_sampling(data_root, level, env_seed):
    index = json.loads((data_root / "scienceworld" / f"{level}_idx.json").read_text())
    expected = rlvmr_validation_tasks(index["test"], env_seed, 128, validations=3)
    for v in range(3):
        assert scienceworld_draws(index["test"], env_seed, 128, validation_round=v) == expected[v]
    assert expected[0] != expected[1]  # each validation draws again


def test_draws_are_task_variation_entries_of_the_level(data_root):
    index = json.loads((data_root / "scienceworld" / "L2_idx.json").read_text())
    names = scienceworld_task_names()
    entries = scienceworld_entries("L2", seed=0)
    expected = rlvmr_validation_tasks(index["test"], 0, 128, validations=1)[0]
    assert entries == [f"{names[t]}\t{v}" for t, v in expected]
    assert len(entries) == 128
    assert set(entries) <= set(format_pairs(split_pairs("L2", "eval")))


def test_task_names_are_the_simulators_sorted_list():
    from derl_bench.families.scienceworld.simulator import SimulatorProcess

    sim = SimulatorProcess()
    try:
        assert scienceworld_task_names() == sim.task_names()
    finally:
        sim.close()


# -- action projection ----------------------------------------------------------------------------

def parse_verl_agent(text: str, family: str) -> tuple[str, bool]:
    return verl_agent_parser(resolve_family(family).verl_agent_projection)(text)


def test_verl_agent_projection_matches_both_transcriptions():
    sw_actions, sw_valid = sciworld_projection(list(RESPONSES))
    alf_actions, alf_valid = alfworld_projection(list(RESPONSES))
    for i, text in enumerate(RESPONSES):
        assert parse_verl_agent(text, "scienceworld") == (sw_actions[i], bool(sw_valid[i])), text
        assert parse_verl_agent(text, "alfworld") == (alf_actions[i], bool(alf_valid[i])), text


def test_closing_tag_first_gives_an_empty_action_only_under_verl_agent():
    text = "</action><think>x</think><action>look</action>"
    assert parse_verl_agent(text, "scienceworld")[0] == ""
    assert parse_think_action(text)[0] == "look"


def test_think_action_wrapper_with_the_verl_agent_parser():
    import gymnasium as gym

    import derl_bench  # noqa: F401
    from derl_bench.observers.think_action import ThinkActionWrapper

    env = ThinkActionWrapper(gym.make("derl/ScienceWorld-v0"),
                             parser=verl_agent_parser({"keep_case": True, "fallback_chars": 20}))
    try:
        env.reset(options={"task": "melt", "variation": 0})
        *_, info = env.step("<think>x</think><action>Look Around</action>")
        assert info["action"] == "Look Around" and info["primitives"]["format_valid"] == 1.0
        *_, info = env.step("</action><think>x</think><action>look around</action>")
        assert info["action"] == "" and info["primitives"]["action_valid"] == 0.0
    finally:
        env.close()
    with pytest.raises(ValueError, match="parser"):
        ThinkActionWrapper(env, parser="regex")


# -- prompts --------------------------------------------------------------------------------------

def _turn(history: list[tuple[str, str]]) -> AgentTurn:
    return AgentTurn(task="boil water", observation="now", admissible=("look", "help", "go north"),
                     history=history, step=len(history))


def test_scienceworld_prompt_shows_all_actions_and_the_last_two_observations():
    prompt = RLVMRPrompt(resolve_family("scienceworld").rlvmr_prompt)
    first = prompt.messages(_turn([]), "AVAIL")[0]["content"]
    assert first == SCIWORLD_TEMPLATE_NO_HIS.format(task_description="boil water",
                                                    current_observation="now",
                                                    available_actions="AVAIL")
    history = [(f"obs{k}", f"act{k}") for k in range(1, 5)]
    text = prompt.messages(_turn(history), "AVAIL")[0]["content"]
    assert ("Prior to this step, you have already taken 4 step(s). Below are the most recent 2 "
            "observations and the corresponding actions you took: [Step 1, Action 1: 'act1']\n"
            "[Step 2, Action 2: 'act2']\n"
            "[Step 3, Observation 3: 'obs3', Action 3: 'act3']\n"
            "[Step 4, Observation 4: 'obs4', Action 4: 'act4']\n"
            "You are now at step 5 and your current observation is: now") in text
    assert "{{" not in text and "AVAIL" in text and '{"action": "wait1"' in text


def test_scienceworld_prompt_keeps_rlvmrs_numbering_after_one_step():
    prompt = RLVMRPrompt(resolve_family("scienceworld").rlvmr_prompt)
    text = prompt.messages(_turn([("obs1", "act1")]), "A")[0]["content"]
    assert "most recent 1 observations" in text
    assert "[Step 0, Observation 0: 'obs1', Action 0: 'act1']" in text


def test_alfworld_prompt_shows_the_whole_history():
    prompt = RLVMRPrompt(resolve_family("alfworld").rlvmr_prompt)
    first = prompt.messages(_turn([]))[0]["content"]
    assert first == ALFWORLD_TEMPLATE_NO_HIS.format(current_observation="now",
                                                    admissible_actions="'look'\n 'go north'")
    history = [(f"obs{k}", f"act{k}") for k in range(1, 8)]
    text = prompt.messages(_turn(history))[0]["content"]
    assert "most recent 7 observaitons" in text  # RLVMR's spelling
    assert all(f"[Observation {k}: 'obs{k}', Action {k}: 'act{k}']" in text for k in range(1, 8))


# -- the protocol in evaluate ---------------------------------------------------------------------

def test_rlvmr_records_document_the_draws_and_stay_off_the_boards(data_root):
    record, results = evaluate("derl/ScienceWorld-v0", "L0", "stall", limit=2,
                               protocol="rlvmr", keep_trajectories=True)
    entries = scienceworld_entries("L0", seed=0)
    assert [r.entry for r in results] == entries[:2]
    assert record["protocol"] == "rlvmr"
    assert record["env"]["kwargs"]["protocol"] == "rlvmr"
    assert record["eval_set"]["selection"] == "draws" and record["eval_set"]["size"] == 128
    for r in results:  # the tick limit ends a stalling episode before the step cap
        assert r.published and not r.success and r.steps < 30
    problems = problems_in_text(json.dumps(record))
    assert any(p.startswith("$.protocol:") for p in problems)
    assert any(p.startswith("$.eval_set.selection") for p in problems)


def test_rlvmr_llm_policy_uses_rlvmrs_settings(data_root, tmp_path):
    import gymnasium as gym

    import derl_bench  # noqa: F401
    from derl_bench.evaluation import adapter_for
    from derl_bench.policies import init_tiny_model

    path = init_tiny_model(tmp_path / "tiny")
    policy = load_policy(f"llm:{path}", "derl/ScienceWorld-v0", max_new_tokens=4,
                         protocol="rlvmr")
    assert policy.needs == frozenset({AVAILABLE_ACTIONS})
    assert policy._temperature == TEMPERATURE
    strict = load_policy(f"llm:{path}", "derl/ScienceWorld-v0")
    assert strict._temperature is None and strict._rlvmr is None
    env = gym.make("derl/ScienceWorld-v0", protocol="rlvmr")
    try:
        obs, info = env.reset(options={"task": "melt", "variation": 0})
        available = adapter_for("derl/ScienceWorld-v0").available_actions(env.unwrapped)
    finally:
        env.close()
    assert available.startswith("Valid_actions: ['activate OBJ'")
    assert "OBJ needs to be replaced with one of the following objects: [" in available
    policy.reset(0, obs, info, seed=0)
    action = policy.act(0, obs, {**info, AVAILABLE_ACTIONS: available})
    # four tokens cannot hold both action tags: verl-agent's ScienceWorld fallback applies
    assert len(action) <= 20
    assert policy._sessions[0].history == [(obs, action)]
