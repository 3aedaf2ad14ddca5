"""Moving a knowledge base from the collection of vectors only (made before full text) into the full-text collection,
from its stored chunks: the chunk rows are the truth, their vectors come from the embedding cache (the model only for
what it lacks). Online: until the move is done the knowledge base is searched where it was (semantic), and every
chunk written meanwhile goes to both collections (`vectorstore.TextIndex.BUILDING`), so none is missing from either
when searches switch. Safe to run twice, or two at once: every write is an upsert by chunk id, so a move needs no
claim. It holds a lease (`text_index_lease_expires_at`), renewed with each batch: a move whose run was lost (its worker
killed, its task never delivered, `manage.py text_index --inline` stopped) lets it run out and is queued again by
`knowledge_base_text_indexes_recover`, the minute's recovery sweep, as a lost re-index is."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from kbplatform.errors import ConflictError
from kbplatform.jobs import task_enqueue_on_commit, task_get
from retrieval import embedding_cache, embeddings, vectorstore
from retrieval.models import Chunk, Document, KnowledgeBase, TextIndexStatus
from retrieval.selectors import knowledge_base_records_model
from retrieval.services.index_runs import (
    TRANSIENT_ERRORS,
    TransientIngestError,
    knowledge_base_lost_runs_requeue,
    lease_end,
)
from tenants.models import Tenant

logger = logging.getLogger(__name__)

MOVABLE = (TextIndexStatus.MISSING, TextIndexStatus.BUILDING)


def knowledge_base_text_index_start(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, queue: bool = True
) -> KnowledgeBase:
    """Mark the knowledge base as moving (from here on its chunks are written to both collections) and, with `queue`,
    queue the copy once that is committed (without, the caller runs `knowledge_base_text_index` itself). One already
    moving is queued again (a copy lost with its worker resumes this way); one already moved is a ConflictError. The
    lease starts here, so a task that never arrives is noticed when it runs out."""
    now = timezone.now()
    with transaction.atomic():
        updated = (
            KnowledgeBase.objects.for_tenant(tenant)
            .filter(pk=knowledge_base.pk, text_index__in=MOVABLE)
            .update(
                text_index=TextIndexStatus.BUILDING,
                text_index_error="",
                text_index_lease_expires_at=lease_end(now),
                text_index_attempts=0,
                updated_at=now,
            )
        )
        if not updated:
            raise ConflictError("This knowledge base's chunks already carry their text in the search index.")
        knowledge_base.refresh_from_db()
        if queue:
            task_enqueue_on_commit("knowledge_base_text_index", knowledge_base.pk, tenant.pk)
    return knowledge_base


def _copy_batch(*, knowledge_base: KnowledgeBase, batch: list[tuple[int, int, str]], model_identity: str) -> None:
    """Write one batch of (chunk id, document id, text) rows into the full-text collection; a chunk deleted meanwhile
    (its document deleted or indexed again) loses the row just written for it, as in a re-index."""
    tenant_id = knowledge_base.tenant_id
    model = embeddings.knowledge_base_model(knowledge_base.embedding_model)
    vectors, _ = embedding_cache.embeddings_cached(
        tenant_id=tenant_id, texts=[text for _, _, text in batch], model_identity=model_identity, model=model
    )
    dimension = int(vectors.shape[1])
    target = vectorstore.collection_ensure(dimension=dimension)
    # The full-text collection has the metadata field: the moved vectors carry their documents' metadata.
    metadata_of = dict(
        Document.objects.filter(tenant_id=tenant_id, pk__in={doc_id for _, doc_id, _ in batch}).values_list(
            "pk", "metadata"
        )
    )
    vectorstore.vectors_upsert(
        rows=[
            vectorstore.ChunkVector(
                chunk_id=pk,
                tenant_id=tenant_id,
                knowledge_base_id=knowledge_base.pk,
                document_id=doc_id,
                vector=vector,
                text=text,
                analyzer=knowledge_base.text_analyzer,
                metadata=metadata_of.get(doc_id),
            )
            for (pk, doc_id, text), vector in zip(batch, vectors, strict=True)
        ],
        dimension=dimension,
        collection=target,
    )
    alive = set(
        Chunk.objects.filter(tenant_id=tenant_id, pk__in=[row[0] for row in batch]).values_list("pk", flat=True)
    )
    vanished = {doc_id for pk, doc_id, _ in batch if pk not in alive}
    if vanished:
        kept = Chunk.objects.filter(tenant_id=tenant_id, document_id__in=vanished).values_list("pk", flat=True)
        vectorstore.vectors_delete_stale(
            tenant_id=tenant_id,
            dimension=dimension,
            document_ids=vanished,
            keep_chunk_ids=list(kept),
            collection=target,
        )


def _text_index_renew(*, tenant_id: int, knowledge_base_id: int, **fields: object) -> int:
    """Renew the lease of a move still under way (with `fields`); 0 when it is not moving any more."""
    now = timezone.now()
    return KnowledgeBase.objects.filter(
        tenant_id=tenant_id, pk=knowledge_base_id, text_index=TextIndexStatus.BUILDING
    ).update(text_index_lease_expires_at=lease_end(now), updated_at=now, **fields)


def knowledge_base_text_index(
    *, tenant_id: int, knowledge_base_id: int, progress: Callable[[int, int], None] | None = None
) -> int:
    """Copy every chunk of a moving knowledge base into the full-text collection, then switch its searches there
    (`text_index` READY) and delete its rows from the old collection. Returns the chunks copied: 0 when it is not
    moving. `progress(done, total)` is told after each batch, as `text_index_progress` is.

    Refused (recorded in `text_index_error`, nothing switched) when the workers' embedding model is not the one the
    knowledge base records: the copy would put another model's vectors beside its own; re-index it first."""
    knowledge_base = KnowledgeBase.objects.filter(
        tenant_id=tenant_id, pk=knowledge_base_id, text_index=TextIndexStatus.BUILDING
    ).first()
    if knowledge_base is None:
        return 0
    _text_index_renew(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
    try:
        model_identity = embeddings.model_identity(embeddings.knowledge_base_model(knowledge_base.embedding_model))
    except embeddings.EmbeddingModelUnavailable as exc:
        raise TransientIngestError(str(exc)) from exc
    if knowledge_base.chunks.exists() and not knowledge_base_records_model(
        knowledge_base=knowledge_base, model_identity=model_identity
    ):
        knowledge_base_text_index_fail(
            tenant_id=tenant_id,
            knowledge_base_id=knowledge_base_id,
            reason=(
                f"its vectors are of {knowledge_base.embedding_model_identity or knowledge_base.embedding_model!r}, "
                f"the workers run {model_identity!r}: re-index it onto their model, then run the move again"
            ),
        )
        return 0
    # Every chunk row, whatever its document's status: a document being indexed now has its rows stored before its
    # vectors are written, and its writer may have read the state from before the move began.
    chunks = Chunk.objects.filter(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
    total = chunks.count()
    done, last_pk = 0, 0
    batch_size = max(1, settings.INGEST_EMBED_BATCH)
    try:
        while True:
            batch = list(
                chunks.filter(pk__gt=last_pk).order_by("pk").values_list("pk", "document_id", "text")[:batch_size]
            )
            if not batch:
                break
            _copy_batch(knowledge_base=knowledge_base, batch=batch, model_identity=model_identity)
            done += len(batch)
            last_pk = batch[-1][0]
            share = min(1.0, done / total) if total else 1.0
            # The heartbeat: progress and a renewed lease once per batch.
            _text_index_renew(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, text_index_progress=share)
            if progress is not None:
                progress(done, total)
        legacy = vectorstore.chunk_collection_name(full_text=False)
        target = vectorstore.chunk_collection_name(full_text=True)
        vectorstore.vectors_flush(collection=target)
        switched = KnowledgeBase.objects.filter(
            tenant_id=tenant_id, pk=knowledge_base_id, text_index=TextIndexStatus.BUILDING
        ).update(
            text_index=TextIndexStatus.READY,
            text_index_progress=1.0,
            text_index_error="",
            text_index_lease_expires_at=None,
        )
        if switched and legacy != target:
            vectorstore.vectors_delete(
                tenant_id=tenant_id,
                dimension=knowledge_base.embedding_dimension,
                knowledge_base_id=knowledge_base_id,
                collection=legacy,
            )
    except TRANSIENT_ERRORS as exc:
        # The lease covers the retry's countdown: only a retry that never comes makes the move look lost.
        try:
            _text_index_renew(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
        except TRANSIENT_ERRORS:
            logger.warning("could not renew the lease of the move of knowledge base %s", knowledge_base_id)
        raise TransientIngestError(str(exc)) from exc
    logger.info("knowledge base %s of tenant %s moved to full text: %s chunks", knowledge_base_id, tenant_id, done)
    return done


def knowledge_base_text_index_fail(*, tenant_id: int, knowledge_base_id: int, reason: str) -> None:
    """Record why a move stopped, for good: its lease goes, so the recovery sweep leaves it to the operator. It stays
    moving (its chunks written to both collections, searched in the old one, semantic), so running the move again
    resumes it."""
    KnowledgeBase.objects.filter(tenant_id=tenant_id, pk=knowledge_base_id).update(
        text_index_error=f"The move to full-text search stopped: {reason}.", text_index_lease_expires_at=None
    )


def _text_index_lost(now: datetime) -> Q:
    return Q(text_index=TextIndexStatus.BUILDING, text_index_lease_expires_at__lt=now)


def knowledge_base_text_indexes_recover() -> int:
    """Queue again every move to full text whose run was lost: moving, its lease run out. The error field says so; the
    new run goes quickly through what is copied (vectors from the embedding cache, upserts by chunk id). After
    INGEST_MAX_ATTEMPTS lost runs it stops with the reason instead (`knowledge_base_text_index_fail`: still moving,
    resumed by `manage.py text_index`). Crosses tenants by design, as `documents_recover_stalled` does; each claim is
    one conditional UPDATE, so two sweeps at once queue a move once. Returns how many were queued again."""
    now = timezone.now()
    stamp = f"{now:%Y-%m-%d %H:%M} UTC"
    lost = KnowledgeBase.objects.unscoped().filter(_text_index_lost(now))
    given_up = lost.filter(text_index_attempts__gte=settings.INGEST_MAX_ATTEMPTS).update(
        text_index_error=(
            f"The move to full-text search stopped: it was interrupted {settings.INGEST_MAX_ATTEMPTS} times (its "
            f"worker stopped while running it); given up at {stamp}. Check the workers' logs, then run "
            "`manage.py text_index` again."
        ),
        text_index_lease_expires_at=None,
        updated_at=now,
    )
    if given_up:
        logger.warning("%s moves to full text given up after repeated interruptions", given_up)
    requeued = knowledge_base_lost_runs_requeue(
        lost=_text_index_lost(now),
        claim={
            "text_index_lease_expires_at": lease_end(now),
            "text_index_attempts": F("text_index_attempts") + 1,
            "text_index_error": (
                "The move to full-text search stopped making progress (its worker stopped or its task was lost) and "
                f"was queued again at {stamp}; it goes on from where it was."
            ),
            "updated_at": now,
        },
        enqueue=task_get("knowledge_base_text_index").delay,
    )
    if requeued:
        logger.info("requeued %s lost moves to full text", requeued)
    return requeued
