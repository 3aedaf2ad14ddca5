"""Deleting conversation records: by hand from the admin, and the purge of expired conversations."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from conversations.models import (
    ConsumedItem,
    Conversation,
    Turn,
)
from conversations.turn.state import (
    state_forget,
)
from kbplatform.jobs import task_get
from retrieval import question_index, vectorstore
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# --- deleting conversation records by hand (the admin) -------------------------------------------------------------


def conversation_records_delete(
    *,
    tenant: Tenant,
    conversation_ids: Sequence[int] = (),
    turn_ids: Sequence[int] = (),
    consumed_item_ids: Sequence[int] = (),
) -> None:
    """Delete conversations, turns or consumed items of `tenant` so that nothing keeps using them: every hot copy
    built before is invalidated (its conversation's revision moves, and it is dropped from Redis), so a deleted QA
    pair is never served again from a copy nor a deleted consumed item excluded; the deleted turns' question
    vectors leave the tenant-scope index (a worker deletes them when Milvus is down; a vector left behind meanwhile
    finds no row and is skipped). Audit events stay, as for an expired conversation. The hot copies and the vectors
    go once the deletion commits, so a caller's transaction that rolls back keeps them with its rows."""
    turns = Turn.objects.for_tenant(tenant)
    doomed_turns = list(
        turns.filter(Q(pk__in=list(turn_ids)) | Q(conversation_id__in=list(conversation_ids))).values_list(
            "pk", "conversation_id"
        )
    )
    touched = (
        {conversation_id for _, conversation_id in doomed_turns}
        | set(conversation_ids)
        | set(
            ConsumedItem.objects.for_tenant(tenant)
            .filter(pk__in=list(consumed_item_ids))
            .values_list("conversation_id", flat=True)
        )
    )
    with transaction.atomic():
        ConsumedItem.objects.for_tenant(tenant).filter(pk__in=list(consumed_item_ids)).delete()
        turns.filter(pk__in=[pk for pk, _ in doomed_turns]).delete()
        Conversation.objects.for_tenant(tenant).filter(pk__in=list(conversation_ids)).delete()
        # A conversation keeps its turn count (turn numbers are never reused); its revision tells hot copies apart.
        Conversation.objects.for_tenant(tenant).filter(pk__in=touched).update(state_revision=F("state_revision") + 1)
    # What lives outside the database follows the deletion only once it is committed: inside a caller's transaction
    # (the admin's delete view runs in one) a rollback would otherwise keep the rows and lose their vectors.
    transaction.on_commit(
        functools.partial(
            _records_deleted_outside_database,
            tenant_id=tenant.pk,
            conversation_ids=sorted(touched),
            turn_ids=[pk for pk, _ in doomed_turns],
        ),
        robust=True,
    )


def _records_deleted_outside_database(*, tenant_id: int, conversation_ids: list[int], turn_ids: list[int]) -> None:
    """After `conversation_records_delete` commits: drop the hot copies and the deleted turns' question vectors."""
    for conversation_id in conversation_ids:
        state_forget(tenant_id=tenant_id, conversation_id=conversation_id)
    if not turn_ids:
        return
    try:
        question_index.question_vectors_delete(tenant_id=tenant_id, turn_ids=turn_ids)
    except vectorstore.VectorStoreUnavailable:
        # The rows are gone (what the admin asked for); a worker deletes the vectors once Milvus answers.
        logger.warning("question index unavailable: deleting %s deleted questions' vectors queued", len(turn_ids))
        try:
            task_get("conversations.question_vectors_delete").delay(tenant_id, turn_ids)
        except Exception:  # the broker down too: the deletion stands, the vectors stay (logged)
            logger.exception("could not queue the deletion of %s question vectors", len(turn_ids))


# --- audit review and retention ------------------------------------------------------------------------------------


def conversations_purge_expired(*, now: datetime | None = None, batch_size: int = 500) -> int:
    """Delete conversations past their expiry, across tenants (a retention job: `.unscoped()` on purpose), with
    their turns, consumed items, hot copies and their turns' question vectors; audit events stay. The vectors go
    whatever the tenant's scope is now: a question asked under tenant scope was indexed, and the scope may have
    changed since (a vector left behind finds no row, but takes a candidate slot of every tenant-scope search).
    When Milvus does not delete a tenant's vectors, that tenant's expired conversations stay (still refused with
    410) and the next run deletes both, as a document or knowledge base stays when its vectors cannot go.
    Idempotent; returns how many were deleted."""
    now = now or timezone.now()
    deleted = 0
    unavailable: set[int] = set()  # tenants whose vectors Milvus did not delete: left for the next run
    while True:
        batch = list(
            Conversation.objects.unscoped()
            .filter(expires_at__lte=now)
            .exclude(tenant_id__in=unavailable)
            .values_list("pk", "tenant_id")[:batch_size]
        )
        if not batch:
            return deleted
        by_tenant: dict[int, list[int]] = {}
        for pk, tenant_id in batch:
            by_tenant.setdefault(tenant_id, []).append(pk)
        for tenant_id, conversation_ids in by_tenant.items():
            try:
                deleted += _expired_conversations_delete(
                    tenant_id=tenant_id, conversation_ids=conversation_ids, now=now
                )
            except vectorstore.VectorStoreUnavailable as exc:
                unavailable.add(tenant_id)
                logger.warning(
                    "question index unavailable: %s expired conversations of tenant %s kept for the next purge: %s",
                    len(conversation_ids),
                    tenant_id,
                    exc,
                )


def _expired_conversations_delete(*, tenant_id: int, conversation_ids: list[int], now: datetime) -> int:
    """Delete those of the tenant's `conversation_ids` still expired at `now`, and their turns' question vectors, in
    one transaction: VectorStoreUnavailable rolls the rows back, so no vector outlives its row. Returns how many."""
    with transaction.atomic():
        turns = list(
            Turn.objects.unscoped()
            .filter(tenant_id=tenant_id, conversation_id__in=conversation_ids)
            .values_list("conversation_id", "pk")
        )
        Conversation.objects.unscoped().filter(
            tenant_id=tenant_id, pk__in=conversation_ids, expires_at__lte=now
        ).delete()
        # A turn that landed since the batch was read moved its conversation's expiry, and the delete left it: its
        # questions stay indexed and its hot copy stays. One landing from here on waits for the deleted row's lock,
        # then finds its conversation gone.
        kept = set(Conversation.objects.unscoped().filter(pk__in=conversation_ids).values_list("pk", flat=True))
        question_index.question_vectors_delete(
            tenant_id=tenant_id, turn_ids=[turn_id for conversation_id, turn_id in turns if conversation_id not in kept]
        )
    purged = [pk for pk in conversation_ids if pk not in kept]
    for pk in purged:
        state_forget(tenant_id=tenant_id, conversation_id=pk)
    return len(purged)
