"""The admin's write services: recorded settings changes, intents kept to their tenant, reviews that touch only
the review fields of the tenant's own events."""

import pytest
from django.core.exceptions import ValidationError

from conversations.admin.services import dedup_events_review, dedup_policy_change, intent_delete, intent_save
from conversations.models import DEFAULT_THRESHOLD, DedupEvent, DedupPolicy, Intent, SettingsChange
from kbplatform.errors import ApplicationError, NotFoundError
from tests.factories import DedupEventFactory

pytestmark = pytest.mark.django_db


def test_policy_change_records_each_changed_field_with_the_actor(tenant_a):
    changes = dedup_policy_change(
        tenant=tenant_a,
        user=None,
        actor="API key kb_1a2b3c4d",
        changes={"threshold": 0.8, "scope": "session", "allowlisted_intents": ["pricing", "other", "pricing"]},
    )
    assert {c.field: (c.old_value, c.new_value, c.changed_by_label) for c in changes} == {
        "threshold": (DEFAULT_THRESHOLD, 0.8, "API key kb_1a2b3c4d"),
        "allowlisted_intents": (["other"], ["other", "pricing"], "API key kb_1a2b3c4d"),
    }
    assert dedup_policy_change(tenant=tenant_a, user=None, changes={"allowlisted_intents": ["pricing", "other"]}) == []


def test_policy_change_refused_as_field_errors_and_nothing_recorded(tenant_a):
    with pytest.raises(ValidationError) as error:
        dedup_policy_change(tenant=tenant_a, user=None, changes={"min_results": 5, "allowlisted_intents": ["nope"]})
    assert "allowlisted_intents" in error.value.message_dict
    assert DedupPolicy.objects.for_tenant(tenant_a).get().min_results == 3
    assert not SettingsChange.objects.for_tenant(tenant_a).exists()
    with pytest.raises(ApplicationError):
        dedup_policy_change(tenant=tenant_a, user=None, changes={"tenant": 1})


def test_intents_stay_in_their_tenant(tenant_a, tenant_b):
    theirs = Intent.objects.for_tenant(tenant_b).get(name="secret-intent-of-b")
    with pytest.raises(NotFoundError):
        intent_save(tenant=tenant_a, user=None, intent=theirs, name=theirs.name, behaviour="normal", examples=["x"])
    with pytest.raises(NotFoundError):
        intent_delete(tenant=tenant_a, user=None, intent=theirs)
    theirs.refresh_from_db()
    assert theirs.examples == ["b only"]
    with pytest.raises(ValidationError):
        intent_save(tenant=tenant_a, user=None, name="other", behaviour="normal", examples=["x"])
    with pytest.raises(ValidationError):
        intent_save(tenant=tenant_a, user=None, name="pricing", behaviour="normal", examples=["x"])


def test_review_touches_only_own_events_and_only_review_fields(tenant_a, tenant_b, support_a):
    mine = DedupEventFactory(tenant=tenant_a, action="served_cached", similarity=0.93)
    theirs = DedupEventFactory(tenant=tenant_b, action="served_cached", similarity=0.93)
    count = dedup_events_review(
        tenant=tenant_a, event_ids=[mine.pk, theirs.pk], user=support_a, verdict="incorrect", note="  other plan "
    )
    assert count == 1
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (mine.review_verdict, mine.review_note, mine.reviewed_by_id) == ("incorrect", "other plan", support_a.pk)
    assert (mine.action, mine.similarity) == ("served_cached", 0.93)
    assert theirs.review_verdict == "unreviewed"

    dedup_events_review(tenant=tenant_a, event_ids=[mine.pk], user=support_a, verdict="unreviewed", note="x")
    mine = DedupEvent.objects.for_tenant(tenant_a).get(pk=mine.pk)
    assert (mine.review_verdict, mine.review_note, mine.reviewed_by_id, mine.reviewed_at) == (
        "unreviewed",
        "",
        None,
        None,
    )
    with pytest.raises(ApplicationError):
        dedup_events_review(tenant=tenant_a, event_ids=[mine.pk], user=support_a, verdict="maybe")


def test_review_without_a_note_keeps_the_note(tenant_a, support_a):
    """`note=None` (the bulk actions' empty note box) changes the verdict and leaves the note; a note replaces it;
    clearing the review clears the note with the verdict it explained."""
    event = DedupEventFactory(tenant=tenant_a, action="served_cached", similarity=0.93)
    dedup_events_review(tenant=tenant_a, event_ids=[event.pk], user=support_a, verdict="incorrect", note="other plan")
    dedup_events_review(tenant=tenant_a, event_ids=[event.pk], user=support_a, verdict="correct", note=None)
    event = DedupEvent.objects.for_tenant(tenant_a).get(pk=event.pk)
    assert (event.review_verdict, event.review_note) == ("correct", "other plan")
    dedup_events_review(tenant=tenant_a, event_ids=[event.pk], user=support_a, verdict="correct", note="same")
    assert DedupEvent.objects.for_tenant(tenant_a).get(pk=event.pk).review_note == "same"
    dedup_events_review(tenant=tenant_a, event_ids=[event.pk], user=support_a, verdict="unreviewed", note=None)
    event = DedupEvent.objects.for_tenant(tenant_a).get(pk=event.pk)
    assert (event.review_verdict, event.review_note, event.reviewed_by_id) == ("unreviewed", "", None)


def test_intents_and_their_examples_are_bounded(tenant_a):
    """Every turn compares its question with every example, and the settings page must stay under Django's form
    field limit: more intents, more phrases or longer phrases than that are refused with a reason."""
    from conversations.admin.services import MAX_EXAMPLE_CHARS, MAX_EXAMPLES_PER_INTENT, MAX_INTENTS_PER_TENANT

    with pytest.raises(ValidationError, match=f"at most {MAX_EXAMPLES_PER_INTENT} example phrases"):
        intent_save(
            tenant=tenant_a,
            user=None,
            name="many",
            behaviour="normal",
            examples=[f"phrase {n}" for n in range(MAX_EXAMPLES_PER_INTENT + 1)],
        )
    with pytest.raises(ValidationError, match=f"at most {MAX_EXAMPLE_CHARS} characters"):
        intent_save(
            tenant=tenant_a, user=None, name="long", behaviour="normal", examples=["x" * (MAX_EXAMPLE_CHARS + 1)]
        )
    assert not Intent.objects.for_tenant(tenant_a).filter(name__in=["many", "long"]).exists()
    # Exactly at the bounds is fine.
    intent_save(
        tenant=tenant_a,
        user=None,
        name="bounded",
        behaviour="normal",
        examples=["y" * MAX_EXAMPLE_CHARS, *(f"phrase {n}" for n in range(MAX_EXAMPLES_PER_INTENT - 1))],
    )
    existing = Intent.objects.for_tenant(tenant_a).count()
    Intent.objects.bulk_create(
        [Intent(tenant=tenant_a, name=f"filler-{n}", examples=["a"]) for n in range(MAX_INTENTS_PER_TENANT - existing)]
    )
    with pytest.raises(ValidationError, match=f"at most {MAX_INTENTS_PER_TENANT} intents"):
        intent_save(tenant=tenant_a, user=None, name="one-too-many", behaviour="normal", examples=["hello there"])
    assert Intent.objects.for_tenant(tenant_a).count() == MAX_INTENTS_PER_TENANT
