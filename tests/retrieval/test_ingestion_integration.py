"""End to end through a real Celery worker, Redis broker and `milvus-lite server`."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from retrieval import vectorstore
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase
from retrieval.services import documents_recover_stalled
from tests.retrieval import files
from tests.retrieval.factories import kb_make
from tests.services import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FINAL = (DocumentStatus.INDEXED, DocumentStatus.FAILED)


def wait_final(tenant, ids, worker) -> dict[int, Document]:
    def done():
        rows = {d.pk: d for d in Document.objects.for_tenant(tenant).filter(pk__in=ids)}
        return rows if len(rows) == len(ids) and all(d.status in FINAL for d in rows.values()) else None

    return wait_for(done, worker=worker)


def upload(client, kb, name: str, data: bytes, content_type: str = "application/octet-stream") -> int:
    response = client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/",
        {"file": SimpleUploadedFile(name, data, content_type=content_type)},
        format="multipart",
    )
    assert response.status_code == 202, response.json()
    return response.json()["id"]


def post_json(client, kb, payload: dict) -> int:
    response = client.post(f"/api/v1/knowledge-bases/{kb.pk}/documents/", payload, format="json")
    assert response.status_code == 202, response.json()
    return response.json()["id"]


def search(client, kb, query: str, limit: int = 5) -> list[dict]:
    response = client.post(f"/api/v1/knowledge-bases/{kb.pk}/search/", {"query": query, "limit": limit}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()["results"]


def vector_count(kb: KnowledgeBase) -> int:
    return vectorstore.vectors_count(tenant_id=kb.tenant_id, knowledge_base_id=kb.pk, dimension=kb.embedding_dimension)


def test_every_file_type_reaches_indexed_and_is_searchable(api_client, tenant, celery_worker_process):
    kb = kb_make(tenant, name=f"types-{uuid.uuid4().hex[:6]}")
    ids = {
        "txt": upload(api_client, kb, "plain.txt", b"Volcanoes erupt when magma pressure exceeds the crust strength."),
        "md": upload(api_client, kb, "guide.md", b"# Glaciers\n\nGlaciers carve U-shaped valleys over millennia."),
        "html": upload(
            api_client,
            kb,
            "page.html",
            b"<html><body><h1>Tides</h1><p>The moon's gravity drives ocean tides.</p>"
            b"<script>ignored()</script></body></html>",
        ),
        "pdf": upload(api_client, kb, "paper.pdf", files.pdf_bytes(["Photosynthesis converts sunlight into sugar."])),
        "docx": upload(api_client, kb, "memo.docx", files.docx_bytes(["Penguins huddle together to survive winter."])),
        "text": post_json(api_client, kb, {"title": "Bees", "text": "Honeybees communicate with a waggle dance."}),
        "chunks": post_json(
            api_client,
            kb,
            {
                "title": "Pre",
                "external_id": "pre-1",
                "chunks": [
                    {"text": "Tectonic plates drift a few centimetres a year.", "external_id": "pre-1-a"},
                    {"text": "Earthquakes release stress stored along faults.", "external_id": "pre-1-b"},
                ],
            },
        ),
    }
    documents = wait_final(tenant, list(ids.values()), celery_worker_process)
    for kind, doc_id in ids.items():
        document = documents[doc_id]
        assert document.status == DocumentStatus.INDEXED, (kind, document.error_message)
        assert document.progress == 1.0 and document.chunk_count >= 1 and document.attempts == 1
        assert document.indexed_at >= document.embedding_started_at >= document.parsing_started_at
    assert documents[ids["chunks"]].chunk_count == 2
    total_chunks = Chunk.objects.for_tenant(tenant).filter(knowledge_base=kb).count()
    assert total_chunks == sum(d.chunk_count for d in documents.values())
    assert vector_count(kb) == total_chunks

    detail = api_client.get(f"/api/v1/documents/{ids['pdf']}/").json()
    assert detail["status"] == "indexed" and detail["chunk_count"] == 1 and detail["error_message"] == ""

    expectations = {
        "How do plants make sugar from light?": ids["pdf"],
        "What shapes valleys carved by ice?": ids["md"],
        "why are there ocean tides": ids["html"],
        "how do bees tell each other where flowers are": ids["text"],
        "penguins in the cold": ids["docx"],
    }
    for query, doc_id in expectations.items():
        assert search(api_client, kb, query)[0]["document_id"] == doc_id, query
    hit = search(api_client, kb, "faults and earthquakes")[0]
    assert (hit["document_id"], hit["external_id"], hit["document_external_id"]) == (ids["chunks"], "pre-1-b", "pre-1")
    assert "ignored()" not in " ".join(c.text for c in Chunk.objects.for_tenant(tenant).filter(document_id=ids["html"]))


def test_each_bad_file_fails_with_its_message_and_affects_nothing_else(api_client, tenant, celery_worker_process):
    kb = kb_make(tenant, name=f"bad-{uuid.uuid4().hex[:6]}")
    bad = {
        upload(api_client, kb, "broken.pdf", files.CORRUPT_PDF): "The PDF is damaged",
        upload(api_client, kb, "locked.pdf", files.encrypted_pdf_bytes(["secret"])): "password-protected",
        upload(api_client, kb, "scan.pdf", files.image_only_pdf_bytes()): "no extractable text",
        upload(api_client, kb, "broken.docx", files.corrupt_docx_bytes()): "The Word document is damaged",
        upload(api_client, kb, "locked.docx", files.OLE2_ENCRYPTED_OFFICE): "password-protected Office document",
        upload(api_client, kb, "photo.png", files.BINARY): "The file is binary",
        upload(api_client, kb, "empty.txt", b""): "The file is empty.",
        upload(api_client, kb, "files.zip", files.zip_bytes()): "ZIP archive",
    }
    # A client's chunk longer than the knowledge base's chunks is refused at upload, before anything is stored.
    too_long = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/",
        {"title": "long", "chunks": [{"text": "word " * 400}]},
        format="json",
    )
    assert too_long.status_code == 400 and "has 400 word pieces" in too_long.json()["message"]
    good = upload(api_client, kb, "fine.txt", b"Comets grow tails of gas and dust near the sun.")
    documents = wait_final(tenant, [*bad, good], celery_worker_process)
    for doc_id, message in bad.items():
        document = documents[doc_id]
        assert document.status == DocumentStatus.FAILED, (message, document.status)
        assert message in document.error_message, (message, document.error_message)
        assert document.chunk_count == 0 and document.failed_at is not None
        response = api_client.get(f"/api/v1/documents/{doc_id}/").json()
        assert response["status"] == "failed" and message in response["error_message"]
    assert documents[good].status == DocumentStatus.INDEXED
    assert not Chunk.objects.for_tenant(tenant).filter(document_id__in=list(bad)).exists()
    assert vector_count(kb) == documents[good].chunk_count


def test_two_tenants_with_identical_documents_never_see_each_other(
    api_client, other_api_client, tenant, other_tenant, celery_worker_process
):
    text = "The Krebs cycle oxidises acetyl-CoA to carbon dioxide in the mitochondrial matrix."
    kb_a, kb_b = kb_make(tenant, name="shared-name"), kb_make(other_tenant, name="shared-name")
    doc_a, doc_b = post_json(api_client, kb_a, {"text": text}), post_json(other_api_client, kb_b, {"text": text})
    wait_final(tenant, [doc_a], celery_worker_process)
    wait_final(other_tenant, [doc_b], celery_worker_process)
    hits_a = search(api_client, kb_a, "citric acid cycle in mitochondria", limit=10)
    hits_b = search(other_api_client, kb_b, "citric acid cycle in mitochondria", limit=10)
    assert [h["document_id"] for h in hits_a] == [doc_a]
    assert [h["document_id"] for h in hits_b] == [doc_b]
    assert hits_a[0]["score"] == pytest.approx(hits_b[0]["score"], abs=1e-4)
    # Knowledge-base ids are per tenant too: the other tenant's id is a 404, not an empty search.
    assert (
        other_api_client.post(
            f"/api/v1/knowledge-bases/{kb_a.pk}/search/", {"query": "Krebs"}, format="json"
        ).status_code
        == 404
    )


def test_reindex_keeps_chunk_ids_rechunking_drops_stale_vectors_and_delete_removes_all(
    api_client, tenant, celery_worker_process
):
    kb = kb_make(tenant, name=f"re-{uuid.uuid4().hex[:6]}", chunk_max_tokens=64, chunk_overlap_tokens=0)
    text = " ".join(f"Fact {i}: the aurora borealis glows green because of oxygen at altitude {i}." for i in range(40))
    doc_id = post_json(api_client, kb, {"text": text, "external_id": "aurora"})
    first = wait_final(tenant, [doc_id], celery_worker_process)[doc_id]
    first_ids = list(Chunk.objects.for_tenant(tenant).filter(document_id=doc_id).values_list("pk", flat=True))
    assert first.status == DocumentStatus.INDEXED and len(first_ids) == first.chunk_count > 3

    # Same text, same settings: the same chunk rows, nothing duplicated in Milvus.
    assert api_client.post(f"/api/v1/documents/{doc_id}/reindex/").status_code == 202
    again = wait_final(tenant, [doc_id], celery_worker_process)[doc_id]
    assert again.status == DocumentStatus.INDEXED
    assert list(Chunk.objects.for_tenant(tenant).filter(document_id=doc_id).values_list("pk", flat=True)) == first_ids
    assert vector_count(kb) == len(first_ids)

    # Bigger chunks: new rows, and the old rows' vectors are gone.
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(chunk_max_tokens=200)
    assert api_client.post(f"/api/v1/documents/{doc_id}/reindex/").status_code == 202
    rechunked = wait_final(tenant, [doc_id], celery_worker_process)[doc_id]
    assert rechunked.status == DocumentStatus.INDEXED and rechunked.chunk_count < len(first_ids)
    assert vector_count(kb) == rechunked.chunk_count
    assert {h["chunk_id"] for h in search(api_client, kb, "aurora oxygen", limit=10)}.isdisjoint(first_ids)

    # Rebuilding the whole knowledge base from stored chunks, with progress.
    response = api_client.post(f"/api/v1/knowledge-bases/{kb.pk}/reindex/")
    assert response.status_code == 202 and response.json()["reindex_status"] == "running"
    rebuilt = wait_for(
        lambda: KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk, reindex_status="done").first(),
        worker=celery_worker_process,
    )
    assert rebuilt.reindex_progress == 1.0 and vector_count(kb) == rechunked.chunk_count

    assert api_client.delete(f"/api/v1/documents/{doc_id}/").status_code == 204
    assert api_client.get(f"/api/v1/documents/{doc_id}/").status_code == 404
    assert not Chunk.objects.for_tenant(tenant).filter(document_id=doc_id).exists()
    assert vector_count(kb) == 0
    assert search(api_client, kb, "aurora") == []


def test_worker_killed_mid_task_recovers_without_duplicates(api_client, tenant, celery_worker_process):
    # One short paragraph per chunk, more chunks than one embedding batch, so the kill lands between batches.
    kb = kb_make(tenant, name=f"kill-{uuid.uuid4().hex[:6]}", chunk_max_tokens=16, chunk_overlap_tokens=0)
    paragraphs = settings.INGEST_EMBED_BATCH * 3
    text = "\n\n".join(f"Delta {i} holds sediment layer {i}." for i in range(paragraphs))
    doc_id = post_json(api_client, kb, {"text": text})

    def mid_embedding():
        document = Document.objects.for_tenant(tenant).get(pk=doc_id)
        return document if document.status == DocumentStatus.EMBEDDING and document.progress > 0.2 else None

    wait_for(mid_embedding, interval=0.02, worker=celery_worker_process)
    celery_worker_process.kill()
    killed = Document.objects.for_tenant(tenant).get(pk=doc_id)
    assert killed.status in (DocumentStatus.EMBEDDING, DocumentStatus.INDEXING) and killed.progress < 1.0
    chunks_before = list(Chunk.objects.for_tenant(tenant).filter(document_id=doc_id).values_list("pk", flat=True))
    assert len(chunks_before) == killed.chunk_count > settings.INGEST_EMBED_BATCH
    assert 0 < vector_count(kb) < killed.chunk_count  # some batches were upserted before the kill

    celery_worker_process.start()
    # Nothing is requeued while the dead run's lease is live...
    assert documents_recover_stalled() == 0
    # ...and once it has expired, the housekeeping task hands the document to a new run.
    Document.objects.for_tenant(tenant).filter(pk=doc_id).update(lease_expires_at=timezone.now())
    assert documents_recover_stalled() == 1
    recovered = wait_final(tenant, [doc_id], celery_worker_process)[doc_id]
    assert recovered.status == DocumentStatus.INDEXED, recovered.error_message
    assert recovered.attempts == 2
    chunk_ids = list(Chunk.objects.for_tenant(tenant).filter(document_id=doc_id).values_list("pk", flat=True))
    assert chunk_ids == chunks_before  # stable ids across the re-run
    positions = list(Chunk.objects.for_tenant(tenant).filter(document_id=doc_id).values_list("position", flat=True))
    assert positions == list(range(recovered.chunk_count))
    assert vector_count(kb) == recovered.chunk_count


def test_ingest_command_loads_a_folder_and_a_beir_jsonl_and_skips_what_is_there(
    tenant, tmp_path, celery_worker_process
):
    import io
    import json

    from django.core.management import call_command

    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("Sourdough needs a lively starter.")
    (folder / "sub" / "b.docx").write_bytes(files.docx_bytes(["Baguettes need steam in the oven."]))
    (folder / ".hidden").write_text("never ingested")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps({"_id": f"d{i}", "title": f"Title {i}", "text": f"Abstract number {i}."}) for i in range(3)
        )
    )
    out = io.StringIO()
    call_command("ingest", str(folder), tenant=tenant.slug, kb="bakery", stdout=out, stderr=io.StringIO())
    call_command("ingest", str(corpus), tenant=tenant.slug, kb="bakery", stdout=out, stderr=io.StringIO())
    assert "Created knowledge base 'bakery'" in out.getvalue()
    assert out.getvalue().count("Indexed") == 2 and "0 failed" in out.getvalue()
    kb = KnowledgeBase.objects.for_tenant(tenant).get(name="bakery")
    documents = Document.objects.for_tenant(tenant).filter(knowledge_base=kb)
    assert sorted(documents.values_list("external_id", flat=True)) == ["a.txt", "d0", "d1", "d2", "sub/b.docx"]
    assert set(documents.values_list("status", flat=True)) == {DocumentStatus.INDEXED}
    assert documents.get(external_id="d1").title == "Title 1"

    again = io.StringIO()
    call_command("ingest", str(corpus), tenant=tenant.slug, kb="bakery", stdout=again)
    assert "Queued 0 document(s)" in again.getvalue() and "skipped 3 already there" in again.getvalue()
    assert documents.count() == 5
