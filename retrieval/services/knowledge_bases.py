"""Creating a knowledge base (deleting one reaches conversations: `lifecycle.services`)."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction

from kbplatform.errors import ConflictError
from retrieval.models import KnowledgeBase
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# --- knowledge bases --------------------------------------------------------------------------------------


def knowledge_base_create(
    *,
    tenant: Tenant,
    name: str,
    description: str = "",
    chunk_max_tokens: int | None = None,
    chunk_overlap_tokens: int | None = None,
) -> KnowledgeBase:
    if KnowledgeBase.objects.for_tenant(tenant).filter(name=name).exists():
        raise ConflictError(f"A knowledge base named {name!r} already exists.", extra={"name": name})
    fields: dict = {"tenant": tenant, "name": name, "description": description}
    if chunk_max_tokens is not None:
        fields["chunk_max_tokens"] = chunk_max_tokens
    if chunk_overlap_tokens is not None:
        fields["chunk_overlap_tokens"] = chunk_overlap_tokens
    knowledge_base = KnowledgeBase(**fields)
    knowledge_base.full_clean()
    try:
        with transaction.atomic():
            knowledge_base.save()
    except IntegrityError as exc:
        # A concurrent create of the same name lost the race; any other integrity error is not the person's doing
        # and must not be reported as a name taken.
        if not KnowledgeBase.objects.for_tenant(tenant).filter(name=name).exists():
            raise
        raise ConflictError(f"A knowledge base named {name!r} already exists.", extra={"name": name}) from exc
    return knowledge_base
