"""What a turn searches with (`search_query.search_query_build`): pure, no services."""

from __future__ import annotations

import pytest

from conversations import search_query
from conversations.search_query import SearchQuery, search_query_build

TOPIC = "What sports are played at the Olympics?"
FOLLOWUP = "Can women play it?"


def build(question: str, recent: list[str], **kwargs: object) -> SearchQuery:
    return search_query_build(question=question, recent_questions=recent, **kwargs)


@pytest.mark.parametrize(
    "question",
    [
        "How do I reset my password in the admin console?",
        "What does the error ZX-4471Q mean on the gateway?",
    ],
)
def test_a_question_that_stands_alone_is_searched_as_asked(question):
    assert build(question, [TOPIC]) == SearchQuery(text=question, vector_text=question)


@pytest.mark.parametrize("question", [FOLLOWUP, "And for admins?", "What about cricket?", "pricing?"])
def test_a_follow_up_is_searched_with_the_question_before_it(question):
    query = build(question, ["How do I reset my password?", TOPIC])

    assert query.text == f"{TOPIC} {question}"
    assert query.context == (TOPIC,)


@pytest.mark.parametrize("recent", [[], [""], ["   "]])
def test_a_follow_up_with_no_question_before_it_is_searched_as_asked(recent):
    assert build(FOLLOWUP, recent) == SearchQuery(text=FOLLOWUP, vector_text=FOLLOWUP)


def test_a_follow_up_of_a_follow_up_takes_both_back_to_the_one_that_stands_alone():
    recent = ["How do I reset my password?", TOPIC, "What about rugby?", "Is it dangerous?"]

    query = build(FOLLOWUP, recent, context_questions=3)

    assert query.context == (TOPIC, "What about rugby?", "Is it dangerous?")
    assert query.text == f"{TOPIC} What about rugby? Is it dangerous? {FOLLOWUP}"


@pytest.mark.parametrize(
    ("limit", "context"),
    [
        (1, ("Is it dangerous?",)),
        (2, ("What about rugby?", "Is it dangerous?")),
        (3, (TOPIC, "What about rugby?", "Is it dangerous?")),
        (9, (TOPIC, "What about rugby?", "Is it dangerous?")),  # never past the one that stands alone
    ],
)
def test_at_most_the_limit_of_earlier_questions_is_taken(limit, context):
    recent = ["How do I reset my password?", TOPIC, "What about rugby?", "Is it dangerous?"]

    assert build(FOLLOWUP, recent, context_questions=limit).context == context


def test_only_follow_ups_before_it_are_all_taken_up_to_the_limit():
    recent = ["And for admins?", "What about it?"]

    assert build(FOLLOWUP, recent, context_questions=5).context == tuple(recent)


@pytest.mark.parametrize("limit", [0, -1])
def test_no_context_takes_every_question_as_asked(limit):
    assert build(FOLLOWUP, [TOPIC], context_questions=limit) == SearchQuery(text=FOLLOWUP, vector_text=FOLLOWUP)


def test_blank_earlier_questions_are_skipped_and_earlier_ones_trimmed():
    assert build(FOLLOWUP, [f"  {TOPIC}\n", "", "  "]).context == (TOPIC,)


def test_questions_that_name_no_topic_are_left_out():
    recent = [TOPIC, "thanks!", "show me that again"]

    query = build(FOLLOWUP, recent, names_topic=[True, False, False])

    assert query.context == (TOPIC,)


def test_with_no_question_naming_a_topic_the_follow_up_is_searched_as_asked():
    query = build(FOLLOWUP, ["hello", "thanks!"], names_topic=[False, False])

    assert query == SearchQuery(text=FOLLOWUP, vector_text=FOLLOWUP)


def test_topic_flags_that_do_not_match_the_questions_are_refused():
    with pytest.raises(ValueError, match="zip"):
        build(FOLLOWUP, [TOPIC, "What about rugby?"], names_topic=[True])


@pytest.mark.parametrize("question", ["它怎么修？", "那价格呢"])
def test_a_question_with_no_word_the_rule_reads_is_searched_as_asked(question):
    assert build(question, ["机器学习是什么？"]) == SearchQuery(text=question, vector_text=question)


def test_the_vector_embeds_the_question_alone_unless_expanded():
    assert build(FOLLOWUP, [TOPIC], vector_expanded=False).vector_text == FOLLOWUP
    assert build(FOLLOWUP, [TOPIC], vector_expanded=True).vector_text == f"{TOPIC} {FOLLOWUP}"


def test_the_defaults_are_the_modules_settings_when_called(monkeypatch):
    recent = [TOPIC, "What about rugby?"]
    monkeypatch.setattr(search_query, "FOLLOWUP_CONTEXT_QUESTIONS", 1)
    monkeypatch.setattr(search_query, "FOLLOWUP_VECTOR_EXPANDED", True)

    query = build(FOLLOWUP, recent)

    assert query.context == ("What about rugby?",)
    assert query.vector_text == query.text

    monkeypatch.setattr(search_query, "FOLLOWUP_CONTEXT_QUESTIONS", 0)
    assert build(FOLLOWUP, recent).context == ()
