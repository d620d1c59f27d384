"""Prompt builders: math and verl-agent style agent prompts."""

from __future__ import annotations

import pytest

from derl_bench.families.scienceworld.prompts import SCIENCEWORLD_ACTIONS
from derl_bench.family import resolve_family
from derl_bench.policies import AgentPrompt, AgentTurn, MathPrompt, render


def turn(step=3, history=None):
    history = history or [(f"obs {i}", f"act {i}") for i in range(1, step + 1)]
    return AgentTurn(task="put a clean mug in the coffeemachine", observation="You see a mug 1.",
                     admissible=["go to sinkbasin 1", "take mug 1 from countertop 1", "help"],
                     history=history, step=step)


def test_math_prompt_has_problem_and_boxed_instruction():
    [message] = MathPrompt().messages("  Tom has 3 apples. How many?  ")
    assert message["role"] == "user"
    assert message["content"].startswith("Tom has 3 apples. How many?\n")
    assert "\\boxed{}" in message["content"] and "step by step" in message["content"]


def test_agent_prompt_shows_task_window_observation_actions_and_format():
    prompt = AgentPrompt(resolve_family("alfworld").prompt, history_window=2)
    text = prompt.messages(turn())[0]["content"]
    assert "Your task is to: put a clean mug in the coffeemachine" in text
    assert "obs 1" not in text and "act 1" not in text  # outside the window of 2
    assert "[Observation 2: 'obs 2', Action 2: 'act 2']" in text
    assert "[Observation 3: 'obs 3', Action 3: 'act 3']" in text
    assert "already taken 3 step(s)" in text
    assert "You are now at step 4 and your current observation is: You see a mug 1." in text
    assert "'go to sinkbasin 1'\n 'take mug 1 from countertop 1'" in text
    assert "'help'" not in text
    assert "<think> </think>" in text and "<action> </action>" in text


def test_agent_prompt_first_step_and_zero_window_have_no_history():
    text = resolve_family("alfworld").prompt
    first = AgentPrompt(text).messages(turn(step=0, history=[]))[0]["content"]
    none = AgentPrompt(text, history_window=0).messages(turn())[0]["content"]
    for text in (first, none):
        assert "Prior to this step" not in text and "Observation 1" not in text


def test_scienceworld_prompt_lists_action_templates_when_env_gives_none():
    t = AgentTurn(task="boil water", observation="This room is called the kitchen.",
                  admissible=[], history=[], step=0)
    text = AgentPrompt(resolve_family("scienceworld").prompt).messages(t)[0]["content"]
    assert "ScienceWorld" in text and "focus on OBJ" in text
    assert all(a in text for a in SCIENCEWORLD_ACTIONS)


def test_render_uses_chat_template_or_plain_text():
    class Plain:
        chat_template = None

    messages = MathPrompt().messages("1 + 1?")
    assert render(Plain(), messages) == messages[0]["content"] + "\n\n"


def test_bad_prompt_settings_are_rejected():
    with pytest.raises(ValueError, match="AgentPromptText"):
        AgentPrompt(resolve_family("gsm8k").prompt)  # a single-step family's prompt
    with pytest.raises(ValueError, match="history_window"):
        AgentPrompt(resolve_family("alfworld").prompt, history_window=-1)
