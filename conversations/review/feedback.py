"""The end user's feedback on answers, and what a thumbs-down on a served stored answer tells support."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from conversations.models import DedupEvent, Feedback, FeedbackRating, Turn
from conversations.review.feedback_rules import false_hit_suspicion
from conversations.review.labels import duplicate_label_of_thumbs_down
from kbplatform.errors import ApplicationError, ConflictError, NotFoundError
from kbplatform.text import control_character_problem
from tenants.models import Tenant

COMMENT_MAX_CHARS = 2000


@dataclass
class FeedbackOutcome:
    feedback: Feedback
    created: bool


def feedback_set(
    *, tenant: Tenant, turn_id: int, rating: str, comment: str = "", allowed_knowledge_base_id: int | None = None
) -> FeedbackOutcome:
    """Give or replace the feedback on the tenant's turn (one per turn: the rating and comment sent replace what was
    there), and apply what it says about a served stored answer to the turn's audit event
    (`feedback_rules.false_hit_suspicion`) in the same transaction. A turn without an answer (retrieve mode before
    the client stored one) has nothing to rate: 409."""
    if rating not in FeedbackRating.values:
        problem = f"Give one of {', '.join(FeedbackRating.values)}."
        raise ApplicationError(f"The rating is not valid: {problem}", extra={"fields": {"rating": [problem]}})
    comment = (comment or "").strip()
    problem = control_character_problem(comment)
    if problem is not None:
        raise ApplicationError(f"The comment is not valid: {problem}", extra={"fields": {"comment": [problem]}})
    if len(comment) > COMMENT_MAX_CHARS:
        problem = f"Ensure this field has no more than {COMMENT_MAX_CHARS} characters."
        raise ApplicationError(f"The comment is not valid: {problem}", extra={"fields": {"comment": [problem]}})
    now = timezone.now()
    with transaction.atomic():
        # The turn row's lock makes concurrent ratings of one turn queue here, so they replace each other instead of
        # colliding on the one-per-turn constraint. NO KEY UPDATE, as `turn_answer_set` takes it: a turn being written
        # that references this one holds a KEY SHARE lock on it.
        turn = (
            Turn.objects.for_tenant(tenant)
            .select_for_update(no_key=True)
            .filter(pk=turn_id)
            .only("pk", "tenant_id", "conversation_id", "knowledge_base_id", "answer", "decision")
            .first()
        )
        if turn is None or (
            allowed_knowledge_base_id is not None and turn.knowledge_base_id != allowed_knowledge_base_id
        ):
            raise NotFoundError("Turn not found.")
        if not turn.answer:
            raise ConflictError(
                "This turn has no answer to rate yet: store the answer first (PUT /api/v1/turns/{id}/answer/).",
                extra={"turn": turn.pk},
            )
        feedback, created = Feedback.objects.for_tenant(tenant).update_or_create(
            turn=turn,
            defaults={"rating": rating, "comment": comment},
            create_defaults={
                "tenant": tenant,
                "conversation_id": turn.conversation_id,
                "rating": rating,
                "comment": comment,
            },
        )
        _false_hit_suspicion_apply(tenant=tenant, turn=turn, rating=rating, now=now)
    return FeedbackOutcome(feedback=feedback, created=created)


def _false_hit_suspicion_apply(*, tenant: Tenant, turn: Turn, rating: str, now: datetime) -> None:
    """Inside the feedback's transaction: mark or clear the turn's audit event as a suspected false hit."""
    event = DedupEvent.objects.for_tenant(tenant).select_for_update().filter(turn=turn).first()
    if event is None:
        return
    after = false_hit_suspicion(
        rating=rating,
        turn_decision=turn.decision,
        review_verdict=event.review_verdict,
        suspected=event.suspected_false_hit,
        since=event.suspected_false_hit_at,
        now=now,
    )
    if (after.suspected, after.since) != (event.suspected_false_hit, event.suspected_false_hit_at):
        DedupEvent.objects.for_tenant(tenant).filter(pk=event.pk).update(
            suspected_false_hit=after.suspected, suspected_false_hit_at=after.since
        )
    if after.suspected != event.suspected_false_hit:
        # The suspicion is an end user's label of the pair (not a duplicate), trained on once support confirms it.
        duplicate_label_of_thumbs_down(tenant=tenant, event=event, suspected=after.suspected)
