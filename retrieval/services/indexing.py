"""The indexing pipeline a worker runs on a batch of documents (`documents_index`), one stage a module beside it:
claims, leases and failures in `index_runs`; parsing, chunking and chunk rows in `index_parse`; embedding, vectors
and finishing in `index_embed`.

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

import logging
import uuid
from collections.abc import Sequence

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Case, F, IntegerField, Value, When
from django.utils import timezone

from retrieval.models import Chunk, Document, DocumentStatus
from retrieval.services.index_embed import chunks_embed, documents_finish
from retrieval.services.index_parse import chunks_store, documents_parse
from retrieval.services.index_runs import (
    PROGRESS_CHUNKED,
    TRANSIENT_ERRORS,
    IndexRun,
    TransientIngestError,
    claimable,
    documents_fail,
    lease_end,
    run_update,
)

logger = logging.getLogger(__name__)


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
    exhausted = scoped.filter(claimable(now), attempts__gte=settings.INGEST_MAX_ATTEMPTS)
    if exhausted.update(claim_token=token, lease_expires_at=lease_end(now)):
        held = Document.objects.filter(tenant_id=tenant_id, claim_token=token).values_list("pk", flat=True)
        message = (
            f"Indexing was interrupted {settings.INGEST_MAX_ATTEMPTS} times (the worker stopped while "
            "processing this document). Check the file, then re-index it."
        )
        documents_fail(tenant_id=tenant_id, token=token, failures=dict.fromkeys(held, message))
    scoped.filter(claimable(now), attempts__lt=settings.INGEST_MAX_ATTEMPTS).update(
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
        documents_fail(tenant_id=tenant_id, token=token, failures=dict.fromkeys(pending, message))
        run.failed.update(dict.fromkeys(pending, message))
    return run


def _documents_run(*, run: IndexRun, tenant_id: int, token: str, documents: list[Document]) -> None:
    """One claimed batch through the pipeline: parse and chunk, store the chunk rows, embed and upsert, finish. A
    document deleted or taken over by another run at any step goes on without this run; a person's bad file fails
    its own document only."""
    drafts, failures = documents_parse(tenant_id=tenant_id, token=token, documents=documents)
    documents_fail(tenant_id=tenant_id, token=token, failures=failures)
    run.failed.update(failures)
    documents = [document for document in documents if document.pk in drafts]
    if not documents:
        return
    run_update(
        tenant_id=tenant_id,
        token=token,
        document_ids=drafts,
        status=DocumentStatus.CHUNKING,
        chunking_started_at=timezone.now(),
        progress=PROGRESS_CHUNKED / 2,
    )
    # Store chunk rows (ids stay stable when nothing changed).
    stored, had_rows = chunks_store(tenant_id=tenant_id, token=token, documents=documents, drafts=drafts)
    # A document deleted or taken over since the claim has no rows here: the run goes on without it.
    documents = [document for document in documents if document.pk in stored]
    drafts = {document.pk: drafts[document.pk] for document in documents}
    if not documents:
        return
    run_update(
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
    chunks_embed(
        run=run,
        tenant_id=tenant_id,
        token=token,
        documents=documents,
        stored=stored,
        disabled=disabled,
    )
    documents_finish(
        run=run,
        tenant_id=tenant_id,
        token=token,
        documents=documents,
        stored=stored,
        had_rows=had_rows | {document_id for document_id, _ in disabled_rows},
        disabled=disabled,
    )
