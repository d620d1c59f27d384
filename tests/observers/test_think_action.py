"""parse_think_action follows verl-agent's ALFWorld projection; the wrapper feeds plain commands."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from derl_bench.observers.think_action import FALLBACK_CHARS, parse_think_action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>x</think><action>go to desk 1</action>", ("go to desk 1", True)),
        ("<think>x</think>\n<action>  Take Mug 1 from Desk 1 \n</action>",
         ("take mug 1 from desk 1", True)),
        # action tags are matched after lower-casing, think tags on the original text
        ("<think>x</think><ACTION>look</ACTION>", ("look", True)),
        ("<THINK>x</THINK><action>look</action>", ("look", False)),
        ("<action>look</action>", ("look", False)),
        ("<think>x</think><action>look</action><action>inventory</action>", ("look", True)),
        ("<think>x</think> 我 <action>look</action>", ("look", False)),
        ("<think></think><action></action>", ("", True)),
        ("<think>x</think><action>look", ("<think>x</think><action>look", False)),
        ("</action>oops<action>", ("</action>oops<action>", False)),
        ("", ("", False)),
    ],
)
def test_parse_examples(text, expected):
    assert parse_think_action(text) == expected


def test_missing_tags_keep_the_last_characters_lower_cased():
    text = "I think the answer is to GO TO THE COUNTERTOP 1 right now"
    action, valid = parse_think_action(text)
    assert not valid
    assert action == text.lower()[-FALLBACK_CHARS:]
    assert len(action) == FALLBACK_CHARS


def test_huge_and_hostile_inputs_parse_without_error():
    huge = "<think>" + "a" * 1_000_000 + "</think><action>look</action>"
    assert parse_think_action(huge) == ("look", True)
    action, valid = parse_think_action("\ud800\x00\x1b[31m<action>\udfffx</action>")
    assert (action, valid) == ("\udfffx", False)


@given(st.text(), st.text().filter(lambda s: "</action>" not in s.lower()))
def test_well_formed_responses_round_trip(thought, command):
    thought = thought.replace("<action>", "").replace("<ACTION>", "")
    response = f"<think>{thought}</think><action>{command}</action>"
    action, valid = parse_think_action(response)
    lowered_thought = thought.lower()
    if "<action>" in lowered_thought or "</action>" in lowered_thought:
        return  # the thought itself carries tags after lower-casing; covered by the examples
    assert action == command.lower().strip()
    cjk = any("\u4e00" <= ch <= "\u9fff" for ch in response)
    assert valid == (not cjk)


@given(st.text())
def test_never_raises_and_returns_lower_case(text):
    action, valid = parse_think_action(text)
    assert isinstance(action, str) and isinstance(valid, bool)
    assert action == action.lower() or action in text.lower()
