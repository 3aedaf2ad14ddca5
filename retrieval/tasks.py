"""Celery tasks of ingestion: ids in, one service call, safe to run twice (`acks_late`, claims in the service).

Only transient errors (Milvus or the database unreachable) are retried, with exponential backoff; when the
retries run out the documents end as failed with the reason, unless they were queued again meanwhile (a newer task
then has them). A person's bad file never reaches a retry: the service records it on the document.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime

from celery import Task, shared_task

from retrieval import embedding_cache, services, vectorstore

logger = logging.getLogger(__name__)

MAX_RETRIES = 8


def retry_countdown(retries: int) -> float:
    """Seconds before retry number `retries + 1`: 5, 10, 20 ... capped at 5 minutes, with jitter so a
    recovered Milvus is not hit by every worker at once."""
    return min(300.0, 5.0 * 2**retries) * random.uniform(0.8, 1.2)  # jitter, not security


def _index(task: Task, document_ids: list[int], tenant_id: int, queue_token: str) -> None:
    try:
        services.documents_index(tenant_id=tenant_id, document_ids=document_ids)
    except services.TransientIngestError as exc:
        if task.request.retries >= task.max_retries:
            services.documents_fail_after_retries(
                tenant_id=tenant_id, document_ids=document_ids, reason=str(exc), queue_token=queue_token
            )
            return
        raise task.retry(exc=exc, countdown=retry_countdown(task.request.retries)) from exc


# `queue_token`: the queueing that sent the task (`services.documents_enqueue`); its retries keep it. Blank for a task
# sent before tokens were, which then gives up only documents not queued again since.


@shared_task(bind=True, name="document_index", acks_late=True, max_retries=MAX_RETRIES)
def document_index(self: Task, document_id: int, tenant_id: int, queue_token: str = "") -> None:
    _index(self, [document_id], tenant_id, queue_token)


@shared_task(bind=True, name="documents_index_batch", acks_late=True, max_retries=MAX_RETRIES)
def documents_index_batch(self: Task, document_ids: list[int], tenant_id: int, queue_token: str = "") -> None:
    """Many documents in one run, so their chunks are encoded and upserted in large batches."""
    _index(self, document_ids, tenant_id, queue_token)


@shared_task(bind=True, name="knowledge_base_reindex", acks_late=True, max_retries=MAX_RETRIES)
def knowledge_base_reindex(self: Task, knowledge_base_id: int, tenant_id: int) -> None:
    try:
        services.knowledge_base_reindex(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
    except services.TransientIngestError as exc:
        if self.request.retries >= self.max_retries:
            services.knowledge_base_reindex_fail(
                tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, reason=str(exc)
            )
            return
        raise self.retry(exc=exc, countdown=retry_countdown(self.request.retries)) from exc


@shared_task(bind=True, name="knowledge_base_text_index", acks_late=True, max_retries=MAX_RETRIES)
def knowledge_base_text_index(self: Task, knowledge_base_id: int, tenant_id: int) -> None:
    """Move a knowledge base into the full-text collection (`services.knowledge_base_text_index`)."""
    try:
        services.knowledge_base_text_index(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
    except services.TransientIngestError as exc:
        if self.request.retries >= self.max_retries:
            services.knowledge_base_text_index_fail(
                tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, reason=str(exc)
            )
            return
        raise self.retry(exc=exc, countdown=retry_countdown(self.request.retries)) from exc


@shared_task(name="documents_recover_stalled", acks_late=True)
def documents_recover_stalled() -> int:
    """The minute's housekeeping of ingestion: documents and knowledge-base re-indexes whose run was lost are queued
    again (one beat entry for both, so a deployment's schedule needs nothing new)."""
    return services.documents_recover_stalled() + services.knowledge_base_reindexes_recover()


@shared_task(name="ingest_queue_marker", acks_late=True)
def ingest_queue_marker(sent_at: str) -> None:
    """The stalled sweep's marker (services.recovery): taken off the queue, it shows every message sent before it was
    taken too. Expires never: a marker dropped unread would only delay the recovery it exists for."""
    services.ingest_queue_marker_seen(sent_at=datetime.fromisoformat(sent_at))


@shared_task(name="stored_files_orphaned_delete", acks_late=True)
def stored_files_orphaned_delete() -> int:
    return services.stored_files_orphaned_delete()


@shared_task(name="embedding_cache_purge", acks_late=True)
def embedding_cache_purge() -> int:
    return embedding_cache.embedding_cache_purge()


@shared_task(name="vectors_flush", acks_late=True)
def vectors_flush() -> int:
    """The beat's flush of every collection of the deployment (MILVUS_FLUSH_INTERVAL): what turns write (question
    vectors) reaches an indexed segment within the interval, as chunks do at the end of their indexing run."""
    return len(vectorstore.collections_flush())
