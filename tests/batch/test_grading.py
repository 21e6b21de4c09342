"""The deterministic grader: normalisation, the key's own alternatives, and wrong answers failing."""

from __future__ import annotations

import pytest

from orchestrator.batch.grading import accepted_answers, grade_answer, normalize


def test_normalisation_folds_case_punctuation_number_words_units_and_currency() -> None:
    assert normalize("The Glass Menagerie!") == ["glass", "menagerie"]
    assert normalize("Twenty-five mins, $400,000 USD") == ["25", "minute", "400000"]
    assert normalize("four Days") == normalize("4 days.") == ["4", "day"]
    assert normalize("45 minutes each way") == normalize("45 mins each way")


def test_alternatives_come_from_the_key_and_from_accept() -> None:
    key = "7 days. 8 days (including the last day) is also acceptable."
    assert accepted_answers(key) == ["7 days.", "8 days"]
    assert accepted_answers("25 minutes and 50 seconds (or 25:50)") == ["25 minutes and 50 seconds", "25:50"]
    assert accepted_answers("Target", ["a Target store"]) == ["Target", "a Target store"]


@pytest.mark.parametrize(
    ("reply", "key", "passed"),
    [
        ("You graduated in business administration.", "Business Administration", True),
        ("It took you 8 days in total.", "7 days. 8 days (including the last day) is also acceptable.", True),
        ("Your best was 25:50.", "25 minutes and 50 seconds (or 25:50)", True),
        ("You have tried four of them.", "four", True),
        ("You were pre-approved for $400,000.", "$400,000", True),
        ("They moved to the suburbs.", "the suburbs", True),
        # wrong answers fail
        ("You have tried 14 of them.", "four", False),
        ("It took 9 days.", "7 days. 8 days (including the last day) is also acceptable.", False),
        ("You graduated in Business.", "Business Administration", False),
        ("I could not find that.", "Target", False),
        ("", "3", False),
    ],
)
def test_grade_answer(reply: str, key: str, passed: bool) -> None:
    result = grade_answer(reply, key)
    assert result.passed is passed and result.score == (1.0 if passed else 0.0)
    assert (result.matched is not None) is passed


def test_a_sentence_key_needs_most_of_its_content_words() -> None:
    key = "First, I helped my friend prepare the nursery, then I helped my cousin pick out stuff for her baby shower."
    assert grade_answer("First I helped my friend prepare the nursery, then helped my cousin pick out stuff for a baby shower", key).passed
    assert not grade_answer("You prepared a nursery.", key).passed


def test_an_explicit_accept_list_is_graded_too() -> None:
    assert grade_answer("five kits", "I have worked on or bought five model kits and more words here", ["five"]).passed
