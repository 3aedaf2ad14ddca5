"""The ingestion API without a worker: validation, scoping (tenant and KB-limited keys) and enqueueing."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from retrieval.models import Document, DocumentStatus
from tests.retrieval.factories import kb_limited_client, kb_make

pytestmark = pytest.mark.django_db


def _document_url(kb):
    return f"/api/v1/knowledge-bases/{kb.pk}/documents/"


def test_create_and_list_knowledge_bases(api_client, tenant, other_tenant):
    kb_make(other_tenant, name="theirs")
    response = api_client.post("/api/v1/knowledge-bases/", {"name": "manuals", "chunk_max_tokens": 128}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["chunk_max_tokens"] == 128
    assert response.json()["embedding_model"] == "all-MiniLM-L6-v2"
    listed = api_client.get("/api/v1/knowledge-bases/").json()
    assert [kb["name"] for kb in listed] == ["manuals"]


def test_duplicate_name_is_409(api_client, tenant):
    kb_make(tenant, name="manuals")
    response = api_client.post("/api/v1/knowledge-bases/", {"name": "manuals"}, format="json")
    assert response.status_code == 409
    assert "already exists" in response.json()["message"]


def test_creating_a_knowledge_base_needs_an_admin_key(standard_api_client):
    response = standard_api_client.post("/api/v1/knowledge-bases/", {"name": "x"}, format="json")
    assert response.status_code == 403
    assert standard_api_client.get("/api/v1/knowledge-bases/").status_code == 200


def test_chunk_size_above_the_model_limit_is_400(api_client):
    response = api_client.post("/api/v1/knowledge-bases/", {"name": "x", "chunk_max_tokens": 512}, format="json")
    assert response.status_code == 400
    assert "chunk_max_tokens" in response.json()["extra"]["fields"]


def test_text_document_is_accepted_and_queued_on_commit(api_client, tenant, django_capture_on_commit_callbacks):
    kb = kb_make(tenant)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = api_client.post(
            _document_url(kb), {"title": "Guide", "text": "Some text.", "external_id": "g-1"}, format="json"
        )
    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["external_id"] == "g-1" and body["progress"] == 0.0
    assert len(callbacks) == 1
    assert api_client.get(f"/api/v1/documents/{body['id']}/").json()["status"] == "queued"


def test_prechunked_document_is_stored_as_sent(api_client, tenant):
    kb = kb_make(tenant)
    chunks = [{"text": "first passage", "external_id": "p1"}, {"text": "second passage"}]
    response = api_client.post(_document_url(kb), {"title": "Pre", "chunks": chunks}, format="json")
    assert response.status_code == 202
    document = Document.objects.for_tenant(tenant).get(pk=response.json()["id"])
    assert document.source_kind == "chunks"
    assert document.source_chunks == [
        {"text": "first passage", "external_id": "p1"},
        {"text": "second passage", "external_id": None},
    ]


def test_file_upload_keeps_name_and_hash(api_client, tenant):
    kb = kb_make(tenant)
    upload = SimpleUploadedFile("notes.md", b"# Notes\n\nBody text.", content_type="text/markdown")
    response = api_client.post(_document_url(kb), {"file": upload}, format="multipart")
    assert response.status_code == 202, response.json()
    assert response.json()["title"] == "notes.md"
    assert response.json()["source_filename"] == "notes.md"
    assert len(response.json()["content_hash"]) == 64


def test_an_upload_whose_row_is_rolled_back_leaves_no_file_behind(api_client, tenant, settings, monkeypatch):
    from django.db import IntegrityError

    from retrieval.services import documents

    def lost_race(**kwargs):  # another request took the external id between the check and the insert
        raise IntegrityError("duplicate key value violates unique constraint")

    monkeypatch.setattr(documents, "documents_enqueue", lost_race)
    kb = kb_make(tenant)
    uploads = settings.MEDIA_ROOT / "documents"
    before = set(uploads.rglob("*")) if uploads.exists() else set()
    upload = SimpleUploadedFile("orphan.md", b"# Orphan\n\nBody.", content_type="text/markdown")
    response = api_client.post(_document_url(kb), {"file": upload, "external_id": "x1"}, format="multipart")
    assert response.status_code == 409 and "send it again" in response.json()["message"]
    assert not Document.objects.for_tenant(tenant).exists()
    after = set(uploads.rglob("*")) if uploads.exists() else set()
    assert not [path for path in after - before if path.is_file()]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"title": "nothing"}, 'exactly one of "file"'),
        ({"text": "a", "chunks": [{"text": "b"}]}, "Got: text, chunks"),
        ({"text": "   "}, "The text is empty."),
        ({"chunks": []}, "chunks"),
        ({"chunks": [{"text": "  "}]}, "A chunk needs some text."),
        ({"chunks": [{"external_id": "x"}]}, "text"),
    ],
)
def test_bad_document_payloads_are_400_with_the_reason(api_client, tenant, payload, fragment):
    response = api_client.post(_document_url(kb_make(tenant)), payload, format="json")
    assert response.status_code == 400
    assert fragment in str(response.json())
    assert not Document.objects.for_tenant(tenant).exists()


def test_duplicate_external_id_is_409_naming_the_existing_document(api_client, tenant):
    kb = kb_make(tenant)
    first = api_client.post(_document_url(kb), {"text": "a", "external_id": "same"}, format="json").json()
    response = api_client.post(_document_url(kb), {"text": "b", "external_id": "same"}, format="json")
    assert response.status_code == 409
    assert response.json()["extra"]["document_id"] == first["id"]
    # What to do about it: there is no update, so replacing the document means deleting the one there first.
    assert f"Delete document {first['id']} first to replace it" in response.json()["message"]


def test_oversize_file_ends_failed_with_its_size_and_is_not_stored(api_client, tenant, settings):
    settings.MAX_UPLOAD_BYTES = 1024
    kb = kb_make(tenant)
    upload = SimpleUploadedFile("big.txt", b"word " * 1000, content_type="text/plain")
    response = api_client.post(_document_url(kb), {"file": upload}, format="multipart")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "failed"
    assert "the limit is 1024 bytes" in body["error_message"]
    assert not Document.objects.for_tenant(tenant).get(pk=body["id"]).source_file


def test_an_upload_over_the_limit_is_not_written_to_disk_on_its_way_in(api_client, tenant, settings, monkeypatch):
    """Django spools every upload whole to a temporary file before the view sees it: a tenant's 5 GB upload took 5 GB
    of the web's disk (in a proxy-less deployment) only to be recorded as too large. Past the limit, the rest of the
    file is now counted and dropped."""
    from django.core.files.uploadhandler import TemporaryFileUploadHandler

    settings.MAX_UPLOAD_BYTES = 100_000
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 0  # every upload goes through a temporary file, as large ones do
    spooled = []
    spool = TemporaryFileUploadHandler.receive_data_chunk

    def counted(self, raw_data, start):
        spooled.append(len(raw_data))
        return spool(self, raw_data, start)

    monkeypatch.setattr(TemporaryFileUploadHandler, "receive_data_chunk", counted)
    kb = kb_make(tenant)
    upload = SimpleUploadedFile("huge.txt", b"word " * 400_000, content_type="text/plain")  # 2,000,000 bytes
    response = api_client.post(_document_url(kb), {"file": upload}, format="multipart")

    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["status"] == "failed" and body["size_bytes"] == 2_000_000
    assert "The file is 1.9 MB; the limit is 100000 bytes." in body["error_message"]
    assert sum(spooled) <= settings.MAX_UPLOAD_BYTES, sum(spooled)
    # Just under the limit, a file arrives whole and is stored.
    upload = SimpleUploadedFile("fits.txt", b"w" * 100_000, content_type="text/plain")
    response = api_client.post(_document_url(kb), {"file": upload}, format="multipart")
    assert response.json()["status"] == "queued" and response.json()["size_bytes"] == 100_000
    assert Document.objects.for_tenant(tenant).get(pk=response.json()["id"]).source_file.size == 100_000


def test_reindex_of_a_running_document_is_409(api_client, tenant):
    from django.utils import timezone

    kb = kb_make(tenant)
    doc_id = api_client.post(_document_url(kb), {"text": "a"}, format="json").json()["id"]
    Document.objects.for_tenant(tenant).filter(pk=doc_id).update(
        status=DocumentStatus.EMBEDDING, lease_expires_at=timezone.now() + timezone.timedelta(minutes=5)
    )
    response = api_client.post(f"/api/v1/documents/{doc_id}/reindex/")
    assert response.status_code == 409


def test_search_validates_its_input(api_client, tenant):
    kb = kb_make(tenant)
    url = f"/api/v1/knowledge-bases/{kb.pk}/search/"
    assert api_client.post(url, {"query": ""}, format="json").status_code == 400
    assert api_client.post(url, {"query": "x", "limit": 0}, format="json").status_code == 400
    assert api_client.post(url, {"query": "x", "limit": 101}, format="json").status_code == 400


# --- another tenant's ids, and a key limited to one knowledge base: always 404 -----------------------------


def _endpoints(kb_id: int, doc_id: int):
    return [
        ("get", f"/api/v1/knowledge-bases/{kb_id}/documents/", None),
        ("post", f"/api/v1/knowledge-bases/{kb_id}/documents/", {"text": "x"}),
        ("post", f"/api/v1/knowledge-bases/{kb_id}/search/", {"query": "x"}),
        ("post", f"/api/v1/knowledge-bases/{kb_id}/reindex/", None),
        ("get", f"/api/v1/documents/{doc_id}/", None),
        ("delete", f"/api/v1/documents/{doc_id}/", None),
        ("post", f"/api/v1/documents/{doc_id}/reindex/", None),
    ]


def test_every_endpoint_is_404_for_another_tenants_ids(api_client, other_api_client, tenant):
    kb = kb_make(tenant)
    doc_id = api_client.post(_document_url(kb), {"text": "private"}, format="json").json()["id"]
    for method, url, payload in _endpoints(kb.pk, doc_id):
        response = getattr(other_api_client, method)(url, payload, format="json")
        assert response.status_code == 404, (method, url, response.status_code)
        assert response.json()["message"]
    assert other_api_client.get("/api/v1/knowledge-bases/").json() == []
    assert Document.objects.for_tenant(tenant).get(pk=doc_id).status == DocumentStatus.QUEUED


def test_a_key_limited_to_one_knowledge_base_reaches_no_other(api_client, tenant):
    allowed, other = kb_make(tenant, name="allowed"), kb_make(tenant, name="other")
    other_doc = api_client.post(_document_url(other), {"text": "x"}, format="json").json()["id"]
    allowed_doc = api_client.post(_document_url(allowed), {"text": "y"}, format="json").json()["id"]
    limited = kb_limited_client(tenant, allowed)
    for method, url, payload in _endpoints(other.pk, other_doc):
        response = getattr(limited, method)(url, payload, format="json")
        assert response.status_code == 404, (method, url, response.status_code)
    assert [kb["name"] for kb in limited.get("/api/v1/knowledge-bases/").json()] == ["allowed"]
    assert limited.get(f"/api/v1/documents/{allowed_doc}/").status_code == 200
    assert limited.post(_document_url(allowed), {"text": "z"}, format="json").status_code == 202
    assert limited.post("/api/v1/knowledge-bases/", {"name": "new"}, format="json").status_code == 403


def test_a_create_that_loses_a_race_for_the_name_is_409_and_another_integrity_error_is_not_called_a_name_taken(
    tenant, monkeypatch
):
    """The service answered every IntegrityError with "already exists": a NOT NULL column the database refused (the
    upgrade rehearsal met one, old code against a new schema) was shown as a name collision. Only a name that exists
    after the failure is one."""
    from django.db import IntegrityError

    from kbplatform.errors import ConflictError
    from retrieval.models import KnowledgeBase
    from retrieval.services import knowledge_base_create

    real_full_clean = KnowledgeBase.full_clean

    def raced(self, *args, **kwargs):
        # Another request creates the same name between the service's check and its insert (outside its savepoint).
        real_full_clean(self, *args, **kwargs)
        KnowledgeBase.objects.bulk_create([KnowledgeBase(tenant=self.tenant, name=self.name)])

    monkeypatch.setattr(KnowledgeBase, "full_clean", raced)
    with pytest.raises(ConflictError, match="already exists"):
        knowledge_base_create(tenant=tenant, name="raced")

    def refused(self, *args, **kwargs):
        raise IntegrityError('null value in column "reindex_from_model_identity" violates not-null constraint')

    monkeypatch.setattr(KnowledgeBase, "full_clean", real_full_clean)
    monkeypatch.setattr(KnowledgeBase, "save", refused)
    with pytest.raises(IntegrityError, match="not-null"):
        knowledge_base_create(tenant=tenant, name="fresh")
