"""The bulk document endpoint's answers, bounds and rate-limit charge, and create endpoints that refuse unknown fields.

Nothing here needs a worker (the on_commit that queues indexing never fires in a test transaction): what indexing does
with a bulk request is in test_bulk_indexing.py."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from retrieval.models import Document
from tests.retrieval.factories import kb_make

pytestmark = pytest.mark.django_db


def bulk(client, kb, documents: list, **kwargs) -> object:
    return client.post(f"/api/v1/knowledge-bases/{kb.pk}/documents/bulk/", {"documents": documents}, format="json")


def test_each_document_is_answered_on_its_own_and_one_bad_one_sinks_none(api_client, tenant):
    kb = kb_make(tenant)
    existing = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/", {"text": "Already here.", "external_id": "dup"}, format="json"
    )
    single_refusal = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/", {"text": "Again.", "external_id": "dup"}, format="json"
    )
    assert single_refusal.status_code == 409
    response = bulk(
        api_client,
        kb,
        [
            {"text": "Bees dance.", "external_id": "bees", "metadata": {"lang": "en"}},
            {"text": "A copy of an existing one.", "external_id": "dup"},
            {"title": "no text"},
            {"text": "Twice in one request.", "external_id": "twice"},
            {"text": "Twice in one request, the second.", "external_id": "twice"},
            {"text": "A misspelt field.", "metdata": {"lang": "en"}},
            {"chunks": [{"text": "word " * 300, "external_id": "long"}]},
            {"chunks": [{"text": "Short enough."}], "metadata": {"lang": "de"}},
        ],
    )
    assert response.status_code == 202, response.content
    body = response.json()
    statuses = [result["status"] for result in body["results"]]
    assert statuses == [202, 409, 400, 202, 409, 400, 400, 202]
    assert [result["index"] for result in body["results"]] == list(range(8))
    assert (body["created"], body["failed"]) == (3, 5)
    # A duplicate is refused as the single-document endpoint refuses it, naming the document that holds the id.
    assert body["results"][1]["error"]["message"] == single_refusal.json()["message"]
    assert body["results"][1]["error"]["extra"]["document_id"] == existing.json()["id"]
    assert "metdata" in body["results"][5]["error"]["extra"]["fields"]
    assert "300 word pieces" in body["results"][6]["error"]["message"]
    created = Document.objects.for_tenant(tenant).filter(knowledge_base=kb)
    assert sorted(created.values_list("external_id", flat=True), key=str) == sorted(
        ["dup", "bees", "twice", None], key=str
    )
    assert body["results"][0]["document"]["metadata"] == {"lang": "en"}
    assert created.get(external_id="bees").metadata == {"lang": "en"}


def test_a_jsonl_upload_is_one_document_a_line_and_a_bad_line_is_that_lines_error(api_client, tenant):
    kb = kb_make(tenant)
    lines = [
        json.dumps({"text": "Line one.", "external_id": "l1", "metadata": {"n": 1}}),
        "{not json",
        "",
        json.dumps({"text": "Line three.", "external_id": "l3"}),
    ]
    upload = SimpleUploadedFile("docs.jsonl", "\n".join(lines).encode(), content_type="application/jsonl")
    response = api_client.post(f"/api/v1/knowledge-bases/{kb.pk}/documents/bulk/", {"file": upload}, format="multipart")
    assert response.status_code == 202, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == [202, 400, 202]
    assert "Line 2 is not JSON" in results[1]["error"]["message"]
    assert Document.objects.for_tenant(tenant).get(external_id="l1").metadata == {"n": 1}


def test_a_request_past_the_bounds_is_refused_whole_naming_the_bound(api_client, tenant, settings):
    kb = kb_make(tenant)
    settings.BULK_DOCUMENTS_MAX = 3
    too_many = bulk(api_client, kb, [{"text": f"doc {i}"} for i in range(4)])
    assert too_many.status_code == 413
    assert "at most 3" in too_many.json()["message"] and "KB_BULK_DOCUMENTS_MAX" in too_many.json()["message"]
    settings.BULK_DOCUMENTS_MAX = 500
    settings.BULK_BODY_MAX_BYTES = 1000
    too_big = bulk(api_client, kb, [{"text": "x" * 2000}])
    assert too_big.status_code == 413 and "KB_BULK_BODY_MAX_BYTES" in too_big.json()["message"]
    upload = SimpleUploadedFile("docs.jsonl", (json.dumps({"text": "y" * 2000}) + "\n").encode())
    too_big_file = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/bulk/", {"file": upload}, format="multipart"
    )
    assert too_big_file.status_code == 413 and "at most 1000 bytes" in too_big_file.json()["message"]
    empty = bulk(api_client, kb, [])
    assert empty.status_code == 400
    assert not Document.objects.for_tenant(tenant).filter(knowledge_base=kb).exists()


def test_a_bulk_request_is_one_rate_limit_charge_whatever_its_size(api_client, tenant, settings, redis_available):
    kb = kb_make(tenant)
    settings.RATE_LIMIT_DEFAULT = "3/min"
    settings.RATE_LIMIT_BURST = 3
    for batch in range(3):
        response = bulk(api_client, kb, [{"text": f"doc {batch}-{i}"} for i in range(50)])
        assert response.status_code == 202, response.content
    assert bulk(api_client, kb, [{"text": "one more"}]).status_code == 429
    assert Document.objects.for_tenant(tenant).filter(knowledge_base=kb).count() == 150


def test_a_bulk_request_sends_one_indexing_task(api_client, tenant, monkeypatch, django_capture_on_commit_callbacks):
    from retrieval import tasks

    sent = []
    monkeypatch.setattr(tasks.documents_index_batch, "delay", lambda ids, tenant_id, **kw: sent.append(list(ids)))
    monkeypatch.setattr(tasks.document_index, "delay", lambda doc_id, tenant_id, **kw: sent.append([doc_id]))
    kb = kb_make(tenant)
    with django_capture_on_commit_callbacks(execute=True):
        response = bulk(api_client, kb, [{"text": f"doc {i}"} for i in range(300)] + [{"title": "bad"}])
    assert response.status_code == 202
    created = [r["document"]["id"] for r in response.json()["results"] if r["status"] == 202]
    assert len(created) == 300
    assert sent == [created]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/knowledge-bases/", {"name": "kb", "chunk_size": 100}),
        ("documents", {"text": "hello", "metdata": {"lang": "en"}}),
        ("documents", {"text": "hello", "external-id": "x"}),
    ],
)
def test_create_refuses_unknown_fields(api_client, tenant, path, body):
    kb = kb_make(tenant)
    url = f"/api/v1/knowledge-bases/{kb.pk}/documents/" if path == "documents" else path
    response = api_client.post(url, body, format="json")
    assert response.status_code == 400, response.content
    unknown = next(name for name in body if name not in ("name", "text"))
    assert "Unknown field" in response.json()["extra"]["fields"][unknown][0]
    assert Document.objects.for_tenant(tenant).count() == 0


def test_a_multipart_upload_refuses_unknown_fields_and_takes_metadata_as_a_json_string(api_client, tenant):
    kb = kb_make(tenant)
    url = f"/api/v1/knowledge-bases/{kb.pk}/documents/"
    refused = api_client.post(
        url, {"file": SimpleUploadedFile("a.txt", b"Some text."), "titel": "typo"}, format="multipart"
    )
    assert refused.status_code == 400 and "titel" in refused.json()["extra"]["fields"]
    bad_json = api_client.post(
        url, {"file": SimpleUploadedFile("a.txt", b"Some text."), "metadata": "{lang: en}"}, format="multipart"
    )
    assert bad_json.status_code == 400 and "metadata" in bad_json.json()["extra"]["fields"]
    stored = api_client.post(
        url,
        {"file": SimpleUploadedFile("a.txt", b"Some text."), "metadata": json.dumps({"lang": "en", "tags": ["x"]})},
        format="multipart",
    )
    assert stored.status_code == 202, stored.content
    assert stored.json()["metadata"] == {"lang": "en", "tags": ["x"]}
    assert Document.objects.for_tenant(tenant).get(pk=stored.json()["id"]).metadata == {"lang": "en", "tags": ["x"]}


@pytest.mark.parametrize(
    "metadata",
    [
        ["not", "an", "object"],
        {"bad key": "x"},
        {'k"]) or (1': "x"},
        {"deep": {"er": {"est": {"too": 1}}}},
        {"big": "x" * 5000},
        {f"k{i}": i for i in range(65)},
        {"n": 2**70},
    ],
)
def test_metadata_out_of_bounds_is_a_400_naming_what_is_wrong(api_client, tenant, metadata):
    kb = kb_make(tenant)
    response = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/", {"text": "hello", "metadata": metadata}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["extra"]["fields"]["metadata"]
    assert Document.objects.for_tenant(tenant).count() == 0


def test_an_oversize_chunk_is_refused_at_upload_naming_the_knowledge_bases_chunk_size(api_client, tenant):
    kb = kb_make(tenant, chunk_max_tokens=200)
    response = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/",
        {"chunks": [{"text": "fine"}, {"text": "word " * 262, "external_id": "abc"}]},
        format="json",
    )
    assert response.status_code == 400, response.content
    message = response.json()["message"]
    assert message.startswith("Chunk 1 (abc) has 262 word pieces of the embedding model")
    assert "at most 200 word pieces (its chunk_max_tokens" in message and "256" in message
    assert response.json()["extra"]["code"] == "chunk_refused"
    assert not Document.objects.for_tenant(tenant).exists()
    accepted = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/",
        {"chunks": [{"text": "word " * 262, "external_id": "abc"}], "split_oversize_chunks": True},
        format="json",
    )
    assert accepted.status_code == 202 and accepted.json()["split_oversize_chunks"] is True
