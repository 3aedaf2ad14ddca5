"""The pure rules behind feedback and titles: what a rating does to the audit event's suspicion, and the title made
from a first question."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from conversations.models import DedupAction, ReviewVerdict
from conversations.review.feedback_rules import FalseHitSuspicion, false_hit_suspicion
from conversations.selectors import DEFAULT_TITLE_CHARS, title_from_question

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(hours=3)


def _after(
    rating: str,
    *,
    decision: str = DedupAction.SERVED_CACHED,
    verdict: str = ReviewVerdict.UNREVIEWED,
    suspected: bool = False,
    since: datetime | None = None,
) -> FalseHitSuspicion:
    return false_hit_suspicion(
        rating=rating, turn_decision=decision, review_verdict=verdict, suspected=suspected, since=since, now=NOW
    )


def test_a_thumbs_down_on_a_served_answer_is_a_suspected_false_hit_from_now():
    assert _after("down") == FalseHitSuspicion(suspected=True, since=NOW)


def test_a_second_thumbs_down_keeps_the_first_suspicions_time():
    assert _after("down", suspected=True, since=EARLIER) == FalseHitSuspicion(suspected=True, since=EARLIER)


def test_a_thumbs_up_on_a_served_answer_is_no_suspicion():
    assert _after("up") == FalseHitSuspicion(suspected=False, since=None)


def test_changing_down_to_up_withdraws_the_suspicion_while_unreviewed():
    assert _after("up", suspected=True, since=EARLIER) == FalseHitSuspicion(suspected=False, since=None)


@pytest.mark.parametrize("verdict", [ReviewVerdict.CORRECT, ReviewVerdict.INCORRECT])
def test_changing_down_to_up_keeps_the_suspicion_once_support_reviewed_it(verdict):
    after = _after("up", verdict=verdict, suspected=True, since=EARLIER)
    assert after == FalseHitSuspicion(suspected=True, since=EARLIER)


@pytest.mark.parametrize("decision", [DedupAction.ANSWERED, DedupAction.BYPASSED, DedupAction.SMALLTALK])
@pytest.mark.parametrize("rating", ["up", "down"])
def test_a_rating_of_an_answer_made_fresh_never_touches_the_suspicion(decision, rating):
    assert _after(rating, decision=decision) == FalseHitSuspicion(suspected=False, since=None)
    assert _after(rating, decision=decision, suspected=True, since=EARLIER) == FalseHitSuspicion(True, EARLIER)


def test_a_short_question_is_its_own_title_on_one_line():
    assert title_from_question("  How do I\n reset   my password?  ") == "How do I reset my password?"


def test_a_long_question_is_cut_at_a_word_with_an_ellipsis():
    question = "How do I " + "reset the password of every administrator account " * 4
    title = title_from_question(question)
    assert len(title) <= DEFAULT_TITLE_CHARS and title.endswith("\u2026")
    assert question.startswith(title[:-1]) and question[len(title) - 1] == " "


def test_a_single_word_longer_than_a_title_is_cut_mid_word():
    title = title_from_question("x" * 500)
    assert title == "x" * (DEFAULT_TITLE_CHARS - 1) + "\u2026"


def test_no_question_is_no_title():
    assert title_from_question("") == ""
