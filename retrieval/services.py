"""Writes of the ingestion side: knowledge bases, documents, and the indexing pipeline the worker runs.

The pipeline (`documents_index`) is safe to run twice on the same documents, at the same time or after a
crash:
- a run claims documents with one conditional UPDATE (queued, or in progress with an expired lease) and
  stamps them with its token; every later write of the run is conditional on that token;
- a document's chunk rows are replaced in one transaction only when its chunks changed, so chunk ids are
  stable across re-runs; vectors are upserted by chunk id, and vectors of chunks that no longer exist are
  deleted, so a re-run never duplicates anything;
- progress is written once per embedding batch (a few hundred chunks), never per chunk.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import UploadedFile
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import Case, Exists, F, FloatField, IntegerField, OuterRef, Q, Value, When
from django.db.models.functions import Greatest
from django.utils import timezone
from django.utils.text import get_valid_filename

from kbplatform.errors import ApplicationError, ConflictError
from retrieval import embeddings, vectorstore
from retrieval.chunking import (
    ChunkDraft,
    ChunkRefusedError,
    chunk_token_limit,
    model_input_hash,
    prechunked_drafts,
    text_chunk,
)
from retrieval.embedding_cache import embeddings_cached
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, ReindexStatus, SourceKind
from retrieval.parsing import DocumentParseError, document_parse, file_size_check, text_storable
from retrieval.selectors import knowledge_base_records_model
from tenants.models import Tenant

if TYPE_CHECKING:
    from django.core.files.storage import Storage

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


# --- knowledge bases --------------------------------------------------------------------------------------


def knowledge_base_create(
    *,
    tenant: Tenant,
    name: str,
    description: str = "",
    chunk_max_tokens: int | None = None,
    chunk_overlap_tokens: int | None = None,
) -> KnowledgeBase:
    if KnowledgeBase.objects.for_tenant(tenant).filter(name=name).exists():
        raise ConflictError(f"A knowledge base named {name!r} already exists.", extra={"name": name})
    fields: dict = {"tenant": tenant, "name": name, "description": description}
    if chunk_max_tokens is not None:
        fields["chunk_max_tokens"] = chunk_max_tokens
    if chunk_overlap_tokens is not None:
        fields["chunk_overlap_tokens"] = chunk_overlap_tokens
    knowledge_base = KnowledgeBase(**fields)
    knowledge_base.full_clean()
    try:
        with transaction.atomic():
            knowledge_base.save()
    except IntegrityError as exc:
        # A concurrent create of the same name lost the race; any other integrity error is not the person's doing
        # and must not be reported as a name taken.
        if not KnowledgeBase.objects.for_tenant(tenant).filter(name=name).exists():
            raise
        raise ConflictError(f"A knowledge base named {name!r} already exists.", extra={"name": name}) from exc
    return knowledge_base


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


def document_create(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    title: str = "",
    external_id: str | None = None,
    file: UploadedFile | None = None,
    text: str | None = None,
    chunks: Sequence[dict] | None = None,
) -> Document:
    """Store a document (uploaded file, text, or the client's own chunks) and queue it for indexing once the
    transaction commits. A file over the size limit is recorded as failed with the reason, without storing
    its bytes."""
    if knowledge_base.tenant_id != tenant.pk:
        raise ApplicationError("The knowledge base belongs to another tenant.")
    if sum(source is not None for source in (file, text, chunks)) != 1:
        raise ApplicationError('Send exactly one of "file", "text" or "chunks".')
    _external_id_check(tenant=tenant, knowledge_base=knowledge_base, external_id=external_id)
    document = Document(tenant=tenant, knowledge_base=knowledge_base, title=title[:500], external_id=external_id)
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
            if not failure:
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
    """`item` with its text fields as PostgreSQL can store them (`parsing.text_storable`: NUL dropped, a lone surrogate
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


def documents_enqueue(*, tenant_id: int, document_ids: Sequence[int]) -> None:
    """Queue indexing after the surrounding transaction commits (the worker must see the rows). A broker that
    is down loses nothing: the documents stay queued and `documents_recover_stalled` queues them again.

    The documents are stamped with a new `queue_token`, which their tasks carry: from here on only these tasks may
    fail them when their retries run out (`documents_fail_after_retries`), not a task of an earlier queueing still
    waiting to retry."""
    from retrieval.tasks import document_index, documents_index_batch

    ids = list(document_ids)
    queue_token = uuid.uuid4().hex
    for start in range(0, len(ids), 500):
        Document.objects.filter(tenant_id=tenant_id, pk__in=ids[start : start + 500]).update(queue_token=queue_token)
    size = max(1, settings.INGEST_DOCUMENTS_PER_TASK)
    for start in range(0, len(ids), size):
        group = ids[start : start + size]
        if len(group) == 1:
            transaction.on_commit(
                lambda doc_id=group[0]: document_index.delay(doc_id, tenant_id, queue_token=queue_token), robust=True
            )
        else:
            transaction.on_commit(
                lambda group=group: documents_index_batch.delay(group, tenant_id, queue_token=queue_token),
                robust=True,
            )


# --- documents: delete and re-index ---------------------------------------------------------------------


def document_delete(*, tenant: Tenant, document: Document) -> None:
    """Remove the document's vectors, then the document, its chunks and its stored file. If Milvus is down the
    document stays (503 to the client), so no vector is left behind for a row that is gone."""
    if document.tenant_id != tenant.pk:
        raise ApplicationError("The document belongs to another tenant.")
    dimension = document.knowledge_base.embedding_dimension
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


# --- the indexing pipeline --------------------------------------------------------------------------------


@dataclass
class IndexRun:
    """What one run did: ids per outcome, chunks stored and chunks actually encoded (cache misses)."""

    claimed: list[int] = field(default_factory=list)
    indexed: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    chunks: int = 0
    encoded: int = 0


def _lease_end(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.INGEST_LEASE_SECONDS)


def _claimable(now: datetime) -> Q:
    return Q(status=DocumentStatus.QUEUED) | Q(status__in=IN_PROGRESS, lease_expires_at__lt=now)


def _run_update(*, tenant_id: int, token: str, document_ids: Iterable[int], **fields: Any) -> int:
    """A write of this run only: documents another run has taken over are left alone. Renews the lease."""
    now = timezone.now()
    values = {"lease_expires_at": _lease_end(now), "updated_at": now, **fields}
    return Document.objects.filter(tenant_id=tenant_id, claim_token=token, pk__in=list(document_ids)).update(**values)


def _documents_held(*, tenant_id: int, token: str, document_ids: Iterable[int]) -> set[int]:
    """The documents this run still holds: neither deleted nor taken over by another run since (this one stalled past
    its lease). Only those are this run's to write vectors for or to clean."""
    return set(
        Document.objects.filter(tenant_id=tenant_id, claim_token=token, pk__in=list(document_ids)).values_list(
            "pk", flat=True
        )
    )


def _documents_fail(*, tenant_id: int, token: str, failures: dict[int, str]) -> None:
    """Record each document's failure, for the documents this run still holds (one taken over by another run since is
    that run's). Their chunks go with it: see `_failed_documents_chunks_delete`."""
    if not failures:
        return
    now = timezone.now()
    with transaction.atomic():
        failed = [
            document_id
            for document_id, message in failures.items()
            if _run_update(
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


def _document_drafts(document: Document, *, max_tokens: int) -> list[ChunkDraft]:
    """Parse and chunk one document. Raises DocumentParseError / ChunkRefusedError for the person's mistakes."""
    knowledge_base = document.knowledge_base
    if document.source_kind == SourceKind.CHUNKS:
        chunks = document.source_chunks or []
        if not chunks:
            raise DocumentParseError("The document has no chunks.")
        return prechunked_drafts(chunks=chunks, max_tokens=max_tokens)
    if document.source_kind == SourceKind.FILE:
        if not document.source_file:
            raise DocumentParseError("The uploaded file was not stored; upload it again.")
        try:
            with document.source_file.open("rb") as handle:
                data = handle.read(settings.MAX_UPLOAD_BYTES + 1)
        except FileNotFoundError as exc:
            raise DocumentParseError("The uploaded file is missing from storage; upload it again.") from exc
        parsed = document_parse(data, filename=document.source_filename, max_bytes=settings.MAX_UPLOAD_BYTES)
        text, markdown = parsed.text, parsed.is_markdown
    else:
        text, markdown = document.source_text, False
        if not text.strip():
            raise DocumentParseError("The document contains no text.")
    drafts = text_chunk(
        text=text,
        max_tokens=max_tokens,
        overlap_tokens=knowledge_base.chunk_overlap_tokens,
        markdown=markdown,
    )
    if not drafts:
        raise DocumentParseError("The document contains no text.")
    return drafts


def _chunks_store(
    *, tenant_id: int, token: str, documents: list[Document], drafts: dict[int, list[ChunkDraft]]
) -> tuple[dict[int, list[tuple[int, str, str]]], set[int]]:
    """Make each document's chunk rows equal to its drafts, keeping rows (and ids) that already match, for the
    documents this run still holds: one deleted or taken over by another run since the claim is left out (its rows
    would fail the whole batch on the missing document, or undo the other run's). Returns document id ->
    [(chunk id, text, hash)] in position order for the documents held, and those of them that had rows before this
    run (their old vectors may need cleaning)."""
    ids = [document.pk for document in documents]
    existing: dict[int, list[tuple[int, int, str, str | None, str]]] = defaultdict(list)
    for row in (
        Chunk.objects.filter(tenant_id=tenant_id, document_id__in=ids)
        .order_by("document_id", "position")
        .values_list("document_id", "pk", "position", "content_hash", "external_id", "model_input_hash")
    ):
        existing[row[0]].append(row[1:])
    to_replace = []
    for document in documents:
        old = [row[1:] for row in existing.get(document.pk, [])]
        new = [(d.position, d.content_hash, d.external_id, d.model_input_hash) for d in drafts[document.pk]]
        if old != new:
            to_replace.append(document)
    with transaction.atomic():
        # Locked until the rows are written, so a delete waits for them (and takes them) instead of racing them.
        held = set(
            Document.objects.select_for_update()
            .filter(tenant_id=tenant_id, claim_token=token, pk__in=ids)
            .values_list("pk", flat=True)
        )
        to_replace = [document for document in to_replace if document.pk in held]
        if to_replace:
            Chunk.objects.filter(tenant_id=tenant_id, document_id__in=[d.pk for d in to_replace]).delete()
            Chunk.objects.bulk_create(
                [
                    Chunk(
                        tenant_id=tenant_id,
                        document_id=document.pk,
                        knowledge_base_id=document.knowledge_base_id,
                        position=draft.position,
                        text=draft.text,
                        token_count=draft.token_count,
                        content_hash=draft.content_hash,
                        model_input_hash=draft.model_input_hash,
                        external_id=draft.external_id,
                    )
                    for document in to_replace
                    for draft in drafts[document.pk]
                ],
                batch_size=1000,
            )
    stored: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for document_id, pk, text, content_hash in (
        Chunk.objects.filter(tenant_id=tenant_id, document_id__in=list(held))
        .order_by("document_id", "position")
        .values_list("document_id", "pk", "text", "content_hash")
    ):
        stored[document_id].append((pk, text, content_hash))
    return stored, set(existing) & held


def documents_index(*, tenant_id: int, document_ids: Sequence[int]) -> IndexRun:
    """Parse, chunk, embed and index the given documents of one tenant (those this run can claim).

    Raises TransientIngestError after releasing the documents when Milvus or the database fails; a person's
    bad file ends its own document as failed and nothing else."""
    run = IndexRun()
    token = uuid.uuid4().hex
    now = timezone.now()
    ids = list(dict.fromkeys(int(i) for i in document_ids))
    scoped = Document.objects.filter(tenant_id=tenant_id, pk__in=ids)
    # Documents that keep killing their worker (out of memory on one file, ...) stop being retried. They fail like
    # any other failure of a run, so the chunk rows and vectors their dead runs left go too.
    exhausted = scoped.filter(_claimable(now), attempts__gte=settings.INGEST_MAX_ATTEMPTS)
    if exhausted.update(claim_token=token, lease_expires_at=_lease_end(now)):
        held = Document.objects.filter(tenant_id=tenant_id, claim_token=token).values_list("pk", flat=True)
        message = (
            f"Indexing was interrupted {settings.INGEST_MAX_ATTEMPTS} times (the worker stopped while "
            "processing this document). Check the file, then re-index it."
        )
        _documents_fail(tenant_id=tenant_id, token=token, failures=dict.fromkeys(held, message))
    scoped.filter(_claimable(now), attempts__lt=settings.INGEST_MAX_ATTEMPTS).update(
        status=DocumentStatus.PARSING,
        claim_token=token,
        lease_expires_at=_lease_end(now),
        attempts=F("attempts") + 1,
        parsing_started_at=now,
        progress=0.0,
        error_message="",
        updated_at=now,
    )
    documents = list(Document.objects.filter(tenant_id=tenant_id, claim_token=token).select_related("knowledge_base"))
    run.claimed = [document.pk for document in documents]
    if not documents:
        return run
    try:
        _documents_run(run=run, tenant_id=tenant_id, token=token, documents=documents)
        if run.chunks:
            vectorstore.vectors_flush()
    except TRANSIENT_ERRORS as exc:
        logger.warning("indexing of %s documents interrupted, will retry: %s", len(documents), exc)
        try:
            Document.objects.filter(tenant_id=tenant_id, claim_token=token).update(
                status=DocumentStatus.QUEUED,
                claim_token="",
                lease_expires_at=None,
                attempts=F("attempts") - 1,
                error_message=f"Waiting to retry: {exc}"[:2000],
            )
        except DatabaseError:
            logger.warning("could not release documents; their lease will expire", exc_info=True)
        raise TransientIngestError(str(exc)) from exc
    except SoftTimeLimitExceeded as exc:
        # The task ran out of time (a batch of large files): an interruption like a stopped worker, so the attempt
        # counts, but the documents are queued again at once and the retry re-uses the chunks and cached vectors.
        logger.warning("indexing of %s documents outlasted the task time limit, will continue", len(documents))
        try:
            Document.objects.filter(tenant_id=tenant_id, claim_token=token).update(
                status=DocumentStatus.QUEUED,
                claim_token="",
                lease_expires_at=None,
                error_message="Continuing: the indexing run took longer than the task time limit.",
            )
        except DatabaseError:
            logger.warning("could not release documents; their lease will expire", exc_info=True)
        raise TransientIngestError("the indexing run took longer than the task time limit") from exc
    except Exception as exc:
        logger.exception("indexing failed unexpectedly")
        message = f"Indexing failed unexpectedly ({type(exc).__name__}); the error was logged. Re-index to retry."
        pending = Document.objects.filter(tenant_id=tenant_id, claim_token=token).values_list("pk", flat=True)
        _documents_fail(tenant_id=tenant_id, token=token, failures=dict.fromkeys(pending, message))
        run.failed.update(dict.fromkeys(pending, message))
    return run


def _progress_embedded(done: int, total: int) -> float:
    return PROGRESS_CHUNKED + (1 - PROGRESS_CHUNKED) * done / total


def _knowledge_base_model_adopt(
    knowledge_base: KnowledgeBase, *, model_name: str, model_identity: str
) -> KnowledgeBase:
    """The knowledge base with the model it records brought up to date where nothing depends on it: one holding no
    chunk yet (and not re-indexing) takes the workers' model, as the web records the bundled model's name when it
    creates one; one whose vectors are the workers' model's by name but whose identity was never recorded (made before
    identities were) records it. Anything else is left for the caller to refuse. Conditional updates, so two runs
    agree."""
    if (knowledge_base.embedding_model, knowledge_base.embedding_model_identity) == (model_name, model_identity):
        return knowledge_base
    rows = KnowledgeBase.objects.filter(tenant_id=knowledge_base.tenant_id, pk=knowledge_base.pk)
    empty = rows.exclude(reindex_status=ReindexStatus.RUNNING).exclude(
        Exists(Chunk.objects.filter(tenant_id=knowledge_base.tenant_id, knowledge_base_id=OuterRef("pk")))
    )
    if not empty.update(
        embedding_model=model_name,
        embedding_model_identity=model_identity,
        embedding_dimension=embeddings.embedding_dimension(),
        reindex_from_model_identity="",  # no vector of any model is left to mix with the new ones
        updated_at=timezone.now(),
    ):
        rows.filter(embedding_model=model_name, embedding_model_identity="").update(
            embedding_model_identity=model_identity, updated_at=timezone.now()
        )
    return rows.get()


def _documents_run(*, run: IndexRun, tenant_id: int, token: str, documents: list[Document]) -> None:
    model_name, model_identity = embeddings.model_name(), embeddings.model_identity()
    model_max_tokens = embeddings.max_sequence_tokens()
    # Parse and chunk, renewing the lease on the way: a batch of large files can take longer than one lease.
    drafts: dict[int, list[ChunkDraft]] = {}
    failures: dict[int, str] = {}
    models_checked: dict[int, KnowledgeBase] = {}
    renewed = timezone.now()
    for document in documents:
        if timezone.now() - renewed > timedelta(seconds=settings.INGEST_LEASE_SECONDS / 10):
            _run_update(tenant_id=tenant_id, token=token, document_ids=[d.pk for d in documents])
            renewed = timezone.now()
        knowledge_base = models_checked.get(document.knowledge_base_id)
        if knowledge_base is None:
            knowledge_base = _knowledge_base_model_adopt(
                document.knowledge_base, model_name=model_name, model_identity=model_identity
            )
            models_checked[knowledge_base.pk] = knowledge_base
        if knowledge_base.embedding_model != model_name or knowledge_base.embedding_model_identity != model_identity:
            made_by = (
                f"another version of {model_name!r} (the model's files changed since)"
                if knowledge_base.embedding_model == model_name
                else repr(knowledge_base.embedding_model)
            )
            failures[document.pk] = (
                f"The knowledge base's vectors were made by {made_by} but the workers run {model_name!r}, so this "
                f"document was not indexed. Re-index the knowledge base to move it to the workers' model, then "
                "re-index this document once that has finished (the knowledge-base re-index rebuilds only the "
                "documents already indexed, not failed ones)."
            )
            continue
        max_tokens = chunk_token_limit(requested=knowledge_base.chunk_max_tokens, model_max_tokens=model_max_tokens)
        try:
            drafts[document.pk] = _document_drafts(document, max_tokens=max_tokens)
        except (DocumentParseError, ChunkRefusedError) as exc:
            failures[document.pk] = str(exc)
        except embeddings.EmbeddingModelUnavailable:
            raise  # the model's fault, not the file's: the run waits and retries
        except OSError as exc:
            failures[document.pk] = f"The stored file could not be read ({exc.strerror or type(exc).__name__})."
        except Exception as exc:  # a parser's own bug fails its document, not the whole batch
            logger.exception("document %s could not be parsed", document.pk)
            failures[document.pk] = (
                f"The file could not be read ({type(exc).__name__}); the error was logged. "
                "Check the file (save it again, or as PDF), then re-index it."
            )
    _documents_fail(tenant_id=tenant_id, token=token, failures=failures)
    run.failed.update(failures)
    documents = [document for document in documents if document.pk in drafts]
    if not documents:
        return
    now = timezone.now()
    _run_update(
        tenant_id=tenant_id,
        token=token,
        document_ids=drafts,
        status=DocumentStatus.CHUNKING,
        chunking_started_at=now,
        progress=PROGRESS_CHUNKED / 2,
    )

    # Store chunk rows (ids stay stable when nothing changed).
    stored, had_rows = _chunks_store(tenant_id=tenant_id, token=token, documents=documents, drafts=drafts)
    # A document deleted or taken over since the claim has no rows here: the run goes on without it.
    documents = [document for document in documents if document.pk in stored]
    drafts = {document.pk: drafts[document.pk] for document in documents}
    if not documents:
        return
    _run_update(
        tenant_id=tenant_id,
        token=token,
        document_ids=drafts,
        status=DocumentStatus.EMBEDDING,
        embedding_started_at=timezone.now(),
        progress=PROGRESS_CHUNKED,
        chunk_count=Case(
            *(When(pk=doc_id, then=Value(len(rows))) for doc_id, rows in stored.items()),
            default=Value(0),
            output_field=IntegerField(),
        ),
    )

    # Embed (through the cache) and upsert, batch by batch; progress once per batch.
    flat = [(doc_id, pk, text, content_hash) for doc_id, rows in stored.items() for pk, text, content_hash in rows]
    totals = {doc_id: len(rows) for doc_id, rows in stored.items()}
    done: dict[int, int] = defaultdict(int)
    kb_of = {document.pk: document.knowledge_base for document in documents}
    batch_size = max(1, settings.INGEST_EMBED_BATCH)
    for start in range(0, len(flat), batch_size):
        batch = flat[start : start + batch_size]
        vectors, encoded = embeddings_cached(
            tenant_id=tenant_id,
            texts=[row[2] for row in batch],
            model_identity=model_identity,
        )
        run.encoded += encoded
        dimension = int(vectors.shape[1])
        # Asked after encoding, the slow part: a document deleted or taken over meanwhile gets no vectors from here.
        held = _documents_held(tenant_id=tenant_id, token=token, document_ids=totals)
        vectorstore.vectors_upsert(
            rows=[
                vectorstore.ChunkVector(
                    chunk_id=pk,
                    tenant_id=tenant_id,
                    knowledge_base_id=kb_of[doc_id].pk,
                    document_id=doc_id,
                    vector=vector,
                )
                for (doc_id, pk, _, _), vector in zip(batch, vectors, strict=True)
                if doc_id in held
            ],
            dimension=dimension,
        )
        touched = set()
        for doc_id, *_ in batch:
            done[doc_id] += 1
            touched.add(doc_id)
        _run_update(
            tenant_id=tenant_id,
            token=token,
            document_ids=touched,
            progress=Case(
                *(When(pk=doc_id, then=Value(_progress_embedded(done[doc_id], totals[doc_id]))) for doc_id in touched),
                output_field=FloatField(),
            ),
        )
    run.chunks += len(flat)

    # Vectors of chunks that no longer exist (earlier runs of changed or interrupted documents, and of failed ones
    # whose vectors Milvus could not delete then) go.
    _run_update(tenant_id=tenant_id, token=token, document_ids=drafts, status=DocumentStatus.INDEXING)
    # Only for documents still held: for one taken over, "stale" would mean the new run's chunks.
    held = _documents_held(tenant_id=tenant_id, token=token, document_ids=drafts)
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
            keep_chunk_ids=[pk for document in cleanup for pk, _, _ in stored[document.pk]],
        )
    finished = timezone.now()
    _run_update(
        tenant_id=tenant_id,
        token=token,
        document_ids=drafts,
        status=DocumentStatus.INDEXED,
        progress=1.0,
        indexed_at=finished,
        claim_token="",
        lease_expires_at=None,
    )
    run.indexed = [doc_id for doc_id in drafts if doc_id in held]
    # A document deleted while it was being indexed must not leave vectors behind.
    still_there = set(Document.objects.filter(tenant_id=tenant_id, pk__in=list(drafts)).values_list("pk", flat=True))
    gone = [doc_id for doc_id in drafts if doc_id not in still_there]
    if gone:
        vectorstore.vectors_delete(
            tenant_id=tenant_id, dimension=documents[0].knowledge_base.embedding_dimension, document_ids=gone
        )
        run.indexed = [doc_id for doc_id in run.indexed if doc_id in still_there]


def documents_fail_after_retries(*, tenant_id: int, document_ids: Sequence[int], reason: str, queue_token: str) -> int:
    """The last word of a task whose transient failures outlasted every retry: its documents still queued on its own
    queueing (`queue_token`, as the task carries it) end as failed, leaving what `_documents_fail` leaves (no chunk
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


# --- recovery ---------------------------------------------------------------------------------------------


def documents_recover_stalled() -> int:
    """Queue again every document whose run died (lease expired) or whose task was lost (queued for longer
    than INGEST_QUEUED_STALE_SECONDS). Crosses tenants by design: it is the platform's own housekeeping, and
    each document is requeued under its own tenant. Claiming makes a duplicate queueing harmless."""
    now = timezone.now()
    stale_queued = now - timedelta(seconds=settings.INGEST_QUEUED_STALE_SECONDS)
    rows = (
        Document.objects.unscoped()
        .filter(
            Q(status__in=IN_PROGRESS, lease_expires_at__lt=now)
            | Q(status=DocumentStatus.QUEUED, updated_at__lt=stale_queued)
        )
        .values_list("tenant_id", "pk")[:10000]
    )
    by_tenant: dict[int, list[int]] = defaultdict(list)
    for tenant_id, pk in rows:
        by_tenant[tenant_id].append(pk)
    with transaction.atomic():
        for tenant_id, ids in by_tenant.items():
            Document.objects.filter(tenant_id=tenant_id, pk__in=ids, status=DocumentStatus.QUEUED).update(
                updated_at=now
            )
            documents_enqueue(tenant_id=tenant_id, document_ids=ids)
    count = sum(len(ids) for ids in by_tenant.values())
    if count:
        logger.info("requeued %s stalled documents", count)
    return count


# --- knowledge-base deletion --------------------------------------------------------------------------------

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
    if (
        KnowledgeBase.objects.for_tenant(tenant)
        .filter(_reindex_in_flight(timezone.now()), pk=knowledge_base.pk)
        .exists()
    ):
        raise ConflictError("This knowledge base is being re-indexed; delete it when that has finished.")
    dimension = knowledge_base.embedding_dimension
    vectorstore.vectors_delete(tenant_id=tenant.pk, dimension=dimension, knowledge_base_id=knowledge_base.pk)
    vectorstore.question_vectors_delete(tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk)

    from conversations.models import Conversation  # conversations build on retrieval, not the other way round
    from conversations.state import state_forget

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


# --- knowledge-base re-index ------------------------------------------------------------------------------


def _reindex_in_flight(now: datetime) -> Q:
    """A re-index marked running whose run (or its queued task) still holds a lease: one that let its lease run out
    was lost."""
    return Q(reindex_status=ReindexStatus.RUNNING, reindex_lease_expires_at__gte=now)


def _reindex_lost(now: datetime) -> Q:
    return Q(reindex_status=ReindexStatus.RUNNING, reindex_lease_expires_at__lt=now)


def knowledge_base_reindex_start(*, tenant: Tenant, knowledge_base: KnowledgeBase) -> KnowledgeBase:
    """Queue a rebuild of the knowledge base's vectors from its stored chunks (e.g. after a model change). The lease
    covers the task's wait in the queue: a task that never arrives is noticed when it runs out."""
    from retrieval.tasks import knowledge_base_reindex as reindex_task

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
                reindex_lease_expires_at=_lease_end(now),
                reindex_attempts=0,
                updated_at=now,
            )
        )
        if not updated:
            raise ConflictError("This knowledge base is already being re-indexed.")
        transaction.on_commit(lambda: reindex_task.delay(knowledge_base.pk, tenant.pk), robust=True)
    knowledge_base.refresh_from_db()
    return knowledge_base


def _reindex_claim(*, tenant_id: int, knowledge_base_id: int, token: str) -> bool:
    """Take the running re-index for this run, unless another live run holds it (a second delivery of the task, or the
    task queued again while the first was only slow): one conditional UPDATE, as for documents."""
    now = timezone.now()
    return bool(
        KnowledgeBase.objects.filter(tenant_id=tenant_id, pk=knowledge_base_id, reindex_status=ReindexStatus.RUNNING)
        .filter(Q(reindex_claim_token="") | Q(reindex_lease_expires_at__lt=now))
        .update(
            reindex_claim_token=token,
            reindex_lease_expires_at=_lease_end(now),
            reindex_attempts=F("reindex_attempts") + 1,
            updated_at=now,
        )
    )


def _reindex_update(*, tenant_id: int, knowledge_base_id: int, token: str, **fields: Any) -> int:
    """A write of this run only, renewing its lease; 0 when another run took the re-index over (or it is gone)."""
    now = timezone.now()
    values = {"reindex_lease_expires_at": _lease_end(now), "updated_at": now, **fields}
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


def _model_input_hashes_refresh(*, tenant_id: int, rows: Sequence[tuple[int, str, str]]) -> None:
    """Record, for each (chunk id, text, recorded model input hash), what the model of this process reads of the text.
    A re-index onto a model whose tokenizer breaks long runs elsewhere changes it, and the embedding cache's purge keeps
    only the entries a chunk's hashes name: a stale one would let it drop the vectors the re-index has just cached. A
    chunk deleted meanwhile is left alone (the update finds no row)."""
    for pk, text, recorded in rows:
        current = model_input_hash(text)
        if current != recorded:
            Chunk.objects.filter(tenant_id=tenant_id, pk=pk).update(model_input_hash=current)


def knowledge_base_reindex(*, tenant_id: int, knowledge_base_id: int) -> int:
    """Re-embed every chunk of the knowledge base's indexed documents with the workers' model and upsert the
    vectors by chunk id (so it is safe to run twice). Returns the chunks indexed: 0 when the re-index is not running
    or another live run holds it."""
    token = uuid.uuid4().hex
    if not _reindex_claim(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token):
        return 0
    try:
        model_name, model_identity = embeddings.model_name(), embeddings.model_identity()
    except embeddings.EmbeddingModelUnavailable as exc:
        _reindex_release(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token)
        raise TransientIngestError(str(exc)) from exc
    claimed = KnowledgeBase.objects.filter(tenant_id=tenant_id, pk=knowledge_base_id).first()
    if claimed is None:
        return 0
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
        embedding_dimension=embeddings.embedding_dimension(),
        reindex_from_model_identity=moved_from,
    )
    chunks = Chunk.objects.filter(
        tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, document__status=DocumentStatus.INDEXED
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
            vectors, _ = embeddings_cached(
                tenant_id=tenant_id,
                texts=[row[2] for row in batch],
                model_identity=model_identity,
            )
            _model_input_hashes_refresh(
                tenant_id=tenant_id, rows=[(pk, text, recorded) for pk, _, text, recorded in batch]
            )
            vectorstore.vectors_upsert(
                rows=[
                    vectorstore.ChunkVector(
                        chunk_id=pk,
                        tenant_id=tenant_id,
                        knowledge_base_id=knowledge_base_id,
                        document_id=doc_id,
                        vector=vector,
                    )
                    for (pk, doc_id, _, _), vector in zip(batch, vectors, strict=True)
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
    except TRANSIENT_ERRORS as exc:
        _reindex_release(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token)
        raise TransientIngestError(str(exc)) from exc
    except SoftTimeLimitExceeded as exc:
        # A large knowledge base outlasts one task: the retry goes quickly through the vectors cached so far.
        _reindex_release(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, token=token)
        raise TransientIngestError("the re-index took longer than the task time limit") from exc
    vectorstore.vectors_flush()
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
    return done


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
    from retrieval.tasks import knowledge_base_reindex as reindex_task

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
    requeued = 0
    for tenant_id, knowledge_base_id in lost.values_list("tenant_id", "pk")[:1000]:
        with transaction.atomic():
            if not (
                KnowledgeBase.objects.filter(tenant_id=tenant_id, pk=knowledge_base_id)
                .filter(_reindex_lost(now))
                .update(
                    reindex_claim_token="",
                    reindex_lease_expires_at=_lease_end(now),
                    reindex_error=(
                        f"The re-index stopped making progress (its worker stopped or its task was lost) and was "
                        f"queued again at {stamp}; it goes on from where it was."
                    ),
                    updated_at=now,
                )
            ):
                continue
            transaction.on_commit(
                lambda pk=knowledge_base_id, tenant=tenant_id: reindex_task.delay(pk, tenant), robust=True
            )
            requeued += 1
    if requeued:
        logger.info("requeued %s lost knowledge-base re-indexes", requeued)
    return requeued


def chunk_vectors_upsert(*, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]], dimension: int) -> int:
    """Write the vectors of stored chunk rows to Milvus, each under its own tenant, knowledge base and document
    (for loaders that create chunk rows themselves: evaluation benches and tests)."""
    return vectorstore.vectors_upsert(
        rows=[
            vectorstore.ChunkVector(
                chunk_id=chunk.pk,
                tenant_id=chunk.tenant_id,
                knowledge_base_id=chunk.knowledge_base_id,
                document_id=chunk.document_id,
                vector=vector,
            )
            for chunk, vector in zip(chunks, vectors, strict=True)
        ],
        dimension=dimension,
    )
