"""Documents: creation (one, or many at once), deletion, re-indexing one, and queueing their indexing."""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import get_valid_filename

from kbplatform.errors import ApplicationError, ConflictError, NotFoundError
from kbplatform.jobs import task_enqueue_on_commit
from kbplatform.text import text_storable
from retrieval import embeddings, vectorstore
from retrieval.chunking import ChunkRefusedError, chunk_token_limit, prechunked_drafts
from retrieval.metadata import MetadataError, metadata_validate
from retrieval.models import Document, DocumentStatus, KnowledgeBase, SourceKind
from retrieval.parsing import DocumentParseError, file_size_check
from retrieval.services.index_runs import IN_PROGRESS
from tenants.models import Tenant

if TYPE_CHECKING:
    from django.core.files.storage import Storage

logger = logging.getLogger(__name__)

# --- documents: creation -----------------------------------------------------------------------------------


def _external_id_check(*, tenant: Tenant, knowledge_base: KnowledgeBase, external_id: str | None) -> None:
    if external_id is None:
        return
    existing = (
        Document.objects.for_tenant(tenant)
        .filter(knowledge_base=knowledge_base, external_id=external_id)
        .values_list("pk", flat=True)
        .first()
    )
    if existing is not None:
        raise ConflictError(
            f"A document with external_id {external_id!r} already exists in this knowledge base. Delete document "
            f"{existing} first to replace it, or send another external_id to keep both.",
            extra={"external_id": external_id, "document_id": existing},
        )


# Room below the 255 bytes a file system allows per name, for the suffix the storage adds when a name is taken.
STORED_NAME_MAX_BYTES = 120
_STORED_EXTENSION_MAX_BYTES = 16


def _utf8_prefix(text: str, max_bytes: int) -> str:
    return text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")


def stored_file_name(client_name: str) -> str:
    """The name an upload is stored under: the client's file name under Django's valid-name rules, at most
    STORED_NAME_MAX_BYTES of UTF-8 with its extension kept, never empty or hidden. Any name a client sends can be
    stored this way; the name as sent is kept in `source_filename`."""
    try:
        name = get_valid_filename(client_name)
    except SuspiciousFileOperation:
        name = ""
    if name.startswith("."):
        name = f"upload{name}"  # not a hidden file: ".pdf" is what is left of "@#$.pdf"
    stem, extension = os.path.splitext(name)
    extension = _utf8_prefix(extension, _STORED_EXTENSION_MAX_BYTES)
    stem = _utf8_prefix(stem, STORED_NAME_MAX_BYTES - len(extension.encode("utf-8")))
    return f"{stem or 'upload'}{extension}"


def metadata_checked(metadata: object) -> dict:
    """A document's metadata as stored (`retrieval.metadata.metadata_validate`), or a 400 saying what is wrong."""
    try:
        return metadata_validate(metadata)
    except MetadataError as exc:
        raise ApplicationError(str(exc), extra={"fields": {"metadata": [str(exc)]}}) from exc


def _chunks_upload_check(*, knowledge_base: KnowledgeBase, chunks: Sequence[dict], split_oversize: bool) -> None:
    """Refuse at upload (400) a client's chunk that indexing would refuse (longer than the knowledge base's chunk
    size, or with nothing the model reads), counted as indexing counts it. When the model's tokenizer cannot be read
    here, the count is left to indexing, which records the same message on the document."""
    try:
        model = embeddings.knowledge_base_model(knowledge_base.embedding_model)
        model_max_tokens = embeddings.max_sequence_tokens(model)
        prechunked_drafts(
            chunks=list(chunks),
            max_tokens=chunk_token_limit(requested=knowledge_base.chunk_max_tokens, model_max_tokens=model_max_tokens),
            model_max_tokens=model_max_tokens,
            split_oversize=split_oversize,
            model=model,
        )
    except embeddings.EmbeddingModelUnavailable:
        logger.warning("chunks not counted at upload: the embedding model is unavailable", exc_info=True)
    except ChunkRefusedError as exc:
        raise ApplicationError(str(exc), extra={"code": "chunk_refused", "fields": {"chunks": [str(exc)]}}) from exc


def document_create(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    title: str = "",
    external_id: str | None = None,
    file: UploadedFile | None = None,
    text: str | None = None,
    chunks: Sequence[dict] | None = None,
    metadata: dict | None = None,
    split_oversize_chunks: bool = False,
) -> Document:
    """Store a document (uploaded file, text, or the client's own chunks) and queue it for indexing once the
    transaction commits. A file over the size limit is recorded as failed with the reason, without storing
    its bytes. A client's chunk that indexing would refuse is refused here (400), before anything is stored."""
    return _document_store(
        tenant=tenant,
        knowledge_base=knowledge_base,
        title=title,
        external_id=external_id,
        file=file,
        text=text,
        chunks=chunks,
        metadata=metadata,
        split_oversize_chunks=split_oversize_chunks,
        enqueue=True,
    )


def _document_store(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    title: str,
    external_id: str | None,
    file: UploadedFile | None,
    text: str | None,
    chunks: Sequence[dict] | None,
    metadata: dict | None,
    split_oversize_chunks: bool,
    enqueue: bool,
) -> Document:
    """`document_create`'s work; with `enqueue` false the caller queues the document (one task for a batch)."""
    if knowledge_base.tenant_id != tenant.pk:
        raise ApplicationError("The knowledge base belongs to another tenant.")
    if sum(source is not None for source in (file, text, chunks)) != 1:
        raise ApplicationError('Send exactly one of "file", "text" or "chunks".')
    metadata = metadata_checked(metadata if metadata is not None else {})
    if chunks is not None:
        _chunks_upload_check(knowledge_base=knowledge_base, chunks=chunks, split_oversize=split_oversize_chunks)
    _external_id_check(tenant=tenant, knowledge_base=knowledge_base, external_id=external_id)
    document = Document(
        tenant=tenant,
        knowledge_base=knowledge_base,
        title=title[:500],
        external_id=external_id,
        metadata=metadata,
        split_oversize_chunks=split_oversize_chunks,
    )
    failure = ""
    if file is not None:
        document.source_kind = SourceKind.FILE
        document.source_filename = (file.name or "upload")[-255:]
        declared_type = getattr(file, "content_type", "") or ""
        # Only informative (the parser detects the kind from the bytes); NUL and other controls cannot be stored.
        document.content_type = declared_type[:100] if declared_type.isprintable() else ""
        document.size_bytes = file.size or 0
        document.title = document.title or document.source_filename
        try:
            file_size_check(size_bytes=document.size_bytes, max_bytes=settings.MAX_UPLOAD_BYTES)
        except DocumentParseError as exc:
            failure = str(exc)
        else:
            digest = hashlib.sha256()
            for block in file.chunks():
                digest.update(block)
            document.content_hash = digest.hexdigest()
            file.seek(0)
    elif text is not None:
        document.source_kind = SourceKind.TEXT
        document.source_text = text
        document.size_bytes = len(text.encode("utf-8"))
        document.content_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
        document.title = document.title or (text.strip().splitlines() or ["Untitled"])[0][:200]
    else:
        document.source_kind = SourceKind.CHUNKS
        document.source_chunks = [
            {"text": str(chunk["text"]), "external_id": chunk.get("external_id") or None} for chunk in chunks
        ]
        joined = "\x1e".join(chunk["text"] for chunk in document.source_chunks)
        document.size_bytes = len(joined.encode("utf-8"))
        document.content_hash = hashlib.sha256(joined.encode("utf-8")).hexdigest()
        document.title = document.title or "Untitled"
    if failure:
        document.status = DocumentStatus.FAILED
        document.error_message = failure
        document.failed_at = timezone.now()
    stored_name = ""
    try:
        with transaction.atomic():
            if file is not None and not failure:
                document.source_file.save(stored_file_name(document.source_filename), file, save=False)
                stored_name = document.source_file.name
            document.save()
            if not failure and enqueue:
                documents_enqueue(tenant_id=tenant.pk, document_ids=[document.pk])
    except BaseException as exc:
        # The row was rolled back: the file written for it belongs to nothing now (the storage is not
        # transactional), so it goes too, whatever the failure.
        if stored_name:
            _stored_file_discard(storage=document.source_file.storage, name=stored_name)
        if isinstance(exc, IntegrityError):
            _external_id_check(tenant=tenant, knowledge_base=knowledge_base, external_id=external_id)
            raise ConflictError("The document could not be stored; send it again.") from exc
        raise
    return document


def _stored_file_discard(*, storage: Storage, name: str) -> None:
    try:
        storage.delete(name)
    except OSError:
        logger.warning("could not delete %s after its document was rolled back", name, exc_info=True)


@dataclass
class BulkDocument:
    """One document of a bulk import (the ingest command, benchmarks): text, or a file's bytes. For a file over
    MAX_UPLOAD_BYTES, `file_size` alone is enough (it is recorded as failed): its bytes need not be read."""

    title: str
    external_id: str | None = None
    text: str | None = None
    file_name: str | None = None
    file_bytes: bytes | None = None
    file_size: int | None = None


def documents_create_bulk(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, documents: Sequence[BulkDocument]
) -> list[Document]:
    """Store many documents in one transaction and queue them in tasks of INGEST_DOCUMENTS_PER_TASK, so the
    worker encodes large batches. Documents whose external_id already exists in the knowledge base are
    skipped (a re-run of an import does not duplicate them). When it raises, nothing is stored, not even a file."""
    if knowledge_base.tenant_id != tenant.pk:
        raise ApplicationError("The knowledge base belongs to another tenant.")
    documents = [_bulk_document_storable(item) for item in documents]
    longest = Document._meta.get_field("external_id").max_length
    too_long = [doc.external_id for doc in documents if doc.external_id is not None and len(doc.external_id) > longest]
    if too_long:
        raise ApplicationError(
            f"An external id (for a folder: a file's path under it) is at most {longest} characters; "
            f"{len(too_long)} are longer, such as {too_long[0]!r}. Shorten them and run the import again.",
            extra={"external_ids": too_long[:10]},
        )
    wanted = {doc.external_id for doc in documents if doc.external_id is not None}
    existing: set[str] = set()
    wanted_list = list(wanted)
    for start in range(0, len(wanted_list), 500):
        existing.update(
            Document.objects.for_tenant(tenant)
            .filter(knowledge_base=knowledge_base, external_id__in=wanted_list[start : start + 500])
            .values_list("external_id", flat=True)
        )
    seen: set[str] = set()
    created: list[Document] = []
    stored_names: list[str] = []
    try:
        with transaction.atomic():
            for item in documents:
                if item.external_id is not None and (item.external_id in existing or item.external_id in seen):
                    continue
                if item.external_id is not None:
                    seen.add(item.external_id)
                document = Document(
                    tenant=tenant, knowledge_base=knowledge_base, title=item.title[:500], external_id=item.external_id
                )
                if item.file_bytes is not None:
                    document.source_kind = SourceKind.FILE
                    document.source_filename = (item.file_name or "upload")[-255:]
                    document.size_bytes = len(item.file_bytes) if item.file_size is None else item.file_size
                    try:
                        file_size_check(size_bytes=document.size_bytes, max_bytes=settings.MAX_UPLOAD_BYTES)
                    except DocumentParseError as exc:
                        document.status = DocumentStatus.FAILED
                        document.error_message = str(exc)
                        document.failed_at = timezone.now()
                    else:
                        document.content_hash = hashlib.sha256(item.file_bytes).hexdigest()
                        document.source_file.save(
                            stored_file_name(document.source_filename), ContentFile(item.file_bytes), save=False
                        )
                        stored_names.append(document.source_file.name)
                else:
                    text = item.text or ""
                    document.source_kind = SourceKind.TEXT
                    document.source_text = text
                    document.size_bytes = len(text.encode("utf-8"))
                    document.content_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
                created.append(document)
            Document.objects.bulk_create(created, batch_size=500)
            documents_enqueue(
                tenant_id=tenant.pk,
                document_ids=[doc.pk for doc in created if doc.status == DocumentStatus.QUEUED],
            )
    except BaseException as exc:
        # The rows were rolled back: the files written for them belong to nothing now, whatever the failure.
        storage = Document._meta.get_field("source_file").storage
        for name in stored_names:
            _stored_file_discard(storage=storage, name=name)
        if isinstance(exc, IntegrityError):
            raise ConflictError(
                "Another import added some of these documents meanwhile; run the import again (the documents "
                "already in the knowledge base are skipped)."
            ) from exc
        raise
    return created


def _bulk_document_storable(item: BulkDocument) -> BulkDocument:
    """`item` with its text fields as PostgreSQL can store them (`text_storable`: NUL dropped, a lone surrogate
    replaced), as the parsers leave an uploaded file's text: a JSON row's `\\ud835`, or a file name in another
    encoding than the file system's (Python reads each byte it cannot decode as a lone surrogate), costs its character,
    not the import. The same input always gives the same external id, so a re-run still skips what is there."""
    return replace(
        item,
        title=text_storable(item.title),
        external_id=None if item.external_id is None else text_storable(item.external_id),
        text=None if item.text is None else text_storable(item.text),
        file_name=None if item.file_name is None else text_storable(item.file_name),
    )


@dataclass(frozen=True)
class DocumentInput:
    """One document of a bulk request, as the single-document endpoint takes it."""

    title: str = ""
    external_id: str | None = None
    text: str | None = None
    chunks: Sequence[dict] | None = None
    metadata: dict | None = None
    split_oversize_chunks: bool = False


def documents_create_each(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, documents: Sequence[DocumentInput]
) -> list[Document | ApplicationError]:
    """Store each document as `document_create` would, answering per document: the stored document, or the error
    that document alone met (a duplicate external_id is the same 409, an oversize chunk the same 400), so one bad
    document does not sink the others. The stored ones are queued in ONE indexing task once the transaction commits
    (the task's run claims and indexes them, each with its own status; a lost task or a killed worker leaves them to
    `documents_recover_stalled`, as any queued document)."""
    if knowledge_base.tenant_id != tenant.pk:
        raise ApplicationError("The knowledge base belongs to another tenant.")
    outcomes: list[Document | ApplicationError] = []
    with transaction.atomic():
        for item in documents:
            try:
                outcomes.append(
                    _document_store(
                        tenant=tenant,
                        knowledge_base=knowledge_base,
                        title=item.title,
                        external_id=item.external_id,
                        file=None,
                        text=item.text,
                        chunks=item.chunks,
                        metadata=item.metadata,
                        split_oversize_chunks=item.split_oversize_chunks,
                        enqueue=False,
                    )
                )
            except ApplicationError as exc:
                outcomes.append(exc)
        queued = [o.pk for o in outcomes if isinstance(o, Document) and o.status == DocumentStatus.QUEUED]
        documents_enqueue(tenant_id=tenant.pk, document_ids=queued, per_task=max(1, len(queued)))
    return outcomes


def document_update(
    *, tenant: Tenant, document: Document, title: str | None = None, metadata: dict | None = None
) -> Document:
    """Change a document's title or metadata. New metadata reaches its vectors by indexing it again (its chunks and
    cached vectors are kept, so nothing is re-embedded); until that run finishes, searches filter by the old
    metadata. Refused (409) while a run is indexing it, whose vectors would carry the old metadata."""
    if document.tenant_id != tenant.pk:
        raise ApplicationError("The document belongs to another tenant.")
    fields: dict = {}
    if title is not None:
        fields["title"] = title[:500]
    if metadata is not None:
        fields["metadata"] = metadata_checked(metadata)
    now = timezone.now()
    with transaction.atomic():
        rows = Document.objects.for_tenant(tenant).select_for_update().filter(pk=document.pk)
        current = rows.values("status", "lease_expires_at", "metadata").first()
        if current is None:
            raise NotFoundError("Document not found.")
        metadata_changed = "metadata" in fields and fields["metadata"] != current["metadata"]
        running = current["status"] in IN_PROGRESS and (
            current["lease_expires_at"] is not None and current["lease_expires_at"] >= now
        )
        if metadata_changed and running:
            raise ConflictError("The document is being indexed right now; change its metadata when it has finished.")
        if fields:
            rows.update(**fields, updated_at=now)
        if metadata_changed and current["status"] == DocumentStatus.INDEXED:
            rows.update(
                status=DocumentStatus.QUEUED,
                progress=0.0,
                attempts=0,
                error_message="",
                claim_token="",
                lease_expires_at=None,
            )
            documents_enqueue(tenant_id=tenant.pk, document_ids=[document.pk])
    document.refresh_from_db()
    return document


def documents_enqueue(*, tenant_id: int, document_ids: Sequence[int], per_task: int | None = None) -> None:
    """Queue indexing after the surrounding transaction commits (the worker must see the rows). A broker that
    is down loses nothing: the documents stay queued and `documents_recover_stalled` queues them again.

    The documents are stamped with a new `queue_token`, which their tasks carry: from here on only these tasks may
    fail them when their retries run out (`documents_fail_after_retries`), not a task of an earlier queueing still
    waiting to retry. `per_task` documents go in one task (INGEST_DOCUMENTS_PER_TASK unless given: a bulk request
    sends its batch as one)."""
    ids = list(document_ids)
    queue_token = uuid.uuid4().hex
    for start in range(0, len(ids), 500):
        Document.objects.filter(tenant_id=tenant_id, pk__in=ids[start : start + 500]).update(queue_token=queue_token)
    size = max(1, per_task or settings.INGEST_DOCUMENTS_PER_TASK)
    for start in range(0, len(ids), size):
        group = ids[start : start + size]
        if len(group) == 1:
            task_enqueue_on_commit("document_index", group[0], tenant_id, queue_token=queue_token)
        else:
            task_enqueue_on_commit("documents_index_batch", group, tenant_id, queue_token=queue_token)


# --- documents: delete and re-index ---------------------------------------------------------------------


def document_delete(*, tenant: Tenant, document: Document) -> None:
    """Remove the document's vectors, then the document, its chunks and its stored file. If Milvus is down the
    document stays (503 to the client), so no vector is left behind for a row that is gone."""
    if document.tenant_id != tenant.pk:
        raise ApplicationError("The document belongs to another tenant.")
    dimension = document.knowledge_base.embedding_dimension
    with vectorstore.outage_message("The search index is unavailable; the document was kept. Retry later."):
        vectorstore.vectors_delete(tenant_id=tenant.pk, dimension=dimension, document_ids=[document.pk])
    source_file = document.source_file if document.source_file else None
    with transaction.atomic():
        # A run writing the document's chunk rows holds its row: wait for it, so its rows go too.
        list(Document.objects.for_tenant(tenant).select_for_update().filter(pk=document.pk).values_list("pk"))
        Document.objects.for_tenant(tenant).filter(pk=document.pk).delete()
        # A run that upserted after the delete above and still saw the row when it finished (it deletes its vectors
        # itself when it sees the row gone) left vectors behind: they go once the row is gone for good.
        transaction.on_commit(
            lambda: vectorstore.vectors_delete(tenant_id=tenant.pk, dimension=dimension, document_ids=[document.pk]),
            robust=True,
        )
        if source_file is not None:
            name, storage = source_file.name, source_file.storage
            transaction.on_commit(lambda: storage.delete(name), robust=True)


def document_reindex(*, tenant: Tenant, document: Document) -> Document:
    """Queue the document again from its stored source. Unchanged chunks keep their ids and cached vectors."""
    now = timezone.now()
    with transaction.atomic():
        updated = (
            Document.objects.for_tenant(tenant)
            .filter(pk=document.pk)
            .filter(~Q(status__in=IN_PROGRESS) | Q(lease_expires_at__lt=now))
            .update(
                status=DocumentStatus.QUEUED,
                progress=0.0,
                attempts=0,
                error_message="",
                claim_token="",
                lease_expires_at=None,
                updated_at=now,
            )
        )
        if not updated:
            raise ConflictError("The document is being indexed right now; re-index it when it has finished.")
        if document.source_kind == SourceKind.FILE and not document.source_file:
            raise ApplicationError("The document's file was never stored (it was refused); upload it again.")
        documents_enqueue(tenant_id=tenant.pk, document_ids=[document.pk])
    document.refresh_from_db()
    return document
