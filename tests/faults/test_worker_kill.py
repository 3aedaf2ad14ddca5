"""A Celery worker SIGKILLed (parent and pool child, as a crashed machine) in the middle of a document, twice.

Guarantees shown: the document never ends `failed` for it; once each dead run's lease has expired the
housekeeping task (`documents_recover_stalled`, run by beat every minute) hands it to a new run; it ends
`indexed` exactly once: one row per chunk position, the same chunk ids across runs, and exactly one vector per
chunk in Milvus (no duplicates, none missing), every chunk findable once.
"""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.utils import timezone

from retrieval import vectorstore
from retrieval.models import Chunk, Document, DocumentStatus, EmbeddingCacheEntry, KnowledgeBase, ReindexStatus
from retrieval.services import documents_recover_stalled, knowledge_base_create, knowledge_base_reindexes_recover
from tests.services import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _kill_when(worker, tenant, document_id: int, min_progress: float) -> Document:
    def mid_run() -> Document | None:
        document = Document.objects.for_tenant(tenant).get(pk=document_id)
        assert document.status != DocumentStatus.FAILED, document.error_message
        busy = document.status in (DocumentStatus.EMBEDDING, DocumentStatus.INDEXING)
        return document if busy and min_progress < document.progress < 1.0 else None

    wait_for(mid_run, timeout=120, interval=0.02, what=f"the run to pass {min_progress:.0%}")
    worker.kill()
    return Document.objects.for_tenant(tenant).get(pk=document_id)


def _recover(tenant, document_id: int) -> None:
    """What beat does once the lease of the dead run has run out (the clock is moved, not waited for)."""
    assert documents_recover_stalled() == 0, "a live lease must not be taken over"
    Document.objects.for_tenant(tenant).filter(pk=document_id).update(lease_expires_at=timezone.now())
    assert documents_recover_stalled() == 1


def _many_chunk_upload(api_client, tenant, name: str) -> tuple[KnowledgeBase, int]:
    """A knowledge base of 16-piece chunks and one document of INGEST_EMBED_BATCH x 4 paragraphs uploaded to it (so
    its indexing, or its re-index, takes several batches to kill a worker in); returns both."""
    knowledge_base = knowledge_base_create(
        tenant=tenant, name=f"{name}-{uuid.uuid4().hex[:6]}", chunk_max_tokens=16, chunk_overlap_tokens=0
    )
    paragraphs = settings.INGEST_EMBED_BATCH * 4
    text = "\n\n".join(f"Outcrop {i} shows basalt column {i} above the shoreline." for i in range(paragraphs))
    response = api_client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/", {"title": "crash", "text": text}, format="json"
    )
    assert response.status_code == 202, response.content
    return knowledge_base, response.json()["id"]


def test_worker_killed_twice_mid_document_still_indexes_it_exactly_once(
    celery_worker_process, milvus_server, api_client, tenant
):
    knowledge_base, document_id = _many_chunk_upload(api_client, tenant, "crash")

    first = _kill_when(celery_worker_process, tenant, document_id, min_progress=0.25)
    rows = Chunk.objects.for_tenant(tenant).filter(document_id=document_id).order_by("position")
    chunk_ids = list(rows.values_list("pk", flat=True))
    assert len(chunk_ids) == first.chunk_count > settings.INGEST_EMBED_BATCH
    celery_worker_process.start()
    _recover(tenant, document_id)

    second = _kill_when(celery_worker_process, tenant, document_id, min_progress=0.6)
    assert second.attempts == 2
    celery_worker_process.start()
    _recover(tenant, document_id)

    def indexed() -> Document | None:
        document = Document.objects.for_tenant(tenant).get(pk=document_id)
        assert document.status != DocumentStatus.FAILED, document.error_message
        return document if document.status == DocumentStatus.INDEXED else None

    document = wait_for(indexed, timeout=180, interval=0.2, what="the document to be indexed")
    assert document.attempts == 3 and document.progress == 1.0

    rows = Chunk.objects.for_tenant(tenant).filter(document_id=document_id).order_by("position")
    assert list(rows.values_list("pk", flat=True)) == chunk_ids, "the same chunks, not a second copy"
    assert list(rows.values_list("position", flat=True)) == list(range(document.chunk_count))
    vectors = vectorstore.vectors_count(
        tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, dimension=knowledge_base.embedding_dimension
    )
    assert vectors == document.chunk_count == len(chunk_ids), "exactly one vector per chunk"

    results = api_client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/",
        {"query": "basalt column 1234 above the shoreline", "limit": 50, "group_by_document": False},
        format="json",
    ).json()["results"]
    found = [hit["chunk_id"] for hit in results]
    assert len(found) == len(set(found)) == 50, "no chunk comes back twice"
    assert set(found) <= set(chunk_ids)


def test_worker_killed_mid_knowledge_base_reindex_is_noticed_and_the_reindex_finishes(
    celery_worker_process, milvus_server, api_client, tenant
):
    knowledge_base, document_id = _many_chunk_upload(api_client, tenant, "crash-reindex")
    wait_for(
        lambda: Document.objects.for_tenant(tenant).filter(pk=document_id, status=DocumentStatus.INDEXED).first(),
        timeout=300,
        what="the document to be indexed",
    )
    # Nothing cached, so the re-index encodes every chunk again and is still running when its worker dies.
    EmbeddingCacheEntry.objects.for_tenant(tenant).delete()
    response = api_client.post(f"/api/v1/knowledge-bases/{knowledge_base.pk}/reindex/")
    assert response.status_code == 202, response.content

    def mid_run() -> KnowledgeBase | None:
        found = KnowledgeBase.objects.for_tenant(tenant).get(pk=knowledge_base.pk)
        assert found.reindex_status == ReindexStatus.RUNNING, found.reindex_error
        return found if 0.25 < found.reindex_progress < 1.0 else None

    wait_for(mid_run, timeout=180, interval=0.02, what="the re-index to pass 25%")
    celery_worker_process.kill()
    celery_worker_process.start()

    assert knowledge_base_reindexes_recover() == 0, "a live lease must not be taken over"
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base.pk).update(
        reindex_lease_expires_at=timezone.now()  # the clock is moved, not waited for
    )
    assert knowledge_base_reindexes_recover() == 1
    assert "queued again" in KnowledgeBase.objects.for_tenant(tenant).get(pk=knowledge_base.pk).reindex_error

    def done() -> KnowledgeBase | None:
        found = KnowledgeBase.objects.for_tenant(tenant).get(pk=knowledge_base.pk)
        assert found.reindex_status != ReindexStatus.FAILED, found.reindex_error
        return found if found.reindex_status == ReindexStatus.DONE else None

    finished = wait_for(done, timeout=300, interval=0.2, what="the re-index to finish")
    assert (finished.reindex_attempts, finished.reindex_progress, finished.reindex_error) == (2, 1.0, "")
    chunks = Chunk.objects.for_tenant(tenant).filter(document_id=document_id).count()
    vectors = vectorstore.vectors_count(
        tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, dimension=knowledge_base.embedding_dimension
    )
    assert vectors == chunks, "exactly one vector per chunk"
