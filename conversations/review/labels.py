"""Duplicate labels (`DuplicateLabel`): what support's verdicts, end users' thumbs-down and imports say about
whether two questions are duplicates, each kept with who gave it. The only writer of labels.

A label of an audit event is one per (event, source): given again, it is changed, not added. Its texts are the
event's question and matched stored question as they are when it is given (copied, so the label outlives the
turns); an event whose turns were purged can no longer be labelled.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from conversations.models import DedupEvent, DuplicateLabel, LabelSource
from conversations.review.label_rules import verdict_label
from tenants.models import Tenant

THUMBS_DOWN = "thumbs-down"


def stored_question_of(event: DedupEvent) -> str | None:
    """The stored question an event's decision compared the question with: the matched turn's, or the curated
    phrasing's (a decision on curated answers names no turn); None when there is none (or it was purged)."""
    if event.matched_turn is not None:
        return event.matched_turn.question
    return event.curated_question or None


def _label_write(
    *, tenant: Tenant, event: DedupEvent, source: str, is_duplicate: bool, given_by: str, note: str | None
) -> DuplicateLabel | None:
    stored_question = stored_question_of(event)
    if event.turn is None or stored_question is None:
        return None
    values = {
        "question": event.turn.question,
        "stored_question": stored_question,
        "is_duplicate": is_duplicate,
        "given_by": given_by[:255],
    }
    if note is not None:
        values["note"] = note.strip()
    label, _ = DuplicateLabel.objects.for_tenant(tenant).update_or_create(
        dedup_event=event, source=source, defaults=values, create_defaults={"tenant": tenant, **values}
    )
    return label


@transaction.atomic
def duplicate_labels_of_review(
    *, tenant: Tenant, event_ids: Iterable[int], verdict: str, given_by: str, note: str | None = None
) -> int:
    """Write (or change) the support label each reviewed event's verdict says (`label_rules.verdict_label`), or
    remove it when the verdict says nothing of the pair (`unreviewed`, a refusal for the stored answer's sake).
    `note=None` keeps each label's note. Returns how many labels now stand for these events."""
    events = (
        DedupEvent.objects.for_tenant(tenant)
        .filter(pk__in=list(event_ids))
        .select_related("turn", "matched_turn")
        .only("pk", "tenant_id", "action", "reason", "turn__question", "matched_turn__question", "curated_question")
    )
    written = 0
    for event in events:
        is_duplicate = verdict_label(
            action=event.action,
            has_match=event.turn is not None and stored_question_of(event) is not None,
            reason=event.reason,
            verdict=verdict,
        )
        if is_duplicate is None:
            DuplicateLabel.objects.for_tenant(tenant).filter(dedup_event=event, source=LabelSource.SUPPORT).delete()
            continue
        label = _label_write(
            tenant=tenant,
            event=event,
            source=LabelSource.SUPPORT,
            is_duplicate=is_duplicate,
            given_by=given_by,
            note=note,
        )
        written += label is not None
    return written


def duplicate_label_of_thumbs_down(*, tenant: Tenant, event: DedupEvent, suspected: bool) -> None:
    """An end user's thumbs-down on a served stored answer: a label "not a duplicate" from the end user while the
    event is suspected (`DedupEvent.suspected_false_hit`), removed when the suspicion is withdrawn. It trains nothing
    by itself (`label_rules.training_labels_pick`) until support reviews the event."""
    if not suspected:
        DuplicateLabel.objects.for_tenant(tenant).filter(dedup_event=event, source=LabelSource.END_USER).delete()
        return
    _label_write(
        tenant=tenant, event=event, source=LabelSource.END_USER, is_duplicate=False, given_by=THUMBS_DOWN, note=None
    )
