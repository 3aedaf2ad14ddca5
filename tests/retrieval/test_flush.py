"""Written vectors reach an indexed segment: before an indexing run marks its documents indexed (chunks), and at each
beat flush (everything, question vectors included); never with MILVUS_FLUSH_INTERVAL=0.

Milvus Lite searches what it holds in memory row by row and what it has flushed through the index, so "searched
through the index" is observed as "in a flushed data file" of the server's data directory."""

from __future__ import annotations

import hashlib
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.test import override_settings

from retrieval import milvus, question_index, services, tasks
from retrieval.models import Chunk, Document, DocumentStatus, SourceKind
from tests.retrieval.factories import kb_make
from tests.retrieval.test_ingestion_integration import post_json, search, wait_final

pytestmark = pytest.mark.django_db(transaction=True)


def flushed_ids(server, collection: str, primary: str) -> set[int]:
    """Primary keys in the flushed data files of one collection of a `milvus-lite server`. Milvus Lite compacts small
    files into larger ones as it goes: a file listed here may be gone when it is read, its rows in the file that
    replaced it, or still being written (no Parquet footer yet), its rows still in the files it replaces; so the
    listing is read again until one is read whole."""
    for _ in range(20):
        found: set[int] = set()
        try:
            for path in server.data_dir.rglob("data_*.parquet"):
                if collection in path.parts:
                    found.update(pq.read_table(path, columns=[primary]).column(primary).to_pylist())
        except (FileNotFoundError, pa.ArrowInvalid):
            time.sleep(0.1)
            continue
        return found
    raise AssertionError("Milvus Lite's data files kept changing under every read")


def queued_document(tenant, kb, text: str) -> Document:
    return Document.objects.create(
        tenant=tenant,
        knowledge_base=kb,
        title=text[:20],
        source_kind=SourceKind.TEXT,
        source_text=text,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
    )


@pytest.mark.integration
def test_a_document_indexed_by_the_worker_is_in_a_flushed_segment_when_its_run_ends(
    api_client, tenant, milvus_server, celery_worker_process
):
    kb = kb_make(tenant, name=f"flush-{uuid.uuid4().hex[:6]}")
    text = "Basalt columns form when a thick lava flow cools and contracts into hexagonal prisms."
    document_id = post_json(api_client, kb, {"title": "basalt", "text": text})
    assert wait_final(tenant, [document_id], celery_worker_process)[document_id].status == DocumentStatus.INDEXED
    chunk_ids = set(Chunk.objects.for_tenant(tenant).filter(document_id=document_id).values_list("pk", flat=True))
    assert chunk_ids
    # The run flushes before it marks the document indexed: no delay to wait out.
    assert chunk_ids <= flushed_ids(milvus_server, settings.MILVUS_COLLECTION, "chunk_id")
    assert search(api_client, kb, "hexagonal basalt columns from cooling lava")[0]["document_id"] == document_id


def test_an_indexing_run_flushes_only_when_flushing_is_on(tenant, milvus_server):
    kb = kb_make(tenant, name=f"flush-off-{uuid.uuid4().hex[:6]}")
    collection = settings.MILVUS_COLLECTION

    def run_and_collect(text: str, interval: float) -> set[int]:
        document = queued_document(tenant, kb, text)
        with override_settings(MILVUS_FLUSH_INTERVAL=interval):
            run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
        assert run.indexed == [document.pk]
        return set(Chunk.objects.for_tenant(tenant).filter(document=document).values_list("pk", flat=True))

    unflushed = run_and_collect("Obsidian is volcanic glass: felsic lava that cooled too fast to crystallise.", 0)
    assert not unflushed & flushed_ids(milvus_server, collection, "chunk_id")
    flushed = run_and_collect("Pumice is a frothy volcanic rock so full of gas bubbles that it floats on water.", 15)
    # The run flushes the whole collection: the earlier run's rows go with it.
    assert unflushed | flushed <= flushed_ids(milvus_server, collection, "chunk_id")


def test_the_beat_flush_reaches_question_collections(tenant, milvus_server):
    from retrieval.embeddings import embed_query, model_id

    kb = kb_make(tenant, name=f"flush-q-{uuid.uuid4().hex[:6]}")
    turn_id = 10**12 + uuid.uuid4().int % 10**9  # never a real turn's id: the row is this test's alone
    vector = embed_query("How do I rotate my API key?")
    question_index.question_vectors_upsert(
        rows=[
            question_index.QuestionVector(
                turn_id=turn_id, tenant_id=tenant.pk, knowledge_base_id=kb.pk, created_ts=0, vector=vector
            )
        ],
        model=model_id(),
    )
    name = question_index.question_collection_name(model=model_id())
    with override_settings(MILVUS_FLUSH_INTERVAL=0):
        assert tasks.vectors_flush() == 0
    assert turn_id not in flushed_ids(milvus_server, name, "turn_id")
    assert tasks.vectors_flush() >= 2  # the chunk collection and this question collection at least
    assert turn_id in flushed_ids(milvus_server, name, "turn_id")
    question_index.question_vectors_delete(tenant_id=tenant.pk, turn_ids=[turn_id])


def test_a_flush_milvus_refuses_is_logged_and_loses_nothing(tenant, milvus_server, monkeypatch, caplog):
    kb = kb_make(tenant, name=f"flush-refused-{uuid.uuid4().hex[:6]}")
    client = milvus.connect()

    def refuse(*args, **kwargs):
        raise RuntimeError("flush rate exceeded")

    monkeypatch.setattr(client, "flush", refuse)
    document = queued_document(tenant, kb, "Tuff is rock made of volcanic ash compacted over time.")
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    assert run.indexed == [document.pk]
    document.refresh_from_db()
    assert document.status == DocumentStatus.INDEXED
    assert "not flushed" in caplog.text
