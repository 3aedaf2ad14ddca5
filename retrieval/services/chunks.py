"""A chunk changed by hand: its text edited, or the chunk disabled and enabled again.

Each change reaches Milvus in the same request (the edited text embedded and upserted under the chunk's id, a
disabled chunk's vector deleted, an enabled one's upserted), inside the transaction that writes the row: Milvus
down is a 503 and the row is left as it was. An edit changes the chunk's `content_hash`, which is what a stored
answer is checked against before it is served (`conversations.turn.sources.stored_sources`), so an answer
citing the chunk as it was is never served again.

An edited document is indexed from then on from its chunks as they stand (its source becomes `chunks`), so a
re-index of it keeps the edit instead of cutting its file or text again.
"""

from __future__ import annotations

import hashlib

from django.db import transaction
from django.utils import timezone

from kbplatform.errors import ApplicationError, ConflictError, NotFoundError
from retrieval import embedding_cache, embeddings, vectorstore
from retrieval.chunking import (
    chunk_token_limit,
    chunk_too_long_message,
    model_input_hash,
    text_hash,
)
from retrieval.models import Chunk, Document, DocumentStatus, ReindexStatus, SourceKind
from retrieval.selectors import knowledge_base_records_model, knowledge_base_text_settings
from tenants.models import Tenant


def _text_checked(*, text: str, position: int, external_id: str | None, chunk_max_tokens: int, model: str) -> int:
    """The tokens `model` reads of `text`, or a 400 when indexing would refuse it."""
    if not text.strip():
        raise ApplicationError("A chunk needs some text.", extra={"fields": {"text": ["A chunk needs some text."]}})
    model_max_tokens = embeddings.max_sequence_tokens(model)
    max_tokens = chunk_token_limit(requested=chunk_max_tokens, model_max_tokens=model_max_tokens)
    (count,) = embeddings.token_counts([text], model)
    if count == 0:
        message = "The text has nothing the embedding model reads (only invisible, control or formatting characters)."
        raise ApplicationError(message, extra={"fields": {"text": [message]}})
    if count > max_tokens:
        message = chunk_too_long_message(
            position=position,
            external_id=external_id,
            count=count,
            max_tokens=max_tokens,
            model_max_tokens=model_max_tokens,
        )
        raise ApplicationError(message, extra={"code": "chunk_refused", "fields": {"text": [message]}})
    return count


def _vector_upsert(*, tenant: Tenant, chunk: Chunk, document: Document) -> None:
    knowledge_base = document.knowledge_base
    model = embeddings.knowledge_base_model(knowledge_base.embedding_model)
    model_identity = embeddings.model_identity(model)
    if not knowledge_base_records_model(knowledge_base=knowledge_base, model_identity=model_identity):
        raise ConflictError(
            "The knowledge base's vectors were made by another embedding model than this server's; re-index the "
            "knowledge base before changing its chunks.",
            extra={"code": "embedding_model_mismatch", "knowledge_base": knowledge_base.pk},
        )
    vectors, _ = embedding_cache.embeddings_cached(
        tenant_id=tenant.pk, texts=[chunk.text], model_identity=model_identity, model=model
    )
    # Read just before the write, as every writer does: a move to the full-text collection that started meanwhile
    # gets the chunk in both collections.
    text_settings = knowledge_base_text_settings(tenant_id=tenant.pk, knowledge_base_ids=[knowledge_base.pk])[
        knowledge_base.pk
    ]
    vectorstore.vectors_upsert(
        rows=[
            vectorstore.ChunkVector(
                chunk_id=chunk.pk,
                tenant_id=tenant.pk,
                knowledge_base_id=chunk.knowledge_base_id,
                document_id=chunk.document_id,
                vector=vectors[0],
                text=chunk.text,
                analyzer=text_settings.analyzer,
                text_index=text_settings.text_index,
                metadata=document.metadata,
            )
        ],
        dimension=int(vectors.shape[1]),
    )


def _document_source_from_chunks(*, tenant: Tenant, document: Document) -> None:
    """Make the document's stored source its chunks as they now stand, so indexing it again keeps them."""
    rows = list(
        Chunk.objects.for_tenant(tenant)
        .filter(document=document)
        .order_by("position")
        .values_list("text", "external_id")
    )
    source_chunks = [{"text": text, "external_id": external_id} for text, external_id in rows]
    joined = "\x1e".join(text for text, _ in rows).encode("utf-8")
    Document.objects.for_tenant(tenant).filter(pk=document.pk).update(
        source_kind=SourceKind.CHUNKS,
        source_chunks=source_chunks,
        source_text="",
        split_oversize_chunks=False,
        content_hash=hashlib.sha256(joined).hexdigest(),
        size_bytes=len(joined),
        updated_at=timezone.now(),
    )


def chunk_update(*, tenant: Tenant, chunk: Chunk, text: str | None = None, enabled: bool | None = None) -> Chunk:
    """Edit a chunk's text and/or enable or disable it, in the database and in Milvus together. Only a chunk of an
    indexed document (409 while it is queued or being indexed, whose run would replace the chunk rows), and not while
    its knowledge base is re-indexed (409)."""
    if chunk.tenant_id != tenant.pk:
        raise ApplicationError("The chunk belongs to another tenant.")
    with transaction.atomic():
        document = (
            Document.objects.for_tenant(tenant)
            .select_for_update()
            .select_related("knowledge_base")
            .filter(pk=chunk.document_id)
            .first()
        )
        current = Chunk.objects.for_tenant(tenant).select_for_update().filter(pk=chunk.pk).first()
        if document is None or current is None:
            raise NotFoundError("Chunk not found.")
        if document.status != DocumentStatus.INDEXED:
            raise ConflictError(
                f"The chunk's document is {document.status}, not indexed: change its chunks once it is indexed.",
                extra={"document_id": document.pk, "status": document.status},
            )
        if document.knowledge_base.reindex_status == ReindexStatus.RUNNING:
            # The re-index writes every chunk's vector from the rows it read: it could put the old text's back.
            raise ConflictError(
                "The knowledge base is being re-indexed: change its chunks once the re-index has finished.",
                extra={"knowledge_base": document.knowledge_base_id, "reindex_status": ReindexStatus.RUNNING},
            )
        model = embeddings.knowledge_base_model(document.knowledge_base.embedding_model)
        edited = text is not None and text != current.text
        if edited:
            current.token_count = _text_checked(
                text=text,
                position=current.position,
                external_id=current.external_id,
                chunk_max_tokens=document.knowledge_base.chunk_max_tokens,
                model=model,
            )
            current.text = text
            current.content_hash = text_hash(text)
            current.model_input_hash = model_input_hash(text, model)
        was_enabled = current.enabled
        if enabled is not None:
            current.enabled = enabled
        current.save(update_fields=["text", "token_count", "content_hash", "model_input_hash", "enabled"])
        if edited:
            _document_source_from_chunks(tenant=tenant, document=document)
        with vectorstore.outage_message("The search index is unavailable; the chunk was not changed. Retry later."):
            if current.enabled and (edited or not was_enabled):
                _vector_upsert(tenant=tenant, chunk=current, document=document)
            elif not current.enabled and was_enabled:
                vectorstore.vectors_delete(
                    tenant_id=tenant.pk,
                    dimension=document.knowledge_base.embedding_dimension,
                    chunk_ids=[current.pk],
                )
    if edited or was_enabled != current.enabled:
        # Into an indexed segment, as an indexing run does before it says indexed.
        vectorstore.vectors_flush()
    return current
