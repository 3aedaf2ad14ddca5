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

import itertools
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db.models import Case, Exists, F, FloatField, IntegerField, OuterRef, Q, Value, When
from django.utils import timezone

from retrieval import embedding_cache, embeddings, vectorstore
from retrieval.chunking import (
    ChunkDraft,
    ChunkRefusedError,
    chunk_token_limit,
    prechunked_drafts,
    text_chunk,
)
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, ReindexStatus, SourceKind
from retrieval.parsing import DocumentParseError, document_parse
from retrieval.selectors import TextSettings, knowledge_base_text_settings

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


# --- the indexing pipeline --------------------------------------------------------------------------------


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


def _claimable(now: datetime) -> Q:
    return Q(status=DocumentStatus.QUEUED) | Q(status__in=IN_PROGRESS, lease_expires_at__lt=now)


def _run_update(*, tenant_id: int, token: str, document_ids: Iterable[int], **fields: Any) -> int:
    """A write of this run only: documents another run has taken over are left alone. Renews the lease."""
    now = timezone.now()
    values = {"lease_expires_at": lease_end(now), "updated_at": now, **fields}
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


def _document_drafts(
    document: Document, *, max_tokens: int, model_max_tokens: int, model: str | None = None
) -> list[ChunkDraft]:
    """Parse and chunk one document. Raises DocumentParseError / ChunkRefusedError for the person's mistakes."""
    knowledge_base = document.knowledge_base
    if document.source_kind == SourceKind.CHUNKS:
        chunks = document.source_chunks or []
        if not chunks:
            raise DocumentParseError("The document has no chunks.")
        return prechunked_drafts(
            chunks=chunks,
            max_tokens=max_tokens,
            model_max_tokens=model_max_tokens,
            split_oversize=document.split_oversize_chunks,
            model=model,
        )
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
        model=model,
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
        # A chunk the client disabled stays disabled when its document's chunks are rebuilt with its text unchanged.
        disabled = set(
            Chunk.objects.filter(
                tenant_id=tenant_id, document_id__in=[d.pk for d in to_replace], enabled=False
            ).values_list("document_id", "content_hash")
        )
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
                        enabled=(document.pk, draft.content_hash) not in disabled,
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
    if exhausted.update(claim_token=token, lease_expires_at=lease_end(now)):
        held = Document.objects.filter(tenant_id=tenant_id, claim_token=token).values_list("pk", flat=True)
        message = (
            f"Indexing was interrupted {settings.INGEST_MAX_ATTEMPTS} times (the worker stopped while "
            "processing this document). Check the file, then re-index it."
        )
        _documents_fail(tenant_id=tenant_id, token=token, failures=dict.fromkeys(held, message))
    scoped.filter(_claimable(now), attempts__lt=settings.INGEST_MAX_ATTEMPTS).update(
        status=DocumentStatus.PARSING,
        claim_token=token,
        lease_expires_at=lease_end(now),
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
        embedding_dimension=embeddings.embedding_dimension(model_name),
        reindex_from_model_identity="",  # no vector of any model is left to mix with the new ones
        updated_at=timezone.now(),
    ):
        rows.filter(embedding_model=model_name, embedding_model_identity="").update(
            embedding_model_identity=model_identity, updated_at=timezone.now()
        )
    return rows.get()


def _documents_run(*, run: IndexRun, tenant_id: int, token: str, documents: list[Document]) -> None:
    """One claimed batch through the pipeline: parse and chunk, store the chunk rows, embed and upsert, finish. A
    document deleted or taken over by another run at any step goes on without this run; a person's bad file fails
    its own document only."""
    drafts, failures = _documents_parse(tenant_id=tenant_id, token=token, documents=documents)
    _documents_fail(tenant_id=tenant_id, token=token, failures=failures)
    run.failed.update(failures)
    documents = [document for document in documents if document.pk in drafts]
    if not documents:
        return
    _run_update(
        tenant_id=tenant_id,
        token=token,
        document_ids=drafts,
        status=DocumentStatus.CHUNKING,
        chunking_started_at=timezone.now(),
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
    # Disabled chunks get no vector, and the clean-up takes any they had out of Milvus.
    disabled_rows = list(
        Chunk.objects.filter(tenant_id=tenant_id, document_id__in=list(stored), enabled=False).values_list(
            "document_id", "pk"
        )
    )
    disabled = {pk for _, pk in disabled_rows}
    _chunks_embed(
        run=run,
        tenant_id=tenant_id,
        token=token,
        documents=documents,
        stored=stored,
        disabled=disabled,
    )
    _documents_finish(
        run=run,
        tenant_id=tenant_id,
        token=token,
        documents=documents,
        stored=stored,
        had_rows=had_rows | {document_id for document_id, _ in disabled_rows},
        disabled=disabled,
    )


def _documents_parse(
    *, tenant_id: int, token: str, documents: list[Document]
) -> tuple[dict[int, list[ChunkDraft]], dict[int, str]]:
    """Each document's chunk drafts, and the failures (document id -> message) of those that cannot be indexed: a
    knowledge base of another model, a file that does not parse. The model's own unavailability is raised: the run
    waits and retries."""
    # Parse and chunk, renewing the lease on the way: a batch of large files can take longer than one lease.
    drafts: dict[int, list[ChunkDraft]] = {}
    failures: dict[int, str] = {}
    models_checked: dict[int, KnowledgeBase] = {}
    renewed = timezone.now()
    for document in documents:
        if timezone.now() - renewed > timedelta(seconds=settings.INGEST_LEASE_SECONDS / 10):
            _run_update(tenant_id=tenant_id, token=token, document_ids=[d.pk for d in documents])
            renewed = timezone.now()
        model_name = embeddings.knowledge_base_model(document.knowledge_base.embedding_model)
        model_identity = embeddings.model_identity(model_name)
        model_max_tokens = embeddings.max_sequence_tokens(model_name)
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
                f"The knowledge base's vectors were made by {made_by} but it is indexed with {model_name!r}, so this "
                f"document was not indexed. Re-index the knowledge base to move it to the workers' model, then "
                "re-index this document once that has finished (the knowledge-base re-index rebuilds only the "
                "documents already indexed, not failed ones)."
            )
            continue
        max_tokens = chunk_token_limit(requested=knowledge_base.chunk_max_tokens, model_max_tokens=model_max_tokens)
        try:
            drafts[document.pk] = _document_drafts(
                document, max_tokens=max_tokens, model_max_tokens=model_max_tokens, model=model_name
            )
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
    return drafts, failures


def _chunks_embed(
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
        held = _documents_held(tenant_id=tenant_id, token=token, document_ids=totals)
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


def _documents_finish(
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
    _run_update(tenant_id=tenant_id, token=token, document_ids=document_ids, status=DocumentStatus.INDEXING)
    # Only for documents still held: for one taken over, "stale" would mean the new run's chunks.
    held = _documents_held(tenant_id=tenant_id, token=token, document_ids=document_ids)
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
    _run_update(
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
