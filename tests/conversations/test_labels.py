"""Duplicate labels: what a verdict says of a pair (pure), which labels train (pure), and the labels support's
reviews write, change and remove, each kept in its tenant."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from conversations.admin.services import dedup_events_review
from conversations.models import DedupAction, DuplicateLabel, LabelSource
from conversations.review.label_rules import training_labels_pick, verdict_label
from conversations.review.labels import duplicate_label_of_thumbs_down
from conversations.selectors import duplicate_labels_training
from conversations.training.labelled_pairs import LabelledQuestionPair
from conversations.turn.turn_decision import MatchRefusal
from retrieval.embeddings import BUNDLED_MODEL_NAME
from tests.conversations.test_feedback import event_of, kb, rate, served, services
from tests.factories import DedupEventFactory, TurnFactory, UserFactory

__all__ = ["kb", "served", "services"]  # fixtures shared with test_api and test_feedback

# --- what a verdict says (pure) ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "has_match", "reason", "verdict", "label"),
    [
        (DedupAction.SERVED_CACHED, True, "", "correct", True),
        (DedupAction.SERVED_CACHED, True, "", "incorrect", False),
        (DedupAction.SERVED_CACHED, True, "shadow mode: would have served the stored answer", "incorrect", False),
        (DedupAction.BYPASSED, True, "follow-up in another context", "correct", False),
        (DedupAction.BYPASSED, True, "follow-up in another context", "incorrect", True),
        (DedupAction.BYPASSED, True, "pair model says different (p=0.31)", "incorrect", True),
        (DedupAction.ANSWERED, True, "below threshold", "incorrect", True),
        (DedupAction.ANSWERED, True, "below threshold", "correct", False),
        # Refused for the stored answer's sake: nothing said of the questions.
        (DedupAction.BYPASSED, True, str(MatchRefusal.SOURCES_CHANGED), "incorrect", None),
        (DedupAction.BYPASSED, True, "answered from a partial index", "correct", None),
        (DedupAction.BYPASSED, True, str(MatchRefusal.NO_SOURCE), "correct", None),
        # No stored question compared, small talk, no verdict.
        (DedupAction.ANSWERED, False, "", "incorrect", None),
        (DedupAction.BYPASSED, False, "force_refresh", "incorrect", None),
        (DedupAction.SMALLTALK, True, "", "correct", None),
        (DedupAction.SERVED_CACHED, True, "", "unreviewed", None),
    ],
)
def test_verdict_label(action, has_match, reason, verdict, label):
    assert verdict_label(action=action, has_match=has_match, reason=reason, verdict=verdict) is label


@dataclass(frozen=True)
class Row:
    pk: int
    dedup_event_id: int | None
    source: str


def test_training_pick_support_over_import_and_no_unconfirmed_thumbs_down():
    rows = [
        Row(1, 10, LabelSource.END_USER),  # suspected only: left out
        Row(2, 11, LabelSource.END_USER),  # confirmed by support below: support's label stands
        Row(3, 11, LabelSource.SUPPORT),
        Row(4, 12, LabelSource.IMPORT),
        Row(5, 12, LabelSource.SUPPORT),
        Row(6, None, LabelSource.IMPORT),
        Row(7, None, LabelSource.IMPORT),
        Row(8, 13, LabelSource.IMPORT),
    ]
    assert [row.pk for row in training_labels_pick(rows)] == [3, 5, 6, 7, 8]
    assert training_labels_pick([]) == []


# --- labels written by reviews ------------------------------------------------------------------------------------


def event_with_match(tenant, *, action=DedupAction.SERVED_CACHED, reason="", question="I forgot my password"):
    matched = TurnFactory(tenant=tenant, question="How do I reset my password?")
    turn = TurnFactory(tenant=tenant, conversation=matched.conversation, question=question, decision=action)
    return DedupEventFactory(
        tenant=tenant, turn=turn, action=action, reason=reason, matched_turn=matched, matched_turn_ref=matched.pk
    )


@pytest.mark.django_db
def test_review_writes_changes_and_removes_the_support_label(tenant, other_tenant):
    support = UserFactory(username="support@example.com")
    event = event_with_match(tenant)
    theirs = event_with_match(other_tenant)

    dedup_events_review(tenant=tenant, event_ids=[event.pk, theirs.pk], user=support, verdict="incorrect", note="x")
    label = DuplicateLabel.objects.for_tenant(tenant).get()
    assert (label.dedup_event_id, label.is_duplicate, label.source, label.given_by, label.note) == (
        event.pk,
        False,
        LabelSource.SUPPORT,
        "support@example.com",
        "x",
    )
    assert (label.question, label.stored_question) == ("I forgot my password", "How do I reset my password?")
    assert not DuplicateLabel.objects.for_tenant(other_tenant).exists()

    dedup_events_review(tenant=tenant, event_ids=[event.pk], user=None, actor="API key kb_12", verdict="correct")
    label = DuplicateLabel.objects.for_tenant(tenant).get()
    assert (label.is_duplicate, label.given_by, label.note) == (True, "API key kb_12", "x")

    dedup_events_review(tenant=tenant, event_ids=[event.pk], user=support, verdict="unreviewed")
    assert not DuplicateLabel.objects.for_tenant(tenant).exists()


@pytest.mark.django_db
def test_training_selector_reads_one_tenant_and_leaves_suspicions_out(tenant, other_tenant):
    confirmed = event_with_match(tenant)
    suspected = event_with_match(tenant, question="Where is the reset link?")
    refused = event_with_match(tenant, action=DedupAction.BYPASSED, reason="follow-up in another context")
    sources_changed = event_with_match(tenant, action=DedupAction.BYPASSED, reason=str(MatchRefusal.SOURCES_CHANGED))
    theirs = event_with_match(other_tenant)
    for event in (confirmed, suspected, theirs):
        duplicate_label_of_thumbs_down(tenant=event.tenant, event=event, suspected=True)
    dedup_events_review(tenant=tenant, event_ids=[confirmed.pk], user=None, actor="support", verdict="incorrect")
    dedup_events_review(
        tenant=tenant, event_ids=[refused.pk, sources_changed.pk], user=None, actor="support", verdict="incorrect"
    )
    dedup_events_review(tenant=other_tenant, event_ids=[theirs.pk], user=None, actor="support", verdict="correct")
    DuplicateLabel.objects.create(
        tenant=tenant, question="a", stored_question="b", is_duplicate=True, source=LabelSource.IMPORT, given_by="csv"
    )

    pairs = duplicate_labels_training(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    assert [(p.question, p.is_duplicate, p.source) for p in pairs] == [
        ("I forgot my password", False, LabelSource.SUPPORT),
        ("I forgot my password", True, LabelSource.SUPPORT),
        ("a", True, LabelSource.IMPORT),
    ]
    assert all(isinstance(p, LabelledQuestionPair) for p in pairs)
    assert pairs == sorted(pairs, key=lambda p: p.label_id)
    assert [
        (p.is_duplicate, p.source)
        for p in duplicate_labels_training(tenant=other_tenant, embedding_model=BUNDLED_MODEL_NAME)
    ] == [(True, LabelSource.SUPPORT)]
    # The suspicion on the unconfirmed event is kept (the queue reads it), not trained on.
    assert DuplicateLabel.objects.for_tenant(tenant).filter(dedup_event=suspected, source=LabelSource.END_USER).exists()
    duplicate_label_of_thumbs_down(tenant=tenant, event=suspected, suspected=False)
    assert not DuplicateLabel.objects.for_tenant(tenant).filter(dedup_event=suspected).exists()


# --- the end user's thumbs-down, through the API --------------------------------------------------------------------


def test_a_thumbs_down_on_a_served_answer_is_a_suspected_label_until_support_confirms(
    api_client, other_api_client, tenant, served
):
    _, fresh, repeat = served
    rate(api_client, fresh, "down", expect=201)  # a fresh answer: nothing said of a duplicate decision
    assert not DuplicateLabel.objects.for_tenant(tenant).exists()
    rate(other_api_client, repeat, "down", expect=404)
    assert not DuplicateLabel.objects.for_tenant(tenant).exists()

    rate(api_client, repeat, "down", expect=201)
    label = DuplicateLabel.objects.for_tenant(tenant).get()
    assert (label.source, label.is_duplicate, label.given_by) == (LabelSource.END_USER, False, "thumbs-down")
    assert (label.question, label.stored_question) == ("How can I reset my password?", "How do I reset my password?")
    assert duplicate_labels_training(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME) == []  # a suspicion only
    rate(api_client, repeat, "up")  # withdrawn before review
    assert not DuplicateLabel.objects.for_tenant(tenant).exists()

    rate(api_client, repeat, "down")
    event = event_of(tenant, repeat)
    response = api_client.post(f"/api/v1/audit-events/{event.pk}/review/", {"verdict": "correct"}, format="json")
    assert response.status_code == 200, response.content
    assert [
        (p.is_duplicate, p.source) for p in duplicate_labels_training(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    ] == [(True, LabelSource.SUPPORT)]
