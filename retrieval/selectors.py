from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from retrieval import vectorstore
from retrieval.models import Chunk, Document, KnowledgeBase
from tenants.models import Tenant


@dataclass(frozen=True)
class ChunkHit:
    """A search result: the Milvus hit joined with its chunk row (the database is the source of truth)."""

    chunk_id: int
    document_id: int
    score: float
    text: str
    position: int
    token_count: int
    content_hash: str
    external_id: str | None
    document_external_id: str | None
    document_title: str


def chunk_search(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    query_vector: Sequence[float],
    limit: int,
    exclude_document_ids: Iterable[int] | None = None,
    exclude_chunk_ids: Iterable[int] | None = None,
    group_by_document: bool = True,
) -> list[ChunkHit]:
    """Best chunks of one knowledge base for a query vector, best first, at most one per document when
    grouped. Hits whose chunk row no longer exists (deleted since indexing), or is not the chunk the vector was
    written for (its id handed out again, e.g. after restoring an older database), are dropped."""
    if knowledge_base.tenant_id != tenant.pk:
        raise ValueError("knowledge base of another tenant")
    hits = vectorstore.vectors_search(
        tenant_id=tenant.pk,
        knowledge_base_id=knowledge_base.pk,
        query_vector=query_vector,
        limit=limit,
        dimension=knowledge_base.embedding_dimension,
        exclude_document_ids=exclude_document_ids,
        exclude_chunk_ids=exclude_chunk_ids,
        group_by_document=group_by_document,
    )
    if not hits:
        return []
    rows = {
        chunk.pk: chunk
        for chunk in Chunk.objects.for_tenant(tenant)
        .filter(pk__in=[hit.chunk_id for hit in hits])
        .select_related("document")
    }
    results = []
    for hit in hits:
        chunk = rows.get(hit.chunk_id)
        if chunk is None or (chunk.knowledge_base_id, chunk.document_id) != (knowledge_base.pk, hit.document_id):
            continue
        results.append(
            ChunkHit(
                chunk_id=chunk.pk,
                document_id=chunk.document_id,
                score=hit.score,
                text=chunk.text,
                position=chunk.position,
                token_count=chunk.token_count,
                content_hash=chunk.content_hash,
                external_id=chunk.external_id,
                document_external_id=chunk.document.external_id,
                document_title=chunk.document.title,
            )
        )
    return results


def knowledge_base_list(*, tenant: Tenant, only_id: int | None = None) -> list[KnowledgeBase]:
    """The tenant's knowledge bases; with `only_id` (a key limited to one knowledge base), just that one."""
    queryset = KnowledgeBase.objects.for_tenant(tenant)
    if only_id is not None:
        queryset = queryset.filter(pk=only_id)
    return list(queryset.order_by("name"))


def knowledge_base_get(*, tenant: Tenant, knowledge_base_id: int, only_id: int | None = None) -> KnowledgeBase | None:
    """The knowledge base if this tenant (and, for a limited key, this key) may reach it; None otherwise, so
    another tenant's id and a forbidden one look the same: not found."""
    if only_id is not None and int(knowledge_base_id) != only_id:
        return None
    return KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base_id).first()


def document_get(*, tenant: Tenant, document_id: int, only_knowledge_base_id: int | None = None) -> Document | None:
    queryset = Document.objects.for_tenant(tenant).select_related("knowledge_base").filter(pk=document_id)
    if only_knowledge_base_id is not None:
        queryset = queryset.filter(knowledge_base_id=only_knowledge_base_id)
    return queryset.first()
