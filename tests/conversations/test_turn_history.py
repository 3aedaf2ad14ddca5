"""What of a conversation an LLM is shown, and when a follow-up is rewritten (pure rules, no services)."""

from __future__ import annotations

import pytest

from conversations.models import IntentBehaviour
from conversations.turn.turn_history import history_select, rewrite_applies

EXCHANGES = [("q1", "a1"), ("q2", "a2"), ("q3", "a3"), ("q4", "a4")]


@pytest.mark.parametrize(
    ("counts", "max_turns", "max_tokens", "chosen"),
    [
        ([10, 10, 10, 10], 4, 1000, [0, 1, 2, 3]),  # all fit
        ([10, 10, 10, 10], 2, 1000, [2, 3]),  # the newest, oldest first
        ([10, 10, 10, 10], 4, 25, [2, 3]),  # the token budget ends it
        ([10, 500, 10, 10], 4, 100, [2, 3]),  # contiguous: nothing older after one that does not fit
        ([10, 10, 10, 30], 4, 25, []),  # the newest alone is too long: no history
        ([10, 10, 10, 10], 0, 1000, []),
    ],
)
def test_history_keeps_the_newest_contiguous_exchanges_within_both_limits(counts, max_turns, max_tokens, chosen):
    assert (
        history_select(exchanges=EXCHANGES, token_counts=counts, max_turns=max_turns, max_tokens=max_tokens) == chosen
    )


def test_history_of_no_exchanges_is_empty():
    assert history_select(exchanges=[], token_counts=[], max_turns=4, max_tokens=100) == []


BASE = {
    "enabled": True,
    "generator_rewrites": True,
    "question": "and for admins?",
    "behaviour": IntentBehaviour.NORMAL,
    "has_history": True,
}


@pytest.mark.parametrize(
    ("change", "applies"),
    [
        ({}, True),
        ({"enabled": False}, False),
        ({"generator_rewrites": False}, False),  # the extractive answerer rewrites nothing
        ({"has_history": False}, False),
        ({"question": "How much does the Team plan cost per user?"}, False),  # stands on its own
        ({"question": "how do I change it?"}, True),  # a pronoun pointing back
        ({"behaviour": IntentBehaviour.SMALLTALK}, False),
        ({"behaviour": IntentBehaviour.REPEAT}, False),
        ({"behaviour": IntentBehaviour.ELABORATE}, False),
    ],
)
def test_a_question_is_rewritten_only_when_it_is_an_ordinary_followup_and_the_tenant_and_generator_can(change, applies):
    assert rewrite_applies(**{**BASE, **change}) is applies
