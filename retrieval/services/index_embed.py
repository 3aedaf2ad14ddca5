"""The last stages of an indexing run: embed the stored chunks in batches (through the embedding cache), upsert their
vectors into Milvus by chunk id, write progress once per batch, and finish the documents the run still holds.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Sequence

from django.conf import settings
from django.db.models import Case, FloatField, Value, When
from django.utils import timezone

from retrieval import embedding_cache, embeddings, vectorstore
from retrieval.models import Chunk, Document, DocumentStatus
from retrieval.selectors import TextSettings, knowledge_base_text_settings
from retrieval.services.index_runs import (
    PROGRESS_CHUNKED,
    IndexRun,
    documents_held,
    run_update,
)

logger = logging.getLogger(__name__)


def _progress_embedded(done: int, total: int) -> float:
    return PROGRESS_CHUNKED + (1 - PROGRESS_CHUNKED) * done / total


def chunks_embed(
    *,
    run: IndexRun,
    tenant_id: int,
    token: str,
    documents: list[Document],
    stored: dict[int, list[tuple[int, str, str]]],
    disabled: set[int],
) -> None:
    """Embed the stored chunks (through the cache) with their knowledge base's model and upsert their vectors, batch
    by batch, each batch of one model; progress once per batch. A document deleted or taken over meanwhile gets no
    vectors from here, nor does a disabled chunk. Each vector carries its document's metadata."""
    model_of = {
        document.pk: embeddings.knowledge_base_model(document.knowledge_base.embedding_model) for document in documents
    }
    flat = [(doc_id, pk, text, content_hash) for doc_id, rows in stored.items() for pk, text, content_hash in rows]
    flat.sort(key=lambda row: model_of[row[0]])  # stable: each document's chunks stay in order
    totals = {doc_id: len(rows) for doc_id, rows in stored.items()}
    done: dict[int, int] = defaultdict(int)
    kb_of = {document.pk: document.knowledge_base for document in documents}
    metadata_of = {document.pk: document.metadata for document in documents}
    batch_size = max(1, settings.INGEST_EMBED_BATCH)
    batches = [
        group[start : start + batch_size]
        for _, rows in itertools.groupby(flat, key=lambda row: model_of[row[0]])
        for group in [list(rows)]
        for start in range(0, len(group), batch_size)
    ]
    for batch in batches:
        model = model_of[batch[0][0]]
        vectors, encoded = embedding_cache.embeddings_cached(
            tenant_id=tenant_id,
            texts=[row[2] for row in batch],
            model_identity=embeddings.model_identity(model),
            model=model,
        )
        run.encoded += encoded
        dimension = int(vectors.shape[1])
        # Asked after encoding, the slow part: a document deleted or taken over meanwhile gets no vectors from here.
        held = documents_held(tenant_id=tenant_id, token=token, document_ids=totals)
        text_settings = knowledge_base_text_settings(
            tenant_id=tenant_id, knowledge_base_ids={kb_of[doc_id].pk for doc_id, *_ in batch}
        )
        vectorstore.vectors_upsert(
            rows=[
                vectorstore.ChunkVector(
                    chunk_id=pk,
                    tenant_id=tenant_id,
                    knowledge_base_id=kb_of[doc_id].pk,
                    document_id=doc_id,
                    vector=vector,
                    text=text,
                    analyzer=text_settings[kb_of[doc_id].pk].analyzer,
                    text_index=text_settings[kb_of[doc_id].pk].text_index,
                    metadata=metadata_of[doc_id],
                )
                for (doc_id, pk, text, _), vector in zip(batch, vectors, strict=True)
                if doc_id in held and kb_of[doc_id].pk in text_settings and pk not in disabled
            ],
            dimension=dimension,
        )
        touched = set()
        for doc_id, *_ in batch:
            done[doc_id] += 1
            touched.add(doc_id)
        run_update(
            tenant_id=tenant_id,
            token=token,
            document_ids=touched,
            progress=Case(
                *(When(pk=doc_id, then=Value(_progress_embedded(done[doc_id], totals[doc_id]))) for doc_id in touched),
                output_field=FloatField(),
            ),
        )
    run.chunks += len(flat)


def documents_finish(
    *,
    run: IndexRun,
    tenant_id: int,
    token: str,
    documents: list[Document],
    stored: dict[int, list[tuple[int, str, str]]],
    had_rows: set[int],
    disabled: set[int],
) -> None:
    """Delete the vectors of chunks that no longer exist, mark the documents still held indexed, and take the
    vectors of any deleted meanwhile back out."""
    document_ids = [document.pk for document in documents]
    # Vectors of chunks that no longer exist (earlier runs of changed or interrupted documents, and of failed ones
    # whose vectors Milvus could not delete then) go.
    run_update(tenant_id=tenant_id, token=token, document_ids=document_ids, status=DocumentStatus.INDEXING)
    # Only for documents still held: for one taken over, "stale" would mean the new run's chunks.
    held = documents_held(tenant_id=tenant_id, token=token, document_ids=document_ids)
    cleanup = [
        document
        for document in documents
        if document.pk in held and (document.pk in had_rows or document.attempts > 1 or document.failed_at is not None)
    ]
    if cleanup:
        vectorstore.vectors_delete_stale(
            tenant_id=tenant_id,
            dimension=cleanup[0].knowledge_base.embedding_dimension,
            document_ids=[document.pk for document in cleanup],
            keep_chunk_ids=[pk for document in cleanup for pk, _, _ in stored[document.pk] if pk not in disabled],
        )
    # Into an indexed segment before the status says indexed: from then on a search reads them through the index, and
    # a count or search never meets the flush of this run's own writes half done.
    vectorstore.vectors_flush()
    finished = timezone.now()
    run_update(
        tenant_id=tenant_id,
        token=token,
        document_ids=document_ids,
        status=DocumentStatus.INDEXED,
        progress=1.0,
        indexed_at=finished,
        claim_token="",
        lease_expires_at=None,
    )
    run.indexed = [doc_id for doc_id in document_ids if doc_id in held]
    # A document deleted while it was being indexed must not leave vectors behind.
    still_there = set(Document.objects.filter(tenant_id=tenant_id, pk__in=document_ids).values_list("pk", flat=True))
    gone = [doc_id for doc_id in document_ids if doc_id not in still_there]
    if gone:
        vectorstore.vectors_delete(
            tenant_id=tenant_id, dimension=documents[0].knowledge_base.embedding_dimension, document_ids=gone
        )
        run.indexed = [doc_id for doc_id in run.indexed if doc_id in still_there]


def chunk_vectors_upsert(*, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]], dimension: int) -> int:
    """Write the vectors of stored chunk rows to Milvus, each under its own tenant, knowledge base and document
    (for loaders that create chunk rows themselves: evaluation benches and tests)."""
    text_settings: dict[tuple[int, int], TextSettings] = {}
    for tenant_id in {chunk.tenant_id for chunk in chunks}:
        found = knowledge_base_text_settings(
            tenant_id=tenant_id,
            knowledge_base_ids={chunk.knowledge_base_id for chunk in chunks if chunk.tenant_id == tenant_id},
        )
        text_settings.update({(tenant_id, pk): settings_ for pk, settings_ in found.items()})
    metadata_of = dict(  # across the chunks' tenants, as the loop above: each chunk names its document
        Document.objects.unscoped().filter(pk__in={chunk.document_id for chunk in chunks}).values_list("pk", "metadata")
    )
    return vectorstore.vectors_upsert(
        rows=[
            vectorstore.ChunkVector(
                chunk_id=chunk.pk,
                tenant_id=chunk.tenant_id,
                knowledge_base_id=chunk.knowledge_base_id,
                document_id=chunk.document_id,
                vector=vector,
                text=chunk.text,
                analyzer=text_settings[(chunk.tenant_id, chunk.knowledge_base_id)].analyzer,
                text_index=text_settings[(chunk.tenant_id, chunk.knowledge_base_id)].text_index,
                metadata=metadata_of.get(chunk.document_id),
            )
            for chunk, vector in zip(chunks, vectors, strict=True)
        ],
        dimension=dimension,
    )
