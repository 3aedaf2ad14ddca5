"""The bookkeeping of indexing runs: a run claims documents with one conditional UPDATE (queued, or in progress with an
expired lease) and stamps them with its token; every later write of the run is conditional on that token
(`run_update`), so two runs on the same documents never both write. Failing documents (`documents_fail`) leaves no
chunk rows and deletes their vectors when Milvus answers. Shared by `indexing`, `reindex` and `text_index`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from retrieval import embeddings, vectorstore
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase

logger = logging.getLogger(__name__)


IN_PROGRESS = (DocumentStatus.PARSING, DocumentStatus.CHUNKING, DocumentStatus.EMBEDDING, DocumentStatus.INDEXING)
# Share of a document's progress reached when its chunks are stored; the rest follows embedded chunks.
PROGRESS_CHUNKED = 0.2


class TransientIngestError(Exception):
    """A dependency (Milvus, the database, the model's files) failed: the run released its documents and may be
    retried."""


# What releases a run's documents (or its re-index) for a retry with backoff instead of failing them: Milvus or the
# database unreachable, or the embedding model's directory unreadable (an operator's fix, not the documents' fault).
TRANSIENT_ERRORS = (
    vectorstore.VectorStoreUnavailable,
    embeddings.EmbeddingModelUnavailable,
    OperationalError,
    InterfaceError,
)


@dataclass
class IndexRun:
    """What one run did: ids per outcome, chunks stored and chunks actually encoded (cache misses)."""

    claimed: list[int] = field(default_factory=list)
    indexed: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    chunks: int = 0
    encoded: int = 0


def lease_end(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.INGEST_LEASE_SECONDS)


LOST_RUNS_PER_SWEEP = 1000


def knowledge_base_lost_runs_requeue(
    *, lost: Q, claim: Mapping[str, Any], enqueue: Callable[[int, int], object]
) -> int:
    """Queue again the knowledge-base runs (a re-index, a move to full text) that `lost` matches (their lease ran
    out). Each is claimed by one conditional UPDATE that writes `claim` only while `lost` still holds, so two sweeps at
    once queue a run once; its task (`enqueue(knowledge_base_id, tenant_id)`) is sent only once that claim commits.
    Crosses tenants by design, as the recovery sweep does, each row updated under its own tenant. At most
    LOST_RUNS_PER_SWEEP a call: the next sweep takes the rest. Returns how many were queued."""
    requeued = 0
    candidates = KnowledgeBase.objects.unscoped().filter(lost).values_list("tenant_id", "pk")[:LOST_RUNS_PER_SWEEP]
    for tenant_id, knowledge_base_id in candidates:
        with transaction.atomic():
            if not KnowledgeBase.objects.filter(tenant_id=tenant_id, pk=knowledge_base_id).filter(lost).update(**claim):
                continue
            transaction.on_commit(lambda pk=knowledge_base_id, tenant=tenant_id: enqueue(pk, tenant), robust=True)
            requeued += 1
    return requeued


def claimable(now: datetime) -> Q:
    return Q(status=DocumentStatus.QUEUED) | Q(status__in=IN_PROGRESS, lease_expires_at__lt=now)


def run_update(*, tenant_id: int, token: str, document_ids: Iterable[int], **fields: Any) -> int:
    """A write of this run only: documents another run has taken over are left alone. Renews the lease."""
    now = timezone.now()
    values = {"lease_expires_at": lease_end(now), "updated_at": now, **fields}
    return Document.objects.filter(tenant_id=tenant_id, claim_token=token, pk__in=list(document_ids)).update(**values)


def documents_held(*, tenant_id: int, token: str, document_ids: Iterable[int]) -> set[int]:
    """The documents this run still holds: neither deleted nor taken over by another run since (this one stalled past
    its lease). Only those are this run's to write vectors for or to clean."""
    return set(
        Document.objects.filter(tenant_id=tenant_id, claim_token=token, pk__in=list(document_ids)).values_list(
            "pk", flat=True
        )
    )


def documents_fail(*, tenant_id: int, token: str, failures: dict[int, str]) -> None:
    """Record each document's failure, for the documents this run still holds (one taken over by another run since is
    that run's). Their chunks go with it: see `_failed_documents_chunks_delete`."""
    if not failures:
        return
    now = timezone.now()
    with transaction.atomic():
        failed = [
            document_id
            for document_id, message in failures.items()
            if run_update(
                tenant_id=tenant_id,
                token=token,
                document_ids=[document_id],
                status=DocumentStatus.FAILED,
                error_message=message,
                failed_at=now,
                chunk_count=0,
                claim_token="",
                lease_expires_at=None,
            )
        ]
        had_chunks = _failed_documents_chunks_delete(tenant_id=tenant_id, document_ids=failed)
    _failed_documents_vectors_delete(tenant_id=tenant_id, document_ids=had_chunks)


def _failed_documents_chunks_delete(*, tenant_id: int, document_ids: Sequence[int]) -> list[int]:
    """Delete the chunk rows of documents being marked failed, in the transaction that marks them, so a failed
    document is never searchable with stale or partial content (from an earlier run, or a run interrupted after
    storing its rows). Returns the documents that had rows: their vectors go next."""
    had_chunks = list(
        Chunk.objects.filter(tenant_id=tenant_id, document_id__in=list(document_ids))
        .values_list("document_id", flat=True)
        .distinct()
    )
    if had_chunks:
        Chunk.objects.filter(tenant_id=tenant_id, document_id__in=had_chunks).delete()
    return had_chunks


def _failed_documents_vectors_delete(*, tenant_id: int, document_ids: Sequence[int]) -> None:
    """Delete the vectors of failed documents whose chunk rows are gone. Milvus down: searches drop hits whose chunk
    row is gone, and the next successful run of the document deletes them (it cleans up after any failure)."""
    if not document_ids:
        return
    dimension = (
        KnowledgeBase.objects.filter(tenant_id=tenant_id, documents__pk=document_ids[0])
        .values_list("embedding_dimension", flat=True)
        .first()
    )
    try:
        vectorstore.vectors_delete(tenant_id=tenant_id, dimension=dimension or 384, document_ids=document_ids)
    except vectorstore.VectorStoreUnavailable:
        logger.warning("could not delete the vectors of failed documents %s", list(document_ids), exc_info=True)


def documents_fail_after_retries(*, tenant_id: int, document_ids: Sequence[int], reason: str, queue_token: str) -> int:
    """The last word of a task whose transient failures outlasted every retry: its documents still queued on its own
    queueing (`queue_token`, as the task carries it) end as failed, leaving what `documents_fail` leaves (no chunk
    rows, chunk_count 0, vectors deleted when Milvus answers). A document queued again meanwhile (a re-index, the
    stalled-document sweep) is left queued for the newer task, which tries it afresh. Returns how many failed."""
    now = timezone.now()
    with transaction.atomic():
        # Locked while their chunks go, so a re-index queued meanwhile waits and then starts from this state.
        failed = list(
            Document.objects.select_for_update()
            .filter(
                tenant_id=tenant_id,
                pk__in=list(document_ids),
                status=DocumentStatus.QUEUED,
                queue_token=queue_token,
            )
            .values_list("pk", flat=True)
        )
        Document.objects.filter(tenant_id=tenant_id, pk__in=failed).update(
            status=DocumentStatus.FAILED,
            error_message=f"Indexing gave up after repeated errors of a dependency: {reason}. Re-index to retry.",
            failed_at=now,
            chunk_count=0,
            updated_at=now,
        )
        had_chunks = _failed_documents_chunks_delete(tenant_id=tenant_id, document_ids=failed)
    _failed_documents_vectors_delete(tenant_id=tenant_id, document_ids=had_chunks)
    return len(failed)
