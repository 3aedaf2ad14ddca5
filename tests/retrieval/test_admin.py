"""The ingestion admin: upload into a knowledge base, status and progress, retry, read-only chunks, scoping."""

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from retrieval import embeddings
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, ReindexStatus
from tenants.services import tenant_admin_user_ensure
from tests.retrieval.factories import kb_make

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_of_tenant(tenant) -> Client:
    user = tenant_admin_user_ensure(tenant=tenant, email="admin@acme.test", password="pw-123456789")
    client = Client()
    client.force_login(user)
    return client


def test_upload_page_creates_a_queued_document(admin_client_of_tenant, tenant, other_tenant):
    kb = kb_make(tenant)
    kb_make(other_tenant, name="theirs")
    page = admin_client_of_tenant.get("/admin/retrieval/document/add/")
    assert page.status_code == 200
    assert b'name="upload"' in page.content
    assert b"theirs" not in page.content  # the other tenant's knowledge base is not offered
    response = admin_client_of_tenant.post(
        "/admin/retrieval/document/add/",
        {
            "knowledge_base": kb.pk,
            "title": "Handbook",
            "external_id": "hb",
            "upload": SimpleUploadedFile("handbook.md", b"# Handbook\n\nRules."),
            "text": "",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    document = Document.objects.for_tenant(tenant).get(external_id="hb")
    assert document.status == DocumentStatus.QUEUED and document.source_filename == "handbook.md"
    listing = admin_client_of_tenant.get("/admin/retrieval/document/")
    assert b"<progress" in listing.content and b"Handbook" in listing.content


def test_a_file_uploaded_without_a_title_takes_its_name(admin_client_of_tenant, tenant):
    kb = kb_make(tenant)
    response = admin_client_of_tenant.post(
        "/admin/retrieval/document/add/",
        {"knowledge_base": kb.pk, "title": "", "upload": SimpleUploadedFile("faq.md", b"# FAQ"), "text": ""},
    )
    assert response.status_code == 302, response.content[:2000]
    assert Document.objects.for_tenant(tenant).get().title


def test_a_file_over_the_limit_uploaded_in_the_admin_is_recorded_failed_with_both_sizes(
    admin_client_of_tenant, tenant, settings
):
    settings.MAX_UPLOAD_BYTES = 100_000
    kb = kb_make(tenant)
    response = admin_client_of_tenant.post(
        "/admin/retrieval/document/add/",
        {"knowledge_base": kb.pk, "upload": SimpleUploadedFile("scan.txt", b"w" * 300_000), "text": ""},
        follow=True,
    )
    assert response.status_code == 200
    document = Document.objects.for_tenant(tenant).get()
    assert (document.status, document.size_bytes, bool(document.source_file)) == (DocumentStatus.FAILED, 300_000, False)
    assert "the limit is 100000 bytes" in document.error_message
    assert b"the limit is 100000 bytes" in response.content


def test_an_upload_the_service_refuses_after_the_form_checks_is_a_message_not_a_500(
    admin_client_of_tenant, tenant, monkeypatch
):
    """Two uploads with one external id at once: the form's check passes for both, the service refuses the second."""
    from django.contrib.admin.models import LogEntry
    from django.contrib.messages import get_messages

    from kbplatform.errors import ConflictError
    from retrieval import services

    kb = kb_make(tenant)

    def taken(**kwargs):
        raise ConflictError("A document with external id 'hb' is already in this knowledge base.")

    monkeypatch.setattr(services, "document_create", taken)
    response = admin_client_of_tenant.post(
        "/admin/retrieval/document/add/",
        {"knowledge_base": kb.pk, "title": "Handbook", "external_id": "hb", "text": "Rules.", "upload": ""},
    )
    assert response.status_code == 302 and response.url.endswith("/admin/retrieval/document/add/")
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("Not uploaded" in m and "already in this knowledge base" in m for m in shown), shown
    assert not Document.objects.for_tenant(tenant).exists()
    assert not LogEntry.objects.exists()


def test_upload_needs_exactly_one_of_file_or_text(admin_client_of_tenant, tenant):
    kb = kb_make(tenant)
    response = admin_client_of_tenant.post(
        "/admin/retrieval/document/add/", {"knowledge_base": kb.pk, "title": "x", "text": ""}
    )
    assert response.status_code == 200
    assert b"Choose a file or paste text" in response.content
    assert not Document.objects.for_tenant(tenant).exists()


def test_retry_action_requeues_failed_documents(admin_client_of_tenant, tenant):
    kb = kb_make(tenant)
    document = Document.objects.create(
        tenant=tenant,
        knowledge_base=kb,
        title="t",
        source_text="text",
        status=DocumentStatus.FAILED,
        error_message="boom",
        attempts=3,
    )
    response = admin_client_of_tenant.post(
        "/admin/retrieval/document/", {"action": "retry_documents", "_selected_action": [document.pk]}
    )
    assert response.status_code == 302
    document.refresh_from_db()
    assert (document.status, document.error_message, document.attempts) == (DocumentStatus.QUEUED, "", 0)


def test_chunks_are_browsable_but_read_only(admin_client_of_tenant, tenant):
    kb = kb_make(tenant)
    document = Document.objects.create(tenant=tenant, knowledge_base=kb, title="t", source_text="x")
    chunk = Chunk.objects.create(
        tenant=tenant, document=document, knowledge_base=kb, position=0, text="a passage", content_hash="h"
    )
    listing = admin_client_of_tenant.get(f"/admin/retrieval/chunk/?document__id__exact={document.pk}")
    assert listing.status_code == 200 and b"a passage" in listing.content
    detail = admin_client_of_tenant.get(f"/admin/retrieval/chunk/{chunk.pk}/change/")
    assert detail.status_code == 200 and b'name="_save"' not in detail.content
    assert admin_client_of_tenant.get("/admin/retrieval/chunk/add/").status_code == 403


def test_other_tenants_documents_are_invisible(admin_client_of_tenant, other_tenant):
    kb = kb_make(other_tenant, name="theirs")
    document = Document.objects.create(tenant=other_tenant, knowledge_base=kb, title="secret-title", source_text="x")
    assert b"secret-title" not in admin_client_of_tenant.get("/admin/retrieval/document/").content
    assert admin_client_of_tenant.get(f"/admin/retrieval/document/{document.pk}/change/").status_code in (302, 404)


def test_superuser_sees_the_knowledge_base_reindex_action(tenant):
    kb_make(tenant)
    user = get_user_model().objects.create_superuser("root", "root@x.test", "pw-123456789")
    client = Client()
    client.force_login(user)
    response = client.get("/admin/retrieval/knowledgebase/")
    assert response.status_code == 200 and b"reindex_knowledge_bases" in response.content


def test_the_knowledge_base_list_shows_which_need_a_reindex_and_filters_them(
    admin_client_of_tenant, tenant, other_tenant
):
    stale = kb_make(tenant, name="stale-kb")
    kb_make(tenant, name="fresh-kb")
    theirs = kb_make(other_tenant, name="their-stale-kb")
    for knowledge_base in (stale, theirs):
        KnowledgeBase.objects.for_tenant(knowledge_base.tenant).filter(pk=knowledge_base.pk).update(
            embedding_model="e5-small", embedding_model_identity="e5-small@0123456789abcdef"
        )
        document = Document.objects.create(tenant=knowledge_base.tenant, knowledge_base=knowledge_base, title="d")
        Chunk.objects.create(
            tenant=knowledge_base.tenant,
            document=document,
            knowledge_base=knowledge_base,
            position=0,
            text="x",
            content_hash="h",
        )

    listing = admin_client_of_tenant.get("/admin/retrieval/knowledgebase/").content.decode()
    assert "searches refused until re-indexed" in listing and "e5-small@0123456789abcdef" in listing
    assert "fresh-kb" in listing and "their-stale-kb" not in listing
    filtered = admin_client_of_tenant.get("/admin/retrieval/knowledgebase/?search_index=awaiting_reindex")
    assert filtered.status_code == 200
    page = filtered.content.decode()
    assert "stale-kb" in page and "fresh-kb" not in page and "their-stale-kb" not in page
    detail = admin_client_of_tenant.get(f"/admin/retrieval/knowledgebase/{stale.pk}/change/").content.decode()
    assert "searches refused until re-indexed" in detail


def test_the_knowledge_base_list_says_when_the_embedding_model_cannot_be_read(
    admin_client_of_tenant, tenant, settings, tmp_path
):
    """A mistyped EMBEDDING_MODEL_PATH (or a volume not mounted) must not take the admin's list down with it: the
    column says the model cannot be read, which is what the operator has to fix first."""
    kb_make(tenant, name="some-kb")
    settings.EMBEDDING_MODEL_PATH = str(tmp_path / "not-mounted")
    for url in ("/admin/retrieval/knowledgebase/", "/admin/retrieval/knowledgebase/?search_index=awaiting_reindex"):
        response = admin_client_of_tenant.get(url)
        assert response.status_code == 200, url
        assert "embedding model cannot be read" in response.content.decode(), url


def test_an_empty_knowledge_base_of_another_model_is_not_shown_as_refusing_searches(admin_client_of_tenant, tenant):
    """Its searches are not refused (it has no vector to rank: no results) and its first document moves it onto the
    workers' model, so neither the filter nor /api/health/ counts it; the column used to call it refused anyway."""
    empty = kb_make(tenant, name="empty-kb")
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=empty.pk).update(
        embedding_model="e5-small", embedding_model_identity="e5-small@0123456789abcdef"
    )
    listing = admin_client_of_tenant.get("/admin/retrieval/knowledgebase/").content.decode()
    assert "empty-kb" in listing
    assert "searches refused" not in listing
    assert "holds no chunk" in listing
    detail = admin_client_of_tenant.get(f"/admin/retrieval/knowledgebase/{empty.pk}/change/").content.decode()
    assert "searches refused" not in detail and "holds no chunk" in detail


def test_a_failed_model_change_is_shown_refused_and_a_failed_rebuild_current(admin_client_of_tenant, tenant):
    identity = embeddings.model_identity()
    for name, moved_from in (("failed-move-kb", "e5-small@0123456789abcdef"), ("failed-rebuild-kb", "")):
        knowledge_base = kb_make(tenant, name=name)
        KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base.pk).update(
            embedding_model_identity=identity, reindex_status="failed", reindex_from_model_identity=moved_from
        )
        document = Document.objects.create(tenant=tenant, knowledge_base=knowledge_base, title="d")
        Chunk.objects.create(
            tenant=tenant, document=document, knowledge_base=knowledge_base, position=0, text="x", content_hash="h"
        )

    listing = admin_client_of_tenant.get("/admin/retrieval/knowledgebase/").content.decode()
    assert "failed part way: searches refused until run again" in listing
    assert "vectors of e5-small@0123456789abcdef left" in listing
    filtered = admin_client_of_tenant.get("/admin/retrieval/knowledgebase/?search_index=awaiting_reindex")
    page = filtered.content.decode()
    assert "failed-move-kb" in page and "failed-rebuild-kb" not in page


def test_a_knowledge_base_is_added_with_an_offered_model_which_then_only_a_reindex_changes(
    admin_client_of_tenant, tenant
):
    page = admin_client_of_tenant.get("/admin/retrieval/knowledgebase/add/")
    assert page.status_code == 200
    for model in embeddings.offered_models():
        assert f'value="{model}"'.encode() in page.content
    response = admin_client_of_tenant.post(
        "/admin/retrieval/knowledgebase/add/",
        {
            "tenant": tenant.pk,
            "name": "帮助中心",
            "description": "",
            "embedding_model": embeddings.USE_MODEL_NAME,
            "chunk_max_tokens": 200,
            "chunk_overlap_tokens": 32,
            "retrieval_mode": "hybrid",
            "text_analyzer": "chinese",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    made = KnowledgeBase.objects.for_tenant(tenant).get(name="帮助中心")
    assert (made.embedding_model, made.embedding_dimension) == (embeddings.USE_MODEL_NAME, 512)
    refused = admin_client_of_tenant.post(
        "/admin/retrieval/knowledgebase/add/",
        {
            "tenant": tenant.pk,
            "name": "x",
            "embedding_model": "bge-m3",
            "chunk_max_tokens": 200,
            "chunk_overlap_tokens": 32,
            "retrieval_mode": "hybrid",
            "text_analyzer": "english",
        },
    )
    assert refused.status_code == 200 and not KnowledgeBase.objects.for_tenant(tenant).filter(name="x").exists()
    change = admin_client_of_tenant.get(f"/admin/retrieval/knowledgebase/{made.pk}/change/")
    assert b'name="embedding_model"' not in change.content  # read-only once made
    actions = admin_client_of_tenant.get("/admin/retrieval/knowledgebase/")
    assert f"reindex_onto_{embeddings.USE_MODEL_NAME}".encode() in actions.content


def test_an_admin_action_moves_a_knowledge_bases_bm25_text_to_another_analyser(admin_client_of_tenant, tenant):
    """A knowledge base made with `english` before the language analysers moves to its language from the admin, as
    the API's re-index does: its analyser is set and its re-index queued; the others selected are not touched."""
    moved, other = kb_make(tenant, name="ayuda"), kb_make(tenant, name="help")
    listed = admin_client_of_tenant.get("/admin/retrieval/knowledgebase/")
    assert b'value="reindex_text_as"' in listed.content and b"text analyzer" in listed.content.lower()
    chosen = {"action": "reindex_text_as", "_selected_action": [moved.pk]}
    # The action asks which analyser first, on a page naming the knowledge bases it moves; nothing moves yet.
    asked = admin_client_of_tenant.post("/admin/retrieval/knowledgebase/", chosen)
    assert asked.status_code == 200 and b"ayuda" in asked.content and b"help</td>" not in asked.content
    assert b'<option value="spanish">' in asked.content and b'<option value="serbian">' in asked.content
    moved.refresh_from_db()
    assert (moved.text_analyzer, moved.reindex_status) == ("english", ReindexStatus.IDLE)
    # An analyser that is not offered is asked again, with the reason.
    refused = admin_client_of_tenant.post(
        "/admin/retrieval/knowledgebase/", {**chosen, "apply": "1", "text_analyzer": "klingon"}
    )
    assert refused.status_code == 200 and b"Select a valid choice" in refused.content
    response = admin_client_of_tenant.post(
        "/admin/retrieval/knowledgebase/", {**chosen, "apply": "1", "text_analyzer": "spanish"}
    )
    assert response.status_code == 302
    moved.refresh_from_db()
    other.refresh_from_db()
    assert (moved.text_analyzer, moved.reindex_status) == ("spanish", ReindexStatus.RUNNING)
    assert (other.text_analyzer, other.reindex_status) == ("english", ReindexStatus.IDLE)
