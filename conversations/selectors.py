"""Reads of the conversations app. Every selector takes the tenant and filters by it."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from conversations.label_rules import TRAINING_SOURCES, training_labels_pick
from conversations.labelled_pairs import LabelledQuestionPair
from conversations.models import Conversation, DedupAction, DedupEvent, DuplicateLabel, Turn
from kbplatform.errors import NotFoundError
from tenants.models import Tenant


def conversation_get(
    *, tenant: Tenant, conversation_id: int, allowed_knowledge_base_id: int | None = None
) -> Conversation:
    """The tenant's conversation (expired ones included, until purged), or 404."""
    conversation = Conversation.objects.for_tenant(tenant).filter(pk=conversation_id).first()
    if conversation is None or (
        allowed_knowledge_base_id is not None and conversation.knowledge_base_id != allowed_knowledge_base_id
    ):
        raise NotFoundError("Conversation not found.")
    return conversation


def conversation_turns(*, tenant: Tenant, conversation: Conversation) -> QuerySet[Turn]:
    return Turn.objects.for_tenant(tenant).filter(conversation=conversation).defer("question_vector").order_by("number")


def dedup_event_list(
    *,
    tenant: Tenant,
    action: str | None = None,
    conversation_id: int | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    similarity_min: float | None = None,
    similarity_max: float | None = None,
    shadow: bool | None = None,
    allowed_knowledge_base_id: int | None = None,
) -> QuerySet[DedupEvent]:
    """The tenant's audit events, newest first. With `allowed_knowledge_base_id` (a key bound to one knowledge
    base), only events of that knowledge base's conversations; events whose conversation was purged can no longer
    be placed in a knowledge base and are left out for such a key."""
    events = DedupEvent.objects.for_tenant(tenant)
    if allowed_knowledge_base_id is not None:
        events = events.filter(conversation__knowledge_base_id=allowed_knowledge_base_id)
    if action:
        events = events.filter(action=action)
    if conversation_id is not None:
        events = events.filter(conversation_ref=conversation_id)
    if created_from is not None:
        events = events.filter(created_at__gte=created_from)
    if created_to is not None:
        events = events.filter(created_at__lt=created_to)
    if similarity_min is not None:
        events = events.filter(similarity__gte=similarity_min)
    if similarity_max is not None:
        events = events.filter(similarity__lte=similarity_max)
    if shadow is not None:
        events = events.filter(shadow=shadow)
    return events.order_by("-created_at", "-id")


def dedup_event_get(*, tenant: Tenant, event_id: int, allowed_knowledge_base_id: int | None = None) -> DedupEvent:
    """The tenant's audit event, or 404 (another tenant's, or, for a key bound to one knowledge base, an event of
    another knowledge base's conversation or of a purged one, as `dedup_event_list` leaves them out)."""
    events = DedupEvent.objects.for_tenant(tenant).filter(pk=event_id)
    if allowed_knowledge_base_id is not None:
        events = events.filter(conversation__knowledge_base_id=allowed_knowledge_base_id)
    event = events.first()
    if event is None:
        raise NotFoundError("Audit event not found.")
    return event


def knowledge_base_recent_questions(*, tenant: Tenant, knowledge_base_id: int, limit: int) -> list[str]:
    """The tenant's latest distinct questions asked of one knowledge base, newest first, at most `limit`: the
    questions of its turns that searched or served an answer (small talk searches nothing, so it is left out), each
    text once (compared without case or surrounding spaces)."""
    questions: list[str] = []
    seen: set[str] = set()
    turns = (
        Turn.objects.for_tenant(tenant)
        .filter(knowledge_base_id=knowledge_base_id)
        .exclude(decision=DedupAction.SMALLTALK)
        .order_by("-created_at", "-id")
        .values_list("question", flat=True)
    )
    for question in turns.iterator(chunk_size=500):
        key = question.strip().casefold()
        if not key or key in seen:
            continue
        seen.add(key)
        questions.append(question.strip())
        if len(questions) >= limit:
            break
    return questions


def duplicate_labels_training(*, tenant: Tenant) -> list[LabelledQuestionPair]:
    """The tenant's labelled question pairs a verifier trains on, in label id order
    (`label_rules.training_labels_pick`): support verdicts and imported labels, one per audit event with support's
    first. An end user's thumbs-down is a
    suspicion and is left out until support reviews the event (which writes a support label that then counts)."""
    labels = (
        DuplicateLabel.objects.for_tenant(tenant)
        .filter(source__in=sorted(TRAINING_SOURCES))
        .only("pk", "dedup_event_id", "source", "question", "stored_question", "is_duplicate")
        .order_by("pk")
    )
    return [
        LabelledQuestionPair(
            question=label.question,
            stored_question=label.stored_question,
            is_duplicate=label.is_duplicate,
            source=label.source,
            label_id=label.pk,
        )
        for label in training_labels_pick(labels.iterator(chunk_size=2000))
    ]
