"""Answers a client supplies itself to its retrieve-mode turns (`PUT /api/v1/turns/{id}/answer/`): stored on the turn
so that its QA pair serves later duplicates, with every hot copy built before it invalidated."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from conversations.models import Conversation, DedupAction, Turn
from conversations.turn.state import state_forget
from kbplatform.errors import ApplicationError, ConflictError, NotFoundError
from retrieval.embeddings import token_count
from tenants.models import Tenant

ANSWER_MAX_CHARS = 100_000


def turn_answer_set(*, tenant: Tenant, turn_id: int, answer: str, allowed_knowledge_base_id: int | None = None) -> Turn:
    """Store the client's own answer to a retrieve-mode turn, so the QA pair serves later duplicates. A turn asked in
    answer mode, or a small-talk turn, is a conflict (409)."""
    answer = (answer or "").strip()
    if not answer:
        raise ApplicationError("The answer is empty.", extra={"fields": {"answer": ["This field is required."]}})
    if len(answer) > ANSWER_MAX_CHARS:
        raise ApplicationError(f"The answer is longer than {ANSWER_MAX_CHARS} characters.")
    with transaction.atomic():
        # NO KEY UPDATE: a concurrent turn that serves this pair inserts a row referencing it (a KEY SHARE lock
        # while it holds the conversation row); a plain FOR UPDATE here, then the conversation update below, would
        # wait on each other.
        turn = Turn.objects.for_tenant(tenant).select_for_update(no_key=True).filter(pk=turn_id).first()
        if turn is None or (
            allowed_knowledge_base_id is not None and turn.knowledge_base_id != allowed_knowledge_base_id
        ):
            raise NotFoundError("Turn not found.")
        if turn.mode != "retrieve":
            raise ConflictError("Only a turn asked in retrieve mode takes a client answer.")
        if turn.decision == DedupAction.SMALLTALK:
            # Small talk retrieves nothing and already has its reply: an answer stored on it would be a QA pair that
            # no search stands behind.
            raise ConflictError("A small-talk turn (greeting, thanks) retrieves nothing and takes no client answer.")
        expires_at = (
            Conversation.objects.for_tenant(tenant)
            .filter(pk=turn.conversation_id)
            .values_list("expires_at", flat=True)[0]
        )
        if expires_at <= timezone.now():
            # As a question is refused there: an expired conversation serves nothing again, so an answer stored on
            # it now would be kept until the purge for no one, and the client learns it should start a new one.
            raise ApplicationError(
                "This conversation has expired; its turns take no answer. Start a new conversation.",
                status_code=410,
                extra={"conversation": turn.conversation_id},
            )
        turn.answer = answer
        turn.answer_tokens = token_count(answer)
        # A retrieve-mode turn that was served a stored answer names the pair it came from, and later duplicates of
        # it are served that pair's answer: the client's own answer makes the turn its own origin instead.
        turn.answer_origin = None
        turn.save(update_fields=["answer", "answer_tokens", "answer_origin"])
        # Invalidates every hot copy built before this answer, including one the state_forget below cannot reach.
        Conversation.objects.for_tenant(tenant).filter(pk=turn.conversation_id).update(
            state_revision=F("state_revision") + 1
        )
    state_forget(tenant_id=tenant.pk, conversation_id=turn.conversation_id)
    return turn
