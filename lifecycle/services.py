"""Set-up and deletion across apps (see the package's docstring)."""

from __future__ import annotations

import logging

from django.db import transaction

from conversations.models import Conversation
from conversations.services import tenant_conversations_setup
from conversations.turn.state import state_forget
from kbplatform.errors import ApplicationError, ConflictError
from retrieval import question_index, vectorstore
from retrieval.models import Chunk, Document, KnowledgeBase
from retrieval.services import knowledge_base_reindex_running
from tenants.models import Tenant

logger = logging.getLogger(__name__)


@transaction.atomic
def tenant_get_or_create(*, slug: str, name: str | None = None) -> tuple[Tenant, bool]:
    """The tenant of `slug` (created with `name` when there is none), with what every app needs of a tenant set up:
    its dedup policy and built-in intents."""
    tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    tenant_conversations_setup(tenant=tenant)
    return tenant, created


def tenant_delete(*, tenant: Tenant) -> dict[str, int]:
    """Delete a tenant with everything held for it: each knowledge base through `knowledge_base_delete` (Milvus
    vectors, files, conversations, hot copies), then the tenant's rows (keys, memberships, policy, audit log,
    settings history, caches). Milvus down: VectorStoreUnavailable after the knowledge bases already cleared, and the
    tenant stays, so running it again finishes the job. Returns what was deleted, by kind."""
    totals = {"knowledge bases": 0, "documents": 0, "chunks": 0, "conversations": 0}
    for knowledge_base in KnowledgeBase.objects.for_tenant(tenant).order_by("pk"):
        with vectorstore.outage_message(
            "The search index is unavailable; the tenant was kept (some knowledge bases may be gone). Retry later."
        ):
            deleted = knowledge_base_delete(tenant=tenant, knowledge_base=knowledge_base)
        for kind, count in deleted.items():
            totals[kind] += count
        totals["knowledge bases"] += 1
    Tenant.objects.filter(pk=tenant.pk).delete()
    return totals


KNOWLEDGE_BASE_DELETE_BATCH = 1000


def knowledge_base_delete(*, tenant: Tenant, knowledge_base: KnowledgeBase) -> dict[str, int]:
    """Delete a knowledge base and everything held for it: its chunk vectors and the question vectors of its
    conversations in Milvus first, then its rows (documents, chunks, conversations with their turns and consumed
    items, keys limited to it; the audit events stay, as for an expired conversation), then its stored files and
    the hot copies of its conversations in Redis. Milvus down: nothing is deleted (VectorStoreUnavailable, a 503),
    so no vector outlives its rows. Refused while the knowledge base is being re-indexed, whose worker would
    write vectors again. Returns what was deleted, by kind."""
    if knowledge_base.tenant_id != tenant.pk:
        raise ApplicationError("The knowledge base belongs to another tenant.")
    if knowledge_base_reindex_running(tenant=tenant, knowledge_base=knowledge_base):
        raise ConflictError("This knowledge base is being re-indexed; delete it when that has finished.")
    dimension = knowledge_base.embedding_dimension
    with vectorstore.outage_message("The search index is unavailable; the knowledge base was kept. Retry later."):
        vectorstore.vectors_delete(tenant_id=tenant.pk, dimension=dimension, knowledge_base_id=knowledge_base.pk)
        question_index.question_vectors_delete(tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk)

    documents = Document.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base)
    files = [name for name in documents.exclude(source_file="").values_list("source_file", flat=True) if name]
    conversation_ids = list(
        Conversation.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).values_list("pk", flat=True)
    )
    counts = {
        "documents": documents.count(),
        "chunks": Chunk.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).count(),
        "conversations": len(conversation_ids),
    }
    storage = Document._meta.get_field("source_file").storage
    with transaction.atomic():
        # Runs writing chunk rows of its documents hold their rows: wait for them, so their rows go too.
        list(documents.select_for_update().values_list("pk"))
        # Conversations first, in batches: each takes its turns and consumed items (and sets its audit events'
        # links to null), so no single cascade holds every row of a large knowledge base at once.
        for start in range(0, len(conversation_ids), KNOWLEDGE_BASE_DELETE_BATCH):
            batch = conversation_ids[start : start + KNOWLEDGE_BASE_DELETE_BATCH]
            Conversation.objects.for_tenant(tenant).filter(pk__in=batch).delete()
        KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base.pk).delete()
        transaction.on_commit(lambda: [storage.delete(name) for name in files], robust=True)
        # As for a document: vectors an indexing run upserted after the delete above go once the rows are gone.
        transaction.on_commit(
            lambda: vectorstore.vectors_delete(
                tenant_id=tenant.pk, dimension=dimension, knowledge_base_id=knowledge_base.pk
            ),
            robust=True,
        )
    for conversation_id in conversation_ids:
        state_forget(tenant_id=tenant.pk, conversation_id=conversation_id)
    logger.info("knowledge base %s of tenant %s deleted: %s", knowledge_base.pk, tenant.pk, counts)
    return counts
