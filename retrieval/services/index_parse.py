"""The first stage of an indexing run: parse each claimed document and cut it into chunks (by its knowledge base's
model's tokens), then store a document's chunk rows in one transaction, only when they changed, so chunk ids stay
stable across re-runs.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from retrieval import embeddings
from retrieval.chunking import (
    ChunkDraft,
    ChunkRefusedError,
    chunk_token_limit,
    prechunked_drafts,
    text_chunk,
)
from retrieval.models import Chunk, Document, KnowledgeBase, ReindexStatus, SourceKind
from retrieval.parsing import DocumentParseError, document_parse
from retrieval.services.index_runs import (
    run_update,
)

logger = logging.getLogger(__name__)


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


def chunks_store(
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


def documents_parse(
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
            run_update(tenant_id=tenant_id, token=token, document_ids=[d.pk for d in documents])
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
