"""POST /api/v1/audit-events/{id}/review/: support tooling's verdict and the duplicate label it writes, in the
tenant's own events only, for admin keys only."""

from __future__ import annotations

import pytest

from conversations.models import DedupAction, DedupEvent, DuplicateLabel
from conversations.selectors import duplicate_labels_training
from retrieval.embeddings import BUNDLED_MODEL_NAME
from tests.conversations.test_labels import event_with_match

pytestmark = pytest.mark.django_db


def review(client, event_id: int, **body):
    return client.post(f"/api/v1/audit-events/{event_id}/review/", body, format="json")


def test_verdict_on_a_served_answer_labels_the_pair_and_can_be_changed(api_client, tenant):
    event = event_with_match(tenant)
    response = review(api_client, event.pk, verdict="incorrect", note="other plan")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["review_verdict"], body["review_note"], body["action"]) == ("incorrect", "other plan", "served_cached")
    assert body["label"]["is_duplicate"] is False
    assert body["label"]["given_by"] == f"API key {api_client.api_key.prefix}"

    body = review(api_client, event.pk, verdict="correct").json()
    assert body["label"]["is_duplicate"] is True
    assert DuplicateLabel.objects.for_tenant(tenant).count() == 1
    assert [p.is_duplicate for p in duplicate_labels_training(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)] == [
        True
    ]


def test_incorrect_on_a_refused_close_match_means_duplicate(api_client, tenant):
    event = event_with_match(tenant, action=DedupAction.BYPASSED, reason="follow-up in another context")
    assert review(api_client, event.pk, verdict="incorrect").json()["label"]["is_duplicate"] is True


def test_a_verdict_that_says_nothing_of_the_pair_gives_no_label(api_client, tenant):
    event = event_with_match(tenant, action=DedupAction.BYPASSED, reason="sources changed")
    body = review(api_client, event.pk, verdict="incorrect").json()
    assert (body["review_verdict"], body["label"]) == ("incorrect", None)
    assert not DuplicateLabel.objects.for_tenant(tenant).exists()


def test_another_tenants_event_is_a_404_and_stays_unreviewed(api_client, other_tenant):
    theirs = event_with_match(other_tenant)
    response = review(api_client, theirs.pk, verdict="incorrect")
    assert response.status_code == 404
    assert DedupEvent.objects.for_tenant(other_tenant).get().review_verdict == "unreviewed"
    assert not DuplicateLabel.objects.unscoped().exists()
    assert review(api_client, 10**9, verdict="correct").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"verdict": "maybe"},
        {"verdict": "unreviewed"},
        {"verdict": "correct", "extra": 1},
        {"verdict": True},
        {"verdict": "correct", "note": "a\x00b"},
    ],
)
def test_bad_input_is_a_400(api_client, tenant, body):
    event = event_with_match(tenant)
    response = review(api_client, event.pk, **body)
    assert response.status_code == 400, response.content
    assert DedupEvent.objects.for_tenant(tenant).get(pk=event.pk).review_verdict == "unreviewed"


def test_standard_keys_may_not_review(standard_api_client, tenant):
    event = event_with_match(tenant)
    assert review(standard_api_client, event.pk, verdict="correct").status_code == 403
    assert not DuplicateLabel.objects.for_tenant(tenant).exists()
