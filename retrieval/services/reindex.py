"""Re-indexing a whole knowledge base from its stored chunks (onto the model in use), with a lease, progress and
recovery of lost runs. The chunks in the database are the truth; Milvus is rebuilt from them."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from kbplatform.errors import ApplicationError, ConflictError
from kbplatform.jobs import task_enqueue_on_commit, task_get
from retrieval import embedding_cache, embeddings, vectorstore
from retrieval.chunking import (
    model_input_hash,
)
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, ReindexStatus, TextAnalyzer
from retrieval.selectors import knowledge_base_records_model, knowledge_base_text_settings
from retrieval.services.index_runs import (
    TRANSIENT_ERRORS,
    TransientIngestError,
    knowledge_base_lost_runs_requeue,
    lease_end,
)
from retrieval.services.knowledge_bases import embedding_model_checked
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# --- knowledge-base re-index ------------------------------------------------------------------------------


def _reindex_in_flight(now: datetime) -> Q:
    """A re-index marked running whose run (or its queued task) still holds a lease: one that let its lease run out
    was lost."""
    return Q(reindex_status=ReindexStatus.RUNNING, reindex_lease_expires_at__gte=now)


def knowledge_base_reindex_running(*, tenant: Tenant, knowledge_base: KnowledgeBase) -> bool:
    """Whether a re-index of the knowledge base is under way (marked running and still holding its lease): its
    worker would write vectors again, so nothing may delete the knowledge base meanwhile."""
    return (
        KnowledgeBase.objects.for_tenant(tenant)
        .filter(_reindex_in_flight(timezone.now()), pk=knowledge_base.pk)
        .exists()
    )


def _reindex_lost(now: datetime) -> Q:
    return Q(reindex_status=ReindexStatus.RUNNING, reindex_lease_expires_at__lt=now)


def knowledge_base_reindex_start(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    queue: bool = True,
    embedding_model: str | None = None,
    text_analyzer: str | None = None,
) -> KnowledgeBase:
    """Queue a rebuild of the knowledge base's vectors from its stored chunks (e.g. after a model change, or Milvus
    lost its data). With `embedding_model` (an offered model: `embedding_model_checked`), the knowledge base moves to
    that model: from the moment this returns its searches are refused (409) until a worker takes the re-index up, then
    served, marked "reindexing", until it is done; no other knowledge base is touched. With `text_analyzer`, its BM25
    text moves to that analyser: queries are read by it from the moment this returns, and each chunk's field as the
    re-index reaches it, so until it is done a BM25 search finds the chunks not yet rewritten only by the words both
    readings share (a move to or from `chinese` changes the field: none); its vectors serve throughout. The lease
    covers the task's wait in the queue: a task that never arrives is noticed when it runs out. Without `queue`, the
    caller runs `knowledge_base_reindex` itself (within the lease, so a lost caller's re-index is recovered by the
    sweep as a lost task's is)."""
    moved = {}
    if text_analyzer and text_analyzer != knowledge_base.text_analyzer:
        if text_analyzer not in TextAnalyzer.values:
            message = f"{text_analyzer!r} is not a text analyser; choose one of: {', '.join(TextAnalyzer.values)}."
            raise ApplicationError(message, extra={"fields": {"text_analyzer": [message]}})
        moved["text_analyzer"] = text_analyzer
    if embedding_model and embedding_model_checked(embedding_model) != knowledge_base.embedding_model:
        # The model its vectors are of, recorded before the name moves on, so that until the re-index runs every
        # search sees them as another model's (a row that never recorded one was judged by its name).
        moved = {
            "embedding_model": embedding_model,
            "embedding_model_identity": knowledge_base.embedding_model_identity
            or _identity_of_name(knowledge_base.embedding_model),
        }

    now = timezone.now()
    with transaction.atomic():
        updated = (
            KnowledgeBase.objects.for_tenant(tenant)
            .filter(pk=knowledge_base.pk)
            .exclude(_reindex_in_flight(now))
            .update(
                reindex_status=ReindexStatus.RUNNING,
                reindex_progress=0.0,
                reindex_error="",
                reindex_started_at=now,
                reindex_finished_at=None,
                reindex_claim_token="",
                reindex_lease_expires_at=lease_end(now),
                reindex_attempts=0,
                updated_at=now,
                **moved,
            )
        )
        if not updated:
            raise ConflictError("This knowledge base is already being re-indexed.")
        # Read as started, before the commit sends the task: a worker may finish it before this returns.
        knowledge_base.refresh_from_db()
        if queue:
            task_enqueue_on_commit("knowledge_base_reindex", knowledge_base.pk, tenant.pk)
    return knowledge_base


def _identity_of_name(name: str) -> str:
    """The identity of the offered model `name`, or `name@unrecorded` when it is not offered or cannot be read: an
    identity no model has, which every query model's differs from."""
    try:
        if name in embeddings.offered_models():
            return embeddings.model_identity(name)
    except embeddings.EmbeddingModelUnavailable:
        pass
    return f"{name}@unrecorded"


def _reindex_claim(*, tenant_id: int, knowledge_base_id: int, token: str) -> bool:
    """Take the running re-index for this run, unless another live run holds it (a second delivery of the task, or the
    task queued again while the first was only slow): one conditional UPDATE, as for documents."""
    now = timezone.now()
    return bool(
        KnowledgeBase.objects.filter(tenant_id=tenant_id, pk=knowledge_base_id, reindex_status=ReindexStatus.RUNNING)
        .filter(Q(reindex_claim_token="") | Q(reindex_lease_expires_at__lt=now))
        .update(
            reindex_claim_token=token,
            reindex_lease_expires_at=lease_end(now),
            reindex_attempts=F("reindex_attempts") + 1,
            updated_at=now,
        )
    )


def _reindex_update(*, tenant_id: int, knowledge_base_id: int, token: str, **fields: Any) -> int:
    """A write of this run only, renewing its lease; 0 when another run took the re-index over (or it is gone)."""
    now = timezone.now()
    values = {"reindex_lease_expires_at": lease_end(now), "updated_at": now, **fields}
    return KnowledgeBase.objects.filter(
        tenant_id=tenant_id, pk=knowledge_base_id, reindex_claim_token=token, reindex_status=ReindexStatus.RUNNING
    ).update(**values)


def _reindex_release(*, tenant_id: int, knowledge_base_id: int, token: str) -> None:
    """Hand the re-index back before a retry, the attempt not counted (the run was not lost). The lease covers the
    retry's countdown, so only a retry that never comes makes it look lost."""
    try:
        _reindex_update(
            tenant_id=tenant_id,
            knowledge_base_id=knowledge_base_id,
            token=token,
            reindex_claim_token="",
            reindex_attempts=Greatest(F("reindex_attempts") - 1, Value(0)),
        )
    except DatabaseError:
        logger.warning("could not release re-index of knowledge base %s; its lease will run out", knowledge_base_id)


def _model_input_hashes_refresh(*, tenant_id: int, rows: Sequence[tuple[int, str, str]], model: str) -> None:
    """Record, for each (chunk id, text, recorded model input hash), what `model` reads of the text.
    A re-index onto a model whose tokenizer breaks long runs elsewhere changes it, and the embedding cache's purge keeps
    only the entries a chunk's hashes name: a stale one would let it drop the vectors the re-index has just cached. A
    chunk deleted meanwhile is left alone (the update finds no row)."""
    for pk, text, recorded in rows:
        current = model_input_hash(text, model)
        if current != recorded:
            Chunk.objects.filter(tenant_id=tenant_id, pk=pk).update(model_input_hash=current)


def _reindex_batch(
    *, tenant_id: int, knowledge_base_id: int, batch: list[tuple[int, int, str, str]], model: str, model_identity: str
) -> None:
    """Embed one batch of (chunk id, document id, text, recorded input hash) rows and upsert their vectors; a chunk
    deleted meanwhile gets none."""
    vectors, _ = embedding_cache.embeddings_cached(
        tenant_id=tenant_id,
        texts=[row[2] for row in batch],
        model_identity=model_identity,
        model=model,
    )
    _model_input_hashes_refresh(
        tenant_id=tenant_id, rows=[(pk, text, recorded) for pk, _, text, recorded in batch], model=model
    )
    text_settings = knowledge_base_text_settings(tenant_id=tenant_id, knowledge_base_ids=[knowledge_base_id]).get(
        knowledge_base_id
    )
    if text_settings is None:  # deleted meanwhile: its vectors went with it
        return
    # Each vector carries its document's metadata, what metadata filters match.
    metadata_of = dict(
        Document.objects.filter(tenant_id=tenant_id, pk__in={row[1] for row in batch}).values_list("pk", "metadata")
    )
    vectorstore.vectors_upsert(
        rows=[
            vectorstore.ChunkVector(
                chunk_id=pk,
                tenant_id=tenant_id,
                knowledge_base_id=knowledge_base_id,
                document_id=doc_id,
                vector=vector,
                text=text,
                analyzer=text_settings.analyzer,
                text_index=text_settings.text_index,
                metadata=metadata_of.get(doc_id),
            )
            for (pk, doc_id, text, _), vector in zip(batch, vectors, strict=True)
        ],
        dimension=int(vectors.shape[1]),
    )
    # A chunk deleted since the batch was read (its document deleted, or re-indexed into new chunks) must
    # not keep the vector just written for it: the run or delete that removed it has already cleaned up.
    alive = set(
        Chunk.objects.filter(tenant_id=tenant_id, pk__in=[row[0] for row in batch]).values_list("pk", flat=True)
    )
    vanished = {doc_id for pk, doc_id, _, _ in batch if pk not in alive}
    if vanished:
        kept = Chunk.objects.filter(tenant_id=tenant_id, document_id__in=vanished).values_list("pk", flat=True)
        vectorstore.vectors_delete_stale(
            tenant_id=tenant_id,
            dimension=int(vectors.shape[1]),
            document_ids=vanished,
            keep_chunk_ids=list(kept),
        )


def knowledge_base_reindex(
    *, tenant_id: int, knowledge_base_id: int, progress: Callable[[int, int], None] | None = None
) -> int:
    """Re-embed every chunk of the knowledge base's indexed documents with its model (`embedding_model`, as
    `embeddings.knowledge_base_model` resolves it) and upsert the vectors by chunk id (so it is safe to run twice); a
    vector the embedding cache holds is not encoded again. A model of another vector size writes into its own
    collection, and the knowledge base's vectors of the size it left are deleted once every chunk has its new vector.
    Returns the chunks indexed: 0 when the re-index is not running or another live run holds it.
    `progress(done, total)` is told after each batch, as `reindex_progress` is."""
    token = uuid.uuid4().hex
    if not _reindex_claim(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token):
        return 0
    claimed = KnowledgeBase.objects.filter(tenant_id=tenant_id, pk=knowledge_base_id).first()
    if claimed is None:
        return 0
    model_name = embeddings.knowledge_base_model(claimed.embedding_model)
    try:
        model_identity = embeddings.model_identity(model_name)
    except embeddings.EmbeddingModelUnavailable as exc:
        _reindex_release(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token)
        raise TransientIngestError(str(exc)) from exc
    left_dimension = claimed.embedding_dimension
    moved_from = claimed.reindex_from_model_identity
    if not knowledge_base_records_model(knowledge_base=claimed, model_identity=model_identity):
        # A model change: until a run finishes, the vectors not rebuilt yet are this model's. One already recorded (an
        # earlier model change that stopped part way) stays: its vectors are not all rebuilt either.
        moved_from = moved_from or claimed.embedding_model_identity or claimed.embedding_model
    _reindex_update(
        tenant_id=tenant_id,
        knowledge_base_id=knowledge_base_id,
        token=token,
        embedding_model=model_name,
        embedding_model_identity=model_identity,
        embedding_dimension=embeddings.embedding_dimension(model_name),
        reindex_from_model_identity=moved_from,
    )
    # A disabled chunk has no vector, and a re-index gives it none.
    chunks = Chunk.objects.filter(
        tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, document__status=DocumentStatus.INDEXED, enabled=True
    )
    total = chunks.count()
    done = 0
    last_pk = 0
    batch_size = max(1, settings.INGEST_EMBED_BATCH)
    try:
        while True:
            batch = list(
                chunks.filter(pk__gt=last_pk)
                .order_by("pk")
                .values_list("pk", "document_id", "text", "model_input_hash")[:batch_size]
            )
            if not batch:
                break
            _reindex_batch(
                tenant_id=tenant_id,
                knowledge_base_id=knowledge_base_id,
                batch=batch,
                model=model_name,
                model_identity=model_identity,
            )
            done += len(batch)
            last_pk = batch[-1][0]
            # The heartbeat: progress and a renewed lease once per batch.
            moved = _reindex_update(
                tenant_id=tenant_id,
                knowledge_base_id=knowledge_base_id,
                token=token,
                # Documents indexed meanwhile add chunks the count at the start did not know of; a retry after the
                # time limit starts its count again, but the progress shown does not go back.
                reindex_progress=Greatest(F("reindex_progress"), Value(min(1.0, done / total) if total else 1.0)),
            )
            if not moved:  # taken over after this run stalled past its lease, or deleted: the other party finishes
                return done
            if progress is not None:
                progress(done, total)
    except TRANSIENT_ERRORS as exc:
        _reindex_release(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token)
        raise TransientIngestError(str(exc)) from exc
    except SoftTimeLimitExceeded as exc:
        # A large knowledge base outlasts one task: the retry goes quickly through the vectors cached so far.
        _reindex_release(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token)
        raise TransientIngestError("the re-index took longer than the task time limit") from exc
    vectorstore.vectors_flush()
    _left_collection_clear(
        tenant_id=tenant_id,
        knowledge_base_id=knowledge_base_id,
        left=left_dimension,
        now=embeddings.embedding_dimension(model_name),
    )
    _reindex_done(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token)
    return done


def _reindex_done(*, tenant_id: int, knowledge_base_id: int, token: str) -> None:
    """The run that holds `token` marks the re-index done and lets go of its claim."""
    _reindex_update(
        tenant_id=tenant_id,
        knowledge_base_id=knowledge_base_id,
        token=token,
        reindex_status=ReindexStatus.DONE,
        reindex_progress=1.0,
        reindex_error="",
        reindex_finished_at=timezone.now(),
        reindex_claim_token="",
        reindex_lease_expires_at=None,
        reindex_from_model_identity="",  # every vector is the recorded model's now
    )


def _left_collection_clear(*, tenant_id: int, knowledge_base_id: int, left: int, now: int) -> None:
    """After a re-index onto a model of another vector size: the knowledge base's vectors in the collections of the
    size it left, searched no more, are deleted (a failure only leaves them there, unread, for a later re-index)."""
    if left == now:
        return
    try:
        vectorstore.vectors_delete(tenant_id=tenant_id, dimension=left, knowledge_base_id=knowledge_base_id)
    except vectorstore.VectorStoreUnavailable:
        logger.warning("vectors of knowledge base %s in its old model's collection left in place", knowledge_base_id)


def knowledge_base_reindex_fail(*, tenant_id: int, knowledge_base_id: int, reason: str) -> None:
    """The last word of a re-index task whose transient failures outlasted every retry: the re-index fails with the
    reason, unless another run took it up since this task's last try handed it back (the stalled-re-index sweep's,
    once this task's lease ran out): that run is left to finish it."""
    KnowledgeBase.objects.filter(
        tenant_id=tenant_id, pk=knowledge_base_id, reindex_status=ReindexStatus.RUNNING, reindex_claim_token=""
    ).update(
        reindex_status=ReindexStatus.FAILED,
        reindex_error=reason[:2000],
        reindex_finished_at=timezone.now(),
        reindex_claim_token="",
        reindex_lease_expires_at=None,
    )


def knowledge_base_reindexes_recover() -> int:
    """Queue again every re-index whose run was lost: marked running, its lease run out (the worker was killed, or the
    task never reached one). The status message says so; the new run goes quickly through the vectors cached so far.
    After INGEST_MAX_ATTEMPTS lost runs it fails with the reason instead. Crosses tenants by design, as
    `documents_recover_stalled` does; claiming makes a duplicate queueing harmless. Returns how many were requeued."""
    now = timezone.now()
    lost = KnowledgeBase.objects.unscoped().filter(_reindex_lost(now))
    stamp = f"{now:%Y-%m-%d %H:%M} UTC"
    failed = lost.filter(reindex_attempts__gte=settings.INGEST_MAX_ATTEMPTS).update(
        reindex_status=ReindexStatus.FAILED,
        reindex_error=(
            f"The re-index was interrupted {settings.INGEST_MAX_ATTEMPTS} times (its worker stopped while running it); "
            f"given up at {stamp}. Check the workers' logs, then start the re-index again."
        ),
        reindex_finished_at=now,
        reindex_claim_token="",
        reindex_lease_expires_at=None,
        updated_at=now,
    )
    if failed:
        logger.warning("%s knowledge-base re-indexes failed after repeated interruptions", failed)
    requeued = knowledge_base_lost_runs_requeue(
        lost=_reindex_lost(now),
        claim={
            "reindex_claim_token": "",
            "reindex_lease_expires_at": lease_end(now),
            "reindex_error": (
                "The re-index stopped making progress (its worker stopped or its task was lost) and was queued again "
                f"at {stamp}; it goes on from where it was."
            ),
            "updated_at": now,
        },
        enqueue=task_get("knowledge_base_reindex").delay,
    )
    if requeued:
        logger.info("requeued %s lost knowledge-base re-indexes", requeued)
    return requeued
