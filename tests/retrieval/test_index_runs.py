"""One indexing run against what can happen around it: documents deleted or taken over mid-run, a file that
breaks its parser, a run slower than its lease, documents that fail for good. The run is called directly (no
worker), on real PostgreSQL (under CI) and a `milvus-lite server`; the interleavings are forced by wrapping the
step the other party acts in."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.utils import timezone

from kbplatform.errors import ConflictError
from lifecycle import services as lifecycle_services
from retrieval import embedding_cache, embeddings, services, tasks, vectorstore
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, SourceKind
from retrieval.selectors import EmbeddingModelMismatchError, IndexStatus, chunk_search, index_state
from retrieval.services import index_parse, reindex
from tests.migrations import migrations_crossed
from tests.retrieval import files
from tests.retrieval.factories import kb_make

TEXTS = {
    "volcano": "Volcanoes erupt when magma pressure exceeds the strength of the crust above it.",
    "glacier": "Glaciers carve U-shaped valleys and leave moraines behind when they retreat.",
    "tides": "The gravity of the moon pulls the oceans and drives the rise and fall of the tides.",
}


def _queued(tenant, kb: KnowledgeBase, key: str, text: str | None = None) -> Document:
    text = TEXTS[key] if text is None else text
    return Document.objects.create(
        tenant=tenant,
        knowledge_base=kb,
        title=key,
        external_id=key,
        source_kind=SourceKind.TEXT,
        source_text=text,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
    )


def _vector_count(kb: KnowledgeBase) -> int:
    return vectorstore.vectors_count(tenant_id=kb.tenant_id, knowledge_base_id=kb.pk, dimension=kb.embedding_dimension)


def _statuses(tenant, ids) -> dict[int, str]:
    return dict(Document.objects.for_tenant(tenant).filter(pk__in=list(ids)).values_list("pk", "status"))


@pytest.mark.django_db(transaction=True)
def test_a_document_deleted_mid_run_fails_no_other_document_of_the_batch(milvus_server, tenant, monkeypatch):
    kb = kb_make(tenant, name="batch")
    documents = {key: _queued(tenant, kb, key) for key in TEXTS}
    doomed = documents["glacier"]
    parse = index_parse._document_drafts

    def parse_then_delete(document, **kwargs):
        drafts = parse(document, **kwargs)
        if document.pk == doomed.pk:  # deleted (API, admin, its knowledge base) while the run parses the batch
            services.document_delete(tenant=tenant, document=doomed)
        return drafts

    monkeypatch.setattr(index_parse, "_document_drafts", parse_then_delete)
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[d.pk for d in documents.values()])

    kept = [documents["volcano"].pk, documents["tides"].pk]
    assert _statuses(tenant, kept) == dict.fromkeys(kept, DocumentStatus.INDEXED), run.failed
    assert sorted(run.indexed) == sorted(kept) and run.failed == {}
    assert not Document.objects.for_tenant(tenant).filter(pk=doomed.pk).exists()
    assert not Chunk.objects.for_tenant(tenant).filter(document_id=doomed.pk).exists()
    assert _vector_count(kb) == Chunk.objects.for_tenant(tenant).filter(knowledge_base=kb).count() == 2


def _deleter(deleted: str, *, tenant, document, kb, errors: list, finally_set=None) -> threading.Thread:
    """A thread that deletes the document, or its whole knowledge base, on its own connection; what it raises goes
    to `errors`, and `finally_set` (an Event) is set when it ends, whatever happened."""

    def delete() -> None:
        try:
            if deleted == "document":
                services.document_delete(tenant=tenant, document=document)
            else:
                lifecycle_services.knowledge_base_delete(tenant=tenant, knowledge_base=kb)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's assertion
            errors.append(exc)
        finally:
            if finally_set is not None:
                finally_set.set()
            connection.close()

    return threading.Thread(target=delete)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deleted", ["document", "knowledge_base"])
def test_a_delete_while_a_run_writes_the_chunk_rows_waits_and_takes_them(milvus_server, tenant, monkeypatch, deleted):
    kb = kb_make(tenant, name=f"writing-{deleted}")
    document = _queued(tenant, kb, "volcano")
    writing, resume = threading.Event(), threading.Event()
    bulk_create = Chunk.objects.bulk_create

    def slow_bulk_create(*args, **kwargs):
        writing.set()
        resume.wait(10)
        return bulk_create(*args, **kwargs)

    monkeypatch.setattr(Chunk.objects, "bulk_create", slow_bulk_create)
    errors: list[BaseException] = []
    deleter = _deleter(deleted, tenant=tenant, document=document, kb=kb, errors=errors)

    def start_delete_while_writing() -> None:
        assert writing.wait(30)
        deleter.start()
        deleter.join(1.0)  # the delete reaches the rows the run is writing
        resume.set()

    helper = threading.Thread(target=start_delete_while_writing)
    helper.start()
    services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    helper.join()
    deleter.join(30)

    assert errors == []
    assert not Document.objects.for_tenant(tenant).filter(pk=document.pk).exists()
    assert not Chunk.objects.for_tenant(tenant).filter(document_id=document.pk).exists()
    assert _vector_count(kb) == 0


@pytest.mark.django_db
def test_a_file_that_breaks_its_parser_fails_alone_and_the_batch_goes_on(milvus_server, tenant):
    kb = kb_make(tenant, name="parser-bug")
    good = [_queued(tenant, kb, "volcano"), _queued(tenant, kb, "tides")]
    # Word opens it; python-docx raises ValueError (not a parse error it announces) when it reads the table.
    broken = services.document_create(
        tenant=tenant,
        knowledge_base=kb,
        file=SimpleUploadedFile("merged.docx", files.docx_with_orphan_merge_bytes(["Penguins huddle in winter."])),
    )
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[good[0].pk, broken.pk, good[1].pk])

    assert _statuses(tenant, [d.pk for d in good]) == dict.fromkeys([d.pk for d in good], DocumentStatus.INDEXED)
    broken.refresh_from_db()
    assert broken.status == DocumentStatus.FAILED and list(run.failed) == [broken.pk]
    assert "unexpectedly" not in broken.error_message and broken.error_message == run.failed[broken.pk]
    assert _vector_count(kb) == 2


@pytest.mark.django_db
def test_a_pdf_with_a_glyph_no_text_can_hold_is_indexed_with_the_rest_of_its_text(milvus_server, tenant):
    """A lone surrogate from a PDF's ToUnicode map reached the tokenizer, which refused the whole text: the document
    failed as unreadable for one glyph."""
    kb = kb_make(tenant, name="odd-glyph")
    document = services.document_create(
        tenant=tenant,
        knowledge_base=kb,
        file=SimpleUploadedFile(
            "math.pdf", files.pdf_with_glyph_mapped_to_bytes("D835", "Penguins huddle AB in winter")
        ),
    )
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])

    document.refresh_from_db()
    assert (document.status, document.error_message, run.failed) == (DocumentStatus.INDEXED, "", {})
    assert [chunk.text for chunk in Chunk.objects.for_tenant(tenant).filter(document=document)] == [
        "Penguins huddle \ufffdB in winter"
    ]
    assert _vector_count(kb) == 1


@pytest.mark.django_db
def test_a_client_chunk_of_invisible_characters_fails_its_document_and_is_never_searchable(
    milvus_server, api_client, tenant
):
    kb = kb_make(tenant, name="invisible-chunk")
    chunks = [{"text": TEXTS["volcano"]}, {"text": "\u200b\u200b", "external_id": "zw"}]
    response = api_client.post(f"/api/v1/knowledge-bases/{kb.pk}/documents/", {"chunks": chunks}, format="json")
    # Refused at upload, where the chunks are counted ...
    assert response.status_code == 400, response.json()
    assert response.json()["message"].startswith("Chunk 1 (zw) has no text the embedding model reads")
    assert not Document.objects.for_tenant(tenant).exists()
    # ... and by indexing, for a document stored when they could not be (the web could not read the tokenizer).
    stored = Document.objects.create(
        tenant=tenant, knowledge_base=kb, title="zw", source_kind=SourceKind.CHUNKS, source_chunks=chunks
    )
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[stored.pk])

    document = Document.objects.for_tenant(tenant).get(pk=stored.pk)
    assert document.status == DocumentStatus.FAILED, document.status
    assert "Chunk 1 (zw) has no text the embedding model reads" in document.error_message == run.failed[document.pk]
    assert not Chunk.objects.for_tenant(tenant).filter(document=document).exists() and _vector_count(kb) == 0


@pytest.mark.django_db
def test_a_run_that_parses_a_slow_batch_keeps_its_lease(milvus_server, tenant, settings, monkeypatch):
    settings.INGEST_LEASE_SECONDS = 60
    kb = kb_make(tenant, name="slow-batch")
    documents = [_queued(tenant, kb, key) for key in TEXTS]
    clock = {"offset": timedelta(0)}
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + clock["offset"])
    parse = index_parse._document_drafts
    requeued_while_alive: list[int] = []

    def slow_parse(document, **kwargs):
        clock["offset"] += timedelta(seconds=40)  # large PDFs: the batch takes twice the lease to parse
        if clock["offset"] == timedelta(seconds=40 * len(documents)):
            # The housekeeping task runs every minute: it must not hand this live run's documents to another.
            requeued_while_alive.append(services.documents_recover_stalled())
        return parse(document, **kwargs)

    monkeypatch.setattr(index_parse, "_document_drafts", slow_parse)
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[d.pk for d in documents])

    assert requeued_while_alive == [0]
    assert sorted(run.indexed) == sorted(d.pk for d in documents)


@pytest.mark.django_db
def test_a_document_that_keeps_killing_its_worker_ends_failed_and_unsearchable(milvus_server, tenant, settings):
    kb, document = _volcano_indexed(tenant, "exhausted")
    assert _vector_count(kb) == 1
    # Re-indexed, and every run since died in the middle (out of memory): the last one left its rows and vectors.
    Document.objects.for_tenant(tenant).filter(pk=document.pk).update(
        status=DocumentStatus.EMBEDDING,
        attempts=settings.INGEST_MAX_ATTEMPTS,
        claim_token="dead",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )

    assert services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).claimed == []
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED and document.chunk_count == 0
    assert not Chunk.objects.for_tenant(tenant).filter(document_id=document.pk).exists()
    assert _vector_count(kb) == 0


@pytest.mark.django_db
def test_vectors_a_failure_could_not_delete_go_with_the_next_successful_run(milvus_server, tenant, monkeypatch):
    kb, document = _volcano_indexed(tenant, "failed-then-fixed")
    first_chunk = Chunk.objects.for_tenant(tenant).get(document=document).pk

    # A re-index fails (the knowledge base still names a retired model) while Milvus cannot delete.
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(embedding_model="retired-model")
    services.document_reindex(tenant=tenant, document=document)
    with monkeypatch.context() as patched:

        def milvus_down(**kwargs):
            raise vectorstore.VectorStoreUnavailable("Milvus is down")

        patched.setattr(vectorstore, "vectors_delete", milvus_down)
        run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    assert "retired-model" in run.failed[document.pk]
    assert not Chunk.objects.for_tenant(tenant).filter(document=document).exists()

    # Moved to the workers' model, re-indexed: only the new chunk's vector is left.
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(embedding_model=kb.embedding_model)
    services.document_reindex(tenant=tenant, document=document)
    assert services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).indexed == [document.pk]
    chunk = Chunk.objects.for_tenant(tenant).get(document=document)
    assert chunk.pk != first_chunk
    assert _vector_count(kb) == 1


def _reindexed_while_milvus_refuses_writes(tenant, kb: KnowledgeBase, document: Document, monkeypatch) -> None:
    """The document's text changes and it is re-indexed while Milvus refuses every upsert, until the task's retries
    run out: each run stored the new chunk rows before its upsert failed."""
    Document.objects.for_tenant(tenant).filter(pk=document.pk).update(source_text=TEXTS["tides"])
    services.document_reindex(tenant=tenant, document=document)

    def milvus_refuses(**kwargs):
        raise vectorstore.VectorStoreUnavailable("Milvus refuses writes")

    monkeypatch.setattr(vectorstore, "vectors_upsert", milvus_refuses)
    # The task the re-index queued (its on-commit hook does not run inside the test's transaction), as it carries it.
    queue_token = Document.objects.for_tenant(tenant).get(pk=document.pk).queue_token
    tasks.document_index.apply(args=(document.pk, tenant.pk), kwargs={"queue_token": queue_token})
    monkeypatch.undo()


def _volcano_indexed(tenant, name: str) -> tuple[KnowledgeBase, Document]:
    """A knowledge base `name` whose one document (the volcano text) has been indexed."""
    kb = kb_make(tenant, name=name)
    document = _queued(tenant, kb, "volcano")
    services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    return kb, document


def _search(tenant, kb: KnowledgeBase, text: str) -> list[int]:
    query = embeddings.embed_query(text)
    hits = chunk_search(
        tenant=tenant,
        knowledge_base=kb,
        query_vector=query,
        query_text=text,
        query_model_identity=embeddings.model_identity(),
        limit=5,
    )
    return [hit.chunk_id for hit in hits]


@pytest.mark.django_db
def test_a_document_that_fails_after_every_retry_keeps_no_chunks_and_is_not_searchable(
    milvus_server, tenant, monkeypatch
):
    kb, document = _volcano_indexed(tenant, "gave-up")
    assert _search(tenant, kb, TEXTS["volcano"])

    _reindexed_while_milvus_refuses_writes(tenant, kb, document, monkeypatch)

    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED and "gave up" in document.error_message
    assert document.chunk_count == 0
    assert not Chunk.objects.for_tenant(tenant).filter(document=document).exists()
    assert _search(tenant, kb, TEXTS["volcano"]) == [] and _search(tenant, kb, TEXTS["tides"]) == []
    assert _vector_count(kb) == 0


@pytest.mark.django_db
def test_vectors_of_a_document_that_failed_after_retries_go_with_its_next_successful_run(
    milvus_server, tenant, monkeypatch
):
    kb, document = _volcano_indexed(tenant, "gave-up-milvus-down")

    # Milvus cannot delete either when the task gives up: the vector stays, but searches drop it.
    def milvus_down(**kwargs):
        raise vectorstore.VectorStoreUnavailable("Milvus is down")

    monkeypatch.setattr(vectorstore, "vectors_delete", milvus_down)
    _reindexed_while_milvus_refuses_writes(tenant, kb, document, monkeypatch)
    assert not Chunk.objects.for_tenant(tenant).filter(document=document).exists()
    assert _vector_count(kb) == 1 and _search(tenant, kb, TEXTS["volcano"]) == []

    services.document_reindex(tenant=tenant, document=document)
    assert services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).indexed == [document.pk]
    assert _vector_count(kb) == 1
    assert _search(tenant, kb, TEXTS["tides"]) == [Chunk.objects.for_tenant(tenant).get(document=document).pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deleted", ["document", "knowledge_base"])
def test_vectors_a_run_writes_while_a_delete_runs_do_not_outlive_the_rows(milvus_server, tenant, monkeypatch, deleted):
    kb = kb_make(tenant, name=f"racing-{deleted}")
    document = _queued(tenant, kb, "volcano")
    vectors_gone, resume = threading.Event(), threading.Event()
    vectors_delete = vectorstore.vectors_delete

    def delete_then_pause(**kwargs):
        vectors_delete(**kwargs)
        if threading.current_thread() is deleter:  # the delete has cleared Milvus and is about to delete rows
            vectors_gone.set()
            resume.wait(30)

    monkeypatch.setattr(vectorstore, "vectors_delete", delete_then_pause)
    errors: list[BaseException] = []
    deleter = _deleter(deleted, tenant=tenant, document=document, kb=kb, errors=errors, finally_set=resume)
    deleter.start()
    assert vectors_gone.wait(30)
    # A worker indexes the document in that moment: its vectors land after the delete cleared Milvus, and it still
    # sees the document when it finishes.
    assert services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).indexed == [document.pk]
    resume.set()
    deleter.join(30)

    assert errors == []
    assert not Document.objects.for_tenant(tenant).filter(pk=document.pk).exists()
    assert _vector_count(kb) == 0


def _reindex_while(tenant, kb: KnowledgeBase, monkeypatch, meanwhile) -> None:
    """Re-index the knowledge base, calling `meanwhile()` once while its first batch is being encoded."""
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    embed = embedding_cache.embeddings_cached
    pending = [meanwhile]

    def embed_then_act(**kwargs):
        result = embed(**kwargs)
        while pending:
            pending.pop()()
        return result

    monkeypatch.setattr(embedding_cache, "embeddings_cached", embed_then_act)
    services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk)
    monkeypatch.setattr(embedding_cache, "embeddings_cached", embed)


@pytest.mark.django_db
def test_a_document_deleted_during_a_knowledge_base_reindex_leaves_no_vectors(milvus_server, tenant, monkeypatch):
    kb = kb_make(tenant, name="reindex-delete")
    kept, doomed = _queued(tenant, kb, "volcano"), _queued(tenant, kb, "glacier")
    services.documents_index(tenant_id=tenant.pk, document_ids=[kept.pk, doomed.pk])

    _reindex_while(tenant, kb, monkeypatch, lambda: services.document_delete(tenant=tenant, document=doomed))

    assert KnowledgeBase.objects.for_tenant(tenant).get(pk=kb.pk).reindex_status == "done"
    assert _vector_count(kb) == Chunk.objects.for_tenant(tenant).filter(knowledge_base=kb).count() == 1


def _indexed_in_several_chunks(tenant, name: str) -> tuple[KnowledgeBase, Document]:
    """A knowledge base of 16-piece chunks and one indexed document of six sentences there (several chunks)."""
    kb = kb_make(tenant, name=name, chunk_max_tokens=16, chunk_overlap_tokens=0)
    sentences = [f"Fact {i}: the aurora glows green because of oxygen at altitude {i}." for i in range(6)]
    document = _queued(tenant, kb, "aurora", " ".join(sentences))
    services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    return kb, document


@pytest.mark.django_db
def test_a_document_rechunked_during_a_knowledge_base_reindex_stays_findable(milvus_server, tenant, monkeypatch):
    kb, document = _indexed_in_several_chunks(tenant, "reindex-rechunk")
    first = list(Chunk.objects.for_tenant(tenant).filter(document=document).values_list("text", flat=True))
    assert len(first) > 1

    def rechunk() -> None:  # the chunk size is raised and the document re-indexed by a worker meanwhile
        KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(chunk_max_tokens=200)
        services.document_reindex(tenant=tenant, document=document)
        services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])

    _reindex_while(tenant, kb, monkeypatch, rechunk)

    assert Chunk.objects.for_tenant(tenant).filter(document=document).count() == _vector_count(kb) == 1
    query = embeddings.embed_query(first[0])
    hits = chunk_search(
        tenant=tenant,
        knowledge_base=kb,
        query_vector=query,
        query_text=first[0],
        query_model_identity=embeddings.model_identity(),
        limit=5,
        group_by_document=True,
    )
    assert [hit.document_id for hit in hits] == [document.pk]


@pytest.mark.django_db
def test_knowledge_base_reindex_progress_never_passes_one(milvus_server, tenant, settings, monkeypatch):
    settings.INGEST_EMBED_BATCH = 1
    kb = kb_make(tenant, name="reindex-progress")
    first = [_queued(tenant, kb, "volcano"), _queued(tenant, kb, "glacier")]
    services.documents_index(tenant_id=tenant.pk, document_ids=[d.pk for d in first])
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    embed = embedding_cache.embeddings_cached
    seen: list[float] = []

    def embed_and_watch(**kwargs):
        if kwargs["tenant_id"] == tenant.pk and not seen:  # uploads finish indexing while the re-index runs
            seen.append(0.0)
            later = [_queued(tenant, kb, "tides"), _queued(tenant, kb, "later", "Comets grow tails near the sun.")]
            services.documents_index(tenant_id=tenant.pk, document_ids=[d.pk for d in later])
        seen.append(KnowledgeBase.objects.for_tenant(tenant).get(pk=kb.pk).reindex_progress)
        return embed(**kwargs)

    monkeypatch.setattr(embedding_cache, "embeddings_cached", embed_and_watch)
    services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk)

    assert max(seen) <= 1.0, seen
    assert KnowledgeBase.objects.for_tenant(tenant).get(pk=kb.pk).reindex_progress == 1.0


@pytest.mark.django_db
def test_a_document_of_invisible_characters_fails_as_having_no_text(tenant):
    kb = kb_make(tenant, name="invisible")
    document = _queued(tenant, kb, "blank", "\u200b\u200b\n\n\u200b")
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED and run.failed == {document.pk: "The document contains no text."}
    assert not Chunk.objects.for_tenant(tenant).filter(document=document).exists()


@pytest.mark.django_db
def test_a_run_that_stalled_past_its_lease_leaves_the_takeover_run_s_vectors_alone(milvus_server, tenant, monkeypatch):
    kb, document = _indexed_in_several_chunks(tenant, "takeover")
    first_texts = list(Chunk.objects.for_tenant(tenant).filter(document=document).values_list("text", flat=True))
    services.document_reindex(tenant=tenant, document=document)
    embed = embedding_cache.embeddings_cached
    stalled: list[bool] = []

    def stall_past_the_lease(**kwargs):
        if not stalled:
            stalled.append(True)
            # The run freezes (a paused VM, a hung call) until its lease is over. The document looks stuck, so its
            # owner raises the chunk size and re-indexes it, and another worker indexes it completely.
            Document.objects.for_tenant(tenant).filter(pk=document.pk).update(
                lease_expires_at=timezone.now() - timedelta(seconds=1)
            )
            KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(chunk_max_tokens=200)
            services.document_reindex(tenant=tenant, document=document)
            assert services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).indexed == [document.pk]
        return embed(**kwargs)

    monkeypatch.setattr(embedding_cache, "embeddings_cached", stall_past_the_lease)
    stale_run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])  # then it wakes up

    assert stale_run.indexed == []
    document.refresh_from_db()
    assert document.status == DocumentStatus.INDEXED and document.chunk_count == 1
    assert _vector_count(kb) == 1
    query = embeddings.embed_query(first_texts[0])
    hits = chunk_search(
        tenant=tenant,
        knowledge_base=kb,
        query_vector=query,
        query_text=first_texts[0],
        query_model_identity=embeddings.model_identity(),
        limit=5,
        group_by_document=True,
    )
    assert [hit.document_id for hit in hits] == [document.pk]


def _time_limit_once(monkeypatch, *, on_call: int = 1, before_each=None) -> None:
    """The worker's soft time limit fires during the `on_call`-th encode, as it does in a task that runs too long."""
    embed = embedding_cache.embeddings_cached
    calls: list[int] = []

    def embed_until_the_limit(**kwargs):
        calls.append(1)
        if before_each is not None:
            before_each()
        if len(calls) == on_call:
            raise SoftTimeLimitExceeded()
        return embed(**kwargs)

    monkeypatch.setattr(embedding_cache, "embeddings_cached", embed_until_the_limit)


@pytest.mark.django_db
def test_a_batch_that_outlasts_the_task_time_limit_is_continued_not_failed(milvus_server, tenant, monkeypatch):
    kb = kb_make(tenant, name="time-limit-batch")
    ids = [_queued(tenant, kb, key).pk for key in TEXTS]
    _time_limit_once(monkeypatch)

    tasks.documents_index_batch.apply(args=(ids, tenant.pk))

    assert _statuses(tenant, ids) == dict.fromkeys(ids, DocumentStatus.INDEXED)
    assert _vector_count(kb) == len(ids)


@pytest.mark.django_db
def test_a_knowledge_base_reindex_that_outlasts_the_task_time_limit_is_continued(
    milvus_server, tenant, settings, monkeypatch
):
    settings.INGEST_EMBED_BATCH = 1
    kb = kb_make(tenant, name="time-limit-reindex")
    ids = [_queued(tenant, kb, key).pk for key in TEXTS]
    services.documents_index(tenant_id=tenant.pk, document_ids=ids)
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    shown: list[float] = []

    def watch() -> None:
        shown.append(KnowledgeBase.objects.for_tenant(tenant).get(pk=kb.pk).reindex_progress)

    _time_limit_once(monkeypatch, on_call=3, before_each=watch)  # two of three chunks done

    tasks.knowledge_base_reindex.apply(args=(kb.pk, tenant.pk))

    kb.refresh_from_db()
    assert (kb.reindex_status, kb.reindex_progress) == ("done", 1.0), kb.reindex_error
    assert shown == sorted(shown), "the progress shown went back"


@pytest.mark.django_db
def test_a_model_mismatch_says_the_failed_document_needs_its_own_reindex_and_that_is_what_works(milvus_server, tenant):
    kb = kb_make(tenant, name="retired-model")
    # The knowledge base holds vectors of a model the workers no longer run (an empty one would take theirs).
    earlier = _queued(tenant, kb, "glacier")
    assert services.documents_index(tenant_id=tenant.pk, document_ids=[earlier.pk]).indexed == [earlier.pk]
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(embedding_model="retired-model")
    document = _queued(tenant, kb, "volcano")

    message = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).failed[document.pk]
    assert "'retired-model'" in message and "re-index the knowledge base" in message.lower()
    assert "then re-index this document" in message

    # As the message says: the knowledge-base re-index alone leaves the failed document failed ...
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk)
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED
    # ... and re-indexing the document afterwards indexes it.
    services.document_reindex(tenant=tenant, document=document)
    assert services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).indexed == [document.pk]


class _Clock:
    """Django's clock, moved forward by the test (timezone.now is what every lease is written and read with)."""

    def __init__(self, monkeypatch) -> None:
        self.offset = timedelta()
        real_now = timezone.now
        monkeypatch.setattr(timezone, "now", lambda: real_now() + self.offset)

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def _requeued(monkeypatch) -> list[tuple]:
    """The re-index tasks queued from now on (recorded instead of sent to the broker)."""
    sent: list[tuple] = []
    monkeypatch.setattr(tasks.knowledge_base_reindex, "delay", lambda *args: sent.append(args))
    return sent


class _WorkerKilled(BaseException):
    """What the run sees of a worker killed under it: nothing after this point runs, not even its except blocks."""


@pytest.mark.django_db
def test_a_knowledge_base_reindex_whose_task_was_lost_is_noticed_within_its_lease_and_resumed(
    milvus_server, tenant, settings, monkeypatch, django_capture_on_commit_callbacks
):
    kb = kb_make(tenant, name="reindex-lost")
    ids = [_queued(tenant, kb, key).pk for key in TEXTS]
    services.documents_index(tenant_id=tenant.pk, document_ids=ids)
    clock = _Clock(monkeypatch)
    sent = _requeued(monkeypatch)
    with django_capture_on_commit_callbacks(execute=False):
        services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)  # its task never arrives

    clock.advance(settings.INGEST_LEASE_SECONDS - 30)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.documents_recover_stalled.apply()  # the beat task, every minute: too early to call it lost
    assert sent == []
    with pytest.raises(ConflictError):
        services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)

    clock.advance(60)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.documents_recover_stalled.apply()
    kb.refresh_from_db()
    assert sent == [(kb.pk, tenant.pk)]
    assert kb.reindex_status == "running"
    assert "stopped" in kb.reindex_error and "queued again" in kb.reindex_error

    tasks.knowledge_base_reindex.apply(args=sent[0])  # the queued task runs
    kb.refresh_from_db()
    assert (kb.reindex_status, kb.reindex_progress, kb.reindex_error) == ("done", 1.0, "")
    assert _vector_count(kb) == len(ids)


@pytest.mark.django_db
def test_a_slow_knowledge_base_reindex_that_keeps_moving_is_left_alone(
    milvus_server, tenant, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.INGEST_EMBED_BATCH = 1
    kb = kb_make(tenant, name="reindex-slow")
    ids = [_queued(tenant, kb, key).pk for key in TEXTS]
    services.documents_index(tenant_id=tenant.pk, document_ids=ids)
    clock = _Clock(monkeypatch)
    sent = _requeued(monkeypatch)
    with django_capture_on_commit_callbacks(execute=False):
        services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    embed = embedding_cache.embeddings_cached
    duplicate_runs: list[int] = []

    nested: list[bool] = []

    def slow_batch(**kwargs):
        if nested:  # inside a duplicate run (there should be none)
            return embed(**kwargs)
        # Each batch takes most of a lease: three of them outlast it, but the run says it is alive after each.
        clock.advance(settings.INGEST_LEASE_SECONDS * 0.7)
        with django_capture_on_commit_callbacks(execute=True):
            tasks.documents_recover_stalled.apply()
        # A second delivery of the task meanwhile finds the run alive and does nothing.
        nested.append(True)
        try:
            duplicate_runs.append(services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk))
        finally:
            nested.pop()
        return embed(**kwargs)

    monkeypatch.setattr(embedding_cache, "embeddings_cached", slow_batch)
    assert services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk) == len(ids)

    kb.refresh_from_db()
    assert sent == [] and duplicate_runs == [0] * len(ids)
    assert (kb.reindex_status, kb.reindex_progress, kb.reindex_error) == ("done", 1.0, "")


@pytest.mark.django_db
def test_a_knowledge_base_reindex_that_keeps_killing_its_worker_ends_failed_with_the_reason(
    milvus_server, tenant, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.INGEST_MAX_ATTEMPTS = 2
    kb = kb_make(tenant, name="reindex-killer")
    services.documents_index(tenant_id=tenant.pk, document_ids=[_queued(tenant, kb, "volcano").pk])
    clock = _Clock(monkeypatch)
    sent = _requeued(monkeypatch)
    with django_capture_on_commit_callbacks(execute=False):
        services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)

    def killed(**kwargs):
        raise _WorkerKilled()

    monkeypatch.setattr(embedding_cache, "embeddings_cached", killed)
    for _ in range(settings.INGEST_MAX_ATTEMPTS):
        with pytest.raises(_WorkerKilled):
            services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk)
        clock.advance(settings.INGEST_LEASE_SECONDS + 60)
        with django_capture_on_commit_callbacks(execute=True):
            tasks.documents_recover_stalled.apply()

    kb.refresh_from_db()
    assert len(sent) == settings.INGEST_MAX_ATTEMPTS - 1
    assert kb.reindex_status == "failed" and "interrupted 2 times" in kb.reindex_error
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)  # it can be started again


@pytest.mark.django_db(transaction=True)
def test_migration_gives_a_reindex_running_at_the_upgrade_a_lease_from_its_last_move(tenant, settings):
    before = [("retrieval", "0006_embedding_cache_keyed_by_model_identity")]
    after = [("retrieval", "0007_knowledge_base_reindex_lease")]
    with migrations_crossed(before, after) as apps:
        kb_model = apps.get_model("retrieval", "KnowledgeBase")
        moved = timezone.now() - timedelta(minutes=3)
        running = kb_model.objects.create(tenant_id=tenant.pk, name="running", reindex_status="running")
        kb_model.objects.create(tenant_id=tenant.pk, name="idle")
        kb_model.objects.filter(pk=running.pk).update(updated_at=moved)

    leases = dict(KnowledgeBase.objects.for_tenant(tenant).values_list("name", "reindex_lease_expires_at"))
    assert leases == {"running": moved + timedelta(seconds=settings.INGEST_LEASE_SECONDS), "idle": None}


def _requeued_while_the_first_task_waits_for_its_last_retry(tenant, document: Document, monkeypatch, capture, batch):
    """The first task meets a Milvus that refuses writes on every try; while it waits for its last retry, the user
    re-indexes the document (a second task, held back: it runs when the test says). Returns that second task's run."""
    queued_again: list = []

    def countdown(retries: int) -> float:
        if retries == tasks.MAX_RETRIES - 1:
            services.document_reindex(tenant=tenant, document=document)
        return 0.0

    def refuses(**kwargs):
        raise vectorstore.VectorStoreUnavailable("Milvus refuses writes")

    def queued(*args, **kwargs):
        queued_again.append((args, kwargs))

    with monkeypatch.context() as patched:
        patched.setattr(tasks, "retry_countdown", countdown)
        patched.setattr(vectorstore, "vectors_upsert", refuses)
        patched.setattr(tasks.document_index, "delay", queued)
        first = tasks.documents_index_batch if batch else tasks.document_index
        with capture(execute=False) as callbacks:
            first.apply(args=([document.pk] if batch else document.pk, tenant.pk))
        for callback in callbacks:
            callback()
    assert len(queued_again) == 1, "the re-index queued one task"
    args, kwargs = queued_again[0]
    return lambda: tasks.document_index.apply(args=args, kwargs=kwargs)


@pytest.mark.django_db
@pytest.mark.parametrize("batch", [False, True])
def test_a_reindex_queued_while_an_older_task_waits_to_retry_outlives_that_task_giving_up(
    milvus_server, tenant, monkeypatch, django_capture_on_commit_callbacks, batch
):
    kb = kb_make(tenant, name=f"requeued-{batch}")
    document = _queued(tenant, kb, "volcano")

    second_task = _requeued_while_the_first_task_waits_for_its_last_retry(
        tenant, document, monkeypatch, django_capture_on_commit_callbacks, batch
    )

    # The first task's last try took the re-queued document, failed and gave up: the document is the user's re-index's
    # to run, not failed.
    document.refresh_from_db()
    assert document.status == DocumentStatus.QUEUED, document.error_message
    second_task()
    document.refresh_from_db()
    assert document.status == DocumentStatus.INDEXED, document.error_message
    assert _search(tenant, kb, TEXTS["volcano"]) == [Chunk.objects.for_tenant(tenant).get(document=document).pk]


def _reindex_task_with_milvus_failing_after(monkeypatch, tenant, kb: KnowledgeBase, batches: int) -> None:
    """Run the knowledge-base re-index task while Milvus takes `batches` upserts and refuses every later one, until
    the task's retries run out."""
    upsert = vectorstore.vectors_upsert
    taken: list[int] = []

    def upsert_then_refuse(**kwargs):
        if len(taken) >= batches:
            raise vectorstore.VectorStoreUnavailable("Milvus refuses writes")
        taken.append(1)
        return upsert(**kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(vectorstore, "vectors_upsert", upsert_then_refuse)
        patched.setattr(tasks, "retry_countdown", lambda retries: 0.0)
        tasks.knowledge_base_reindex.apply(args=(kb.pk, tenant.pk))
    kb.refresh_from_db()
    assert kb.reindex_status == "failed", kb.reindex_status


@pytest.mark.django_db
def test_a_failed_reindex_is_told_apart_by_whether_it_was_changing_the_model(
    milvus_server, tenant, settings, monkeypatch
):
    settings.INGEST_EMBED_BATCH = 1
    kb = kb_make(tenant, name="failed-moves")
    services.documents_index(tenant_id=tenant.pk, document_ids=[_queued(tenant, kb, key).pk for key in TEXTS])
    identity = embeddings.model_identity()
    # The vectors are another version's of the model (its files replaced in place): the re-index moves the knowledge
    # base to the workers' version, and stops after one of three chunks.
    old = embeddings.identity_name(identity) + "@" + "0" * 16
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(embedding_model_identity=old)
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    _reindex_task_with_milvus_failing_after(monkeypatch, tenant, kb, batches=1)

    # Two versions' vectors side by side: refused, as another model's are, until the re-index is run again.
    assert (kb.embedding_model_identity, kb.reindex_from_model_identity) == (identity, old)
    assert index_state(knowledge_base=kb, query_model_identity=identity).status == IndexStatus.REINDEX_FAILED
    with pytest.raises(EmbeddingModelMismatchError, match="stopped part way"):
        _search(tenant, kb, TEXTS["tides"])

    # Run again to the end: every vector is the workers' version's.
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    assert services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk) == len(TEXTS)
    kb.refresh_from_db()
    assert (kb.reindex_status, kb.reindex_from_model_identity) == ("done", "")
    assert index_state(knowledge_base=kb, query_model_identity=identity).status == IndexStatus.CURRENT

    # A rebuild on the same model that stops part way leaves every vector that model's: searched as current.
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    _reindex_task_with_milvus_failing_after(monkeypatch, tenant, kb, batches=1)
    assert kb.reindex_from_model_identity == ""
    assert index_state(knowledge_base=kb, query_model_identity=identity).status == IndexStatus.CURRENT
    assert _search(tenant, kb, TEXTS["tides"])


@pytest.mark.django_db(transaction=True)
def test_migration_counts_a_reindex_unfinished_at_the_upgrade_as_changing_the_model(tenant):
    before = [("retrieval", "0011_document_queue_token")]
    after = [("retrieval", "0012_knowledge_base_reindex_from_model")]
    with migrations_crossed(before, after) as apps:
        kb_model = apps.get_model("retrieval", "KnowledgeBase")
        for status in ("idle", "running", "done", "failed"):
            kb_model.objects.create(tenant_id=tenant.pk, name=status, reindex_status=status)

    moved_from = dict(KnowledgeBase.objects.for_tenant(tenant).values_list("name", "reindex_from_model_identity"))
    assert moved_from == {"idle": "", "running": "unrecorded", "done": "", "failed": "unrecorded"}


@pytest.mark.django_db
def test_a_reindex_task_giving_up_leaves_alone_a_reindex_another_run_took_up_meanwhile(
    milvus_server, tenant, monkeypatch
):
    kb = kb_make(tenant, name="given-up-reindex")
    services.documents_index(tenant_id=tenant.pk, document_ids=[_queued(tenant, kb, key).pk for key in TEXTS])
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    release = reindex._reindex_release
    releases: list[int] = []

    def release_then_taken_up(**kwargs):
        release(**kwargs)
        releases.append(1)
        if len(releases) == tasks.MAX_RETRIES + 1:  # the last try: another run (the sweep's) takes the re-index up
            assert reindex._reindex_claim(tenant_id=tenant.pk, knowledge_base_id=kb.pk, token="other-run")

    def refuses(**kwargs):
        raise vectorstore.VectorStoreUnavailable("Milvus refuses writes")

    with monkeypatch.context() as patched:
        patched.setattr(reindex, "_reindex_release", release_then_taken_up)
        patched.setattr(vectorstore, "vectors_upsert", refuses)
        patched.setattr(tasks, "retry_countdown", lambda retries: 0.0)
        tasks.knowledge_base_reindex.apply(args=(kb.pk, tenant.pk))

    kb.refresh_from_db()
    assert (kb.reindex_status, kb.reindex_claim_token) == ("running", "other-run"), kb.reindex_error


@pytest.mark.django_db(transaction=True)
def test_a_reindex_start_answers_running_even_when_its_task_ends_first(milvus_server, tenant, monkeypatch):
    """The 202 of a re-index says what was started: a worker that finishes the task before the request has answered
    (a small knowledge base, an idle worker) must not turn it into "done" the client never saw start."""
    kb = kb_make(tenant, name="quick-reindex")
    documents = [_queued(tenant, kb, key) for key in TEXTS]
    services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk for document in documents])

    def run_at_once(knowledge_base_id: int, tenant_id: int) -> None:
        services.knowledge_base_reindex(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)

    monkeypatch.setattr(tasks.knowledge_base_reindex, "delay", run_at_once)
    started = services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=kb)
    assert started.reindex_status == "running"
    assert KnowledgeBase.objects.for_tenant(tenant).get(pk=kb.pk).reindex_status == "done"
