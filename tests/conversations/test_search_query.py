"""Which retrieval mode a turn searches in (`search_query.search_mode_choose`): pure, no services."""

from __future__ import annotations

import pytest

from conversations.dedup.question_pairs import content_words
from conversations.turn import search_query
from conversations.turn.search_query import search_mode_choose

TOPIC = "What sports are played at the Olympics?"
FOLLOWUP = "Can women play it?"
HYBRID, SEMANTIC, FULL_TEXT = "hybrid", "semantic", "full_text"


def choose(question: str, recent: list[str], mode: str = HYBRID, **kwargs: object) -> str:
    return search_mode_choose(question=question, knowledge_base_mode=mode, recent_questions=recent, **kwargs)


@pytest.mark.parametrize(
    "question", [FOLLOWUP, "And for admins?", "What about cricket?", "pricing?", "Is it the same for earthquakes?"]
)
def test_a_follow_up_in_a_hybrid_knowledge_base_is_searched_by_its_vector(question):
    assert choose(question, ["How do I reset my password?", TOPIC]) == SEMANTIC


@pytest.mark.parametrize(
    "question",
    [
        "How do I reset my password in the admin console?",
        "What does the error ZX-4471Q mean on the gateway?",
        "Which organizations accept charitable donations for lower taxes?",
    ],
)
def test_a_question_that_names_its_own_topic_keeps_the_knowledge_bases_mode(question):
    assert choose(question, [TOPIC]) == HYBRID


@pytest.mark.parametrize("recent", [[], [""], ["   "]])
def test_a_follow_up_with_no_question_before_it_keeps_the_knowledge_bases_mode(recent):
    assert choose(FOLLOWUP, recent) == HYBRID


@pytest.mark.parametrize("mode", [SEMANTIC, FULL_TEXT])
def test_only_a_hybrid_knowledge_base_routes_follow_ups(mode):
    assert choose(FOLLOWUP, [TOPIC], mode=mode) == mode


def test_questions_that_name_no_topic_do_not_make_a_follow_up():
    assert choose(FOLLOWUP, ["hello", "thanks!"], names_topic=[False, False]) == HYBRID
    assert choose(FOLLOWUP, [TOPIC, "thanks!"], names_topic=[True, False]) == SEMANTIC


def test_topic_flags_that_do_not_match_the_questions_are_refused():
    with pytest.raises(ValueError, match="zip"):
        choose(FOLLOWUP, [TOPIC, "What about rugby?"], names_topic=[True])


@pytest.mark.parametrize("question", ["它怎么修？", "那价格呢"])
def test_a_question_with_no_word_the_rules_read_keeps_the_knowledge_bases_mode(question):
    assert choose(question, ["机器学习是什么？"]) == HYBRID


@pytest.mark.parametrize(
    ("question", "words", "most", "mode"),
    [
        ("registered business", 2, 1, HYBRID),
        ("registered business", 2, 2, SEMANTIC),
        ("Retention time for conversations?", 3, 2, HYBRID),
        ("Retention time for conversations?", 3, 3, SEMANTIC),
        ("pricing?", 1, 0, SEMANTIC),  # a single content word makes a follow-up whatever the limit
    ],
)
def test_a_later_question_of_few_content_words_is_searched_like_a_follow_up(question, words, most, mode):
    assert len(content_words(question)) == words
    assert choose(question, [TOPIC], max_content_words=most) == mode


def test_routing_switched_off_searches_every_turn_in_the_knowledge_bases_mode():
    assert choose(FOLLOWUP, [TOPIC], followups_semantic=False) == HYBRID


def test_the_defaults_are_the_modules_settings_when_called(monkeypatch):
    monkeypatch.setattr(search_query, "FOLLOWUP_SEARCH_MAX_CONTENT_WORDS", 2)
    assert choose("registered business", [TOPIC]) == SEMANTIC

    monkeypatch.setattr(search_query, "FOLLOWUPS_SEARCH_SEMANTIC", False)
    assert choose("registered business", [TOPIC]) == HYBRID
    assert choose(FOLLOWUP, [TOPIC]) == HYBRID
