"""A client's writes to its conversations outside a turn: renaming one and deleting one with everything held for
it. Starting one and taking turns is `turns`."""

from __future__ import annotations

from conversations.models import Conversation
from conversations.services.retention import conversation_records_delete
from kbplatform.errors import ApplicationError
from kbplatform.text import control_character_problem
from tenants.models import Tenant

TITLE_MAX_CHARS = 200


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
