"""A client's conversations outside a turn's pipeline: starting one, reading one for a turn (404 for another tenant's,
410 once expired), renaming one and deleting one with everything held for it. Taking turns is `turns`."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from conversations.models import Conversation
from conversations.turn.policy import dedup_policy_get
from conversations.turn.retention import conversation_records_delete
from kbplatform.errors import ApplicationError, ConflictError, NotFoundError
from kbplatform.row_reads import row_get
from kbplatform.text import control_character_problem, user_id_canonical
from retrieval.metadata import MetadataError, metadata_filter_validate
from retrieval.models import KnowledgeBase
from tenants.models import Tenant

TITLE_MAX_CHARS = 200


def knowledge_base_for(
    *, tenant: Tenant, knowledge_base_id: int, allowed_knowledge_base_id: int | None = None
) -> KnowledgeBase:
    """The tenant's knowledge base, or 404 (another tenant's, or one the API key does not reach)."""
    if allowed_knowledge_base_id is not None and int(knowledge_base_id) != allowed_knowledge_base_id:
        raise NotFoundError("Knowledge base not found.")
    knowledge_base = KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base_id).first()
    if knowledge_base is None:
        raise NotFoundError("Knowledge base not found.")
    return knowledge_base


def conversation_create(
    *,
    tenant: Tenant,
    knowledge_base_id: int,
    user_id: str = "",
    metadata_filter: dict | None = None,
    allowed_knowledge_base_id: int | None = None,
) -> Conversation:
    problem = control_character_problem(user_id or "")
    if problem is not None:
        raise ApplicationError(f"The user id is not valid: {problem}", extra={"fields": {"user_id": [problem]}})
    user_id = user_id_canonical(user_id or "")
    longest = Conversation._meta.get_field("user_id").max_length
    if len(user_id) > longest:
        message = f"Is {len(user_id)} characters in Unicode NFC; send at most {longest}."
        raise ApplicationError(f"The user id is not valid: {message}", extra={"fields": {"user_id": [message]}})
    knowledge_base = knowledge_base_for(
        tenant=tenant, knowledge_base_id=knowledge_base_id, allowed_knowledge_base_id=allowed_knowledge_base_id
    )
    policy = dedup_policy_get(tenant=tenant)
    now = timezone.now()
    return Conversation.objects.create(
        tenant=tenant,
        knowledge_base=knowledge_base,
        user_id=user_id,
        metadata_filter=metadata_filter or None,
        last_active_at=now,
        expires_at=now + timedelta(seconds=policy.ttl_seconds),
    )


def conversation_for(
    *, tenant: Tenant, conversation_id: int, allowed_knowledge_base_id: int | None = None
) -> Conversation:
    """The tenant's conversation with its knowledge base, or 404 (another tenant's, or one the API key does not
    reach); 410 once it has expired; 409 when its metadata filter is one no search can run (saved before the filter
    checks refused it: a control character Milvus cannot quote). Such a filter is never dropped or widened, since
    the client chose what the conversation may read; the client is told to start a new conversation, instead of a
    503 that blames the index on every turn. Every turn reads it: one statement written once per process
    (`row_get`)."""
    conversation = row_get(
        model=Conversation, related=("knowledge_base",), tenant_id=tenant.pk, equal={"pk": conversation_id}
    )
    if conversation is None or (
        allowed_knowledge_base_id is not None and conversation.knowledge_base_id != allowed_knowledge_base_id
    ):
        raise NotFoundError("Conversation not found.")
    if conversation.expires_at <= timezone.now():
        raise ApplicationError(
            "This conversation has expired; start a new one.", status_code=410, extra={"conversation": conversation.pk}
        )
    if conversation.metadata_filter is not None:
        try:
            metadata_filter_validate(conversation.metadata_filter)
        except MetadataError as error:
            raise ConflictError(
                f"This conversation's metadata filter cannot be searched: {error} Start a new conversation with a "
                "valid filter.",
                extra={"code": "conversation_filter_invalid", "conversation": conversation.pk},
            ) from error
    return conversation


def conversation_rename(*, tenant: Tenant, conversation: Conversation, title: str) -> Conversation:
    """Give the tenant's conversation the client's `title` (spaces around it dropped). An empty title removes the
    client's, and the conversation is shown under one made from its first question again. A title with control
    characters or longer than `TITLE_MAX_CHARS` is a 400 and changes nothing."""
    title = (title or "").strip()
    problem = control_character_problem(title)
    if problem is not None:
        raise ApplicationError(f"The title is not valid: {problem}", extra={"fields": {"title": [problem]}})
    if len(title) > TITLE_MAX_CHARS:
        problem = f"Ensure this field has no more than {TITLE_MAX_CHARS} characters."
        raise ApplicationError(f"The title is not valid: {problem}", extra={"fields": {"title": [problem]}})
    Conversation.objects.for_tenant(tenant).filter(pk=conversation.pk).update(title=title)
    conversation.title = title
    return conversation


def conversation_delete(*, tenant: Tenant, conversation: Conversation) -> None:
    """Delete the tenant's conversation with its turns, consumed items, feedback, hot copy in Redis and its turns'
    question vectors in Milvus, through the admin's deletion (`conversation_records_delete`), so both leave the
    same state: the audit events stay, as for a purged conversation, their ids kept in `conversation_ref` /
    `turn_ref`. When Milvus is down the rows still go and a worker deletes the vectors once it answers."""
    conversation_records_delete(tenant=tenant, conversation_ids=[conversation.pk])
