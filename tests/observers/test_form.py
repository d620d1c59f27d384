"""The form detectors: each fires on its form and on nothing else of a plain boxed answer."""

from __future__ import annotations

import pytest

from derl_bench.observers.form import DETECTORS, MAX_CHARS, FormDetectors

PLAIN = "\\boxed{94625730}"
# One response per detector that has its form (and a plain boxed answer has not).
FIRES = {
    "has_code": "```python\nprint(1)\n```", "has_think": "<think>hm</think> 3",
    "has_equals": "3 + 4 = 7", "has_decimal": "it is 3.5", "has_negative": "answer: -4",
    "has_percent": "50%", "has_question_mark": "is it 4?", "has_bold": "**4**",
    "has_list": "- first\n- second", "has_url": "see https://example.org",
    "non_ascii": "3 × 4", "has_uppercase": "The answer", "ends_with_period": "It is 4.",
    "has_parens": "(4)", "has_comma": "3, 4",
}


def test_a_plain_boxed_answer_sets_only_the_markup_detectors():
    values = FormDetectors().detect(PLAIN)
    assert set(values) == set(DETECTORS) == set(FormDetectors.names)
    on = {k for k, v in values.items() if v}
    assert on == {"box_count", "line_count", "starts_with_box", "has_latex"}
    assert values["word_count"] == 0.0  # \boxed is markup, not a word


@pytest.mark.parametrize("name", sorted(FIRES))
def test_each_detector_fires_on_its_form(name):
    assert FormDetectors().detect(FIRES[name])[name] == 1.0
    assert FormDetectors().detect(PLAIN)[name] == 0.0


def test_counts_count_and_a_hyphenated_word_is_not_a_negative_number():
    values = FormDetectors().detect("Step one: add.\nStep two: \\boxed{1}\\boxed{2}")
    assert (values["line_count"], values["box_count"], values["word_count"]) == (2.0, 2.0, 5.0)
    assert FormDetectors().detect("x-1 and f(2)-3")["has_negative"] == 0.0
    # A huge response is read only up to MAX_CHARS, so every detector stays bounded.
    long = "1" * MAX_CHARS + "?"
    assert FormDetectors().detect(long)["has_question_mark"] == 0.0
