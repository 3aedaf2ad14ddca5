"""The admin's review queue: a day's picks drawn once (a reload shows the same ones), verdict buttons that write
support's label, and nothing of another tenant's."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import DedupAction, DuplicateLabel, LabelSource, ReviewPick
from tests.admin_ui.conftest import served_event

pytestmark = pytest.mark.django_db
URL = reverse("admin:conversations_dedupevent_review_queue")


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_days_queue_is_drawn_once_and_a_verdict_writes_the_label(tenant_a, tenant_b, support_a, settings):
    settings.REVIEW_QUEUE_DAILY_QUOTA = 2
    near = served_event(
        tenant_a, question="How do I reset my pw?", matched_question="Reset password?", similarity=0.77, threshold=0.76
    )
    flagged = served_event(
        tenant_a, question="Can I pay yearly?", matched_question="Can I pay monthly?", similarity=0.95, threshold=0.76
    )
    flagged.suspected_false_hit = True
    flagged.save()
    served_event(
        tenant_a, question="Reset it", matched_question="Reset password", similarity=0.99, pair_probability=0.99
    )
    theirs = served_event(tenant_b, question="b secret?", matched_question="b secret!", similarity=0.77, threshold=0.76)
    client = logged_in(support_a)

    page = client.get(URL)
    assert page.status_code == 200
    assert [row["event"].pk for row in page.context["rows"]] == [flagged.pk, near.pk]
    assert b"b secret" not in page.content
    later = served_event(
        tenant_a, question="Export PDF?", matched_question="Export as PDF?", similarity=0.76, threshold=0.76
    )
    again = client.get(URL)
    assert [row["event"].pk for row in again.context["rows"]] == [flagged.pk, near.pk]
    assert later.pk not in ReviewPick.objects.for_tenant(tenant_a).values_list("dedup_event_id", flat=True)

    response = client.post(URL, {"tenant": tenant_a.pk, "event": flagged.pk, "verdict": "incorrect", "note": "plan"})
    assert response.status_code == 302
    label = DuplicateLabel.objects.for_tenant(tenant_a).get()
    assert (label.dedup_event_id, label.is_duplicate, label.source, label.given_by, label.note) == (
        flagged.pk,
        False,
        LabelSource.SUPPORT,
        support_a.get_username(),
        "plan",
    )
    # Not of today's queue (another tenant's, or not picked): refused, nothing written.
    for event in (theirs, later):
        client.post(URL, {"tenant": tenant_a.pk, "event": event.pk, "verdict": "correct"})
    client.post(URL, {"tenant": tenant_a.pk, "event": near.pk, "verdict": "maybe"})
    assert DuplicateLabel.objects.for_tenant(tenant_a).count() == 1
    assert not DuplicateLabel.objects.for_tenant(tenant_b).exists()
    assert theirs.action == DedupAction.SERVED_CACHED


def test_another_tenants_queue_is_a_404(tenant_a, tenant_b, support_a):
    assert logged_in(support_a).get(URL, {"tenant": tenant_b.pk}).status_code == 404
    assert not ReviewPick.objects.for_tenant(tenant_b).exists()
