"""Deleting a knowledge base takes everything held for it (rows, chunk and question vectors in Milvus, stored files,
hot copies in Redis) and nothing of another; with Milvus down nothing is deleted. Through the service, the REST API
and the admin (real PostgreSQL under CI, Redis and `milvus-lite server`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from conversations.models import Conversation, DedupEvent, Turn
from conversations.services import conversation_create, dedup_policy_update, turn_ask
from conversations.turn.state import state_key
from kbplatform.errors import ConflictError
from kbplatform.redis_client import redis_connection
from lifecycle.services import knowledge_base_delete
from retrieval import milvus, question_index, vectorstore
from retrieval.embeddings import embed_query, model_id
from retrieval.models import Chunk, Document, KnowledgeBase, ReindexStatus
from retrieval.services import document_create
from tenants.models import ApiKey, Role
from tenants.scopes import SCOPE_ORDER, Scope
from tenants.services import api_key_create
from tests.admin_ui.conftest import user_with_role
from tests.conftest import _client_for
from tests.conversations.helpers import indexed_kb

pytestmark = pytest.mark.django_db

QUESTION = "How do I reset my password?"


@pytest.fixture
def services(redis_available, milvus_server):
    return milvus_server


def _chunk_vectors(kb: KnowledgeBase) -> list:
    return vectorstore.vectors_search(
        tenant_id=kb.tenant_id,
        knowledge_base_id=kb.pk,
        query_vector=embed_query(QUESTION),
        limit=50,
        dimension=kb.embedding_dimension,
        group_by_document=False,
    )


def _question_vectors(kb: KnowledgeBase) -> list:
    name = question_index.question_collection_ensure(model=model_id(), dimension=kb.embedding_dimension)
    expression = question_index.question_filter_build(tenant_id=kb.tenant_id, knowledge_base_id=kb.pk)
    return milvus.connect().query(collection_name=name, filter=expression, output_fields=["turn_id"])


def _populated(tenant, name: str) -> tuple[KnowledgeBase, Document, Conversation]:
    """A knowledge base with indexed chunks, a stored file, and a conversation whose question is in the tenant-wide
    question index and whose hot copy is in Redis."""
    kb = indexed_kb(tenant, name=name)
    upload = document_create(
        tenant=tenant, knowledge_base=kb, file=SimpleUploadedFile("notes.txt", b"Some notes.", "text/plain")
    )
    conversation = conversation_create(tenant=tenant, knowledge_base_id=kb.pk, user_id="u1")
    turn_ask(tenant=tenant, conversation_id=conversation.pk, question=QUESTION)
    return kb, upload, conversation


def test_deleting_a_knowledge_base_takes_everything_of_it_and_nothing_else(
    services, tenant, other_tenant, django_capture_on_commit_callbacks
):
    dedup_policy_update(tenant=tenant, scope="tenant")
    dedup_policy_update(tenant=other_tenant, scope="tenant")
    kb, upload, conversation = _populated(tenant, "doomed")
    kept_kb, kept_upload, kept_conversation = _populated(tenant, "kept")
    foreign_kb, _, _ = _populated(other_tenant, "foreign")
    bound_key, _ = api_key_create(tenant=tenant, name="bound", scopes=[Scope.CHAT, Scope.INGEST], knowledge_base=kb)
    file_name = upload.source_file.name
    hot = state_key(tenant_id=tenant.pk, conversation_id=conversation.pk)
    events = list(DedupEvent.objects.for_tenant(tenant).filter(conversation=conversation).values_list("pk", flat=True))
    assert default_storage.exists(file_name) and redis_connection().exists(hot)
    assert _chunk_vectors(kb) and _question_vectors(kb) and events

    with django_capture_on_commit_callbacks(execute=True):  # the files go once the rows are gone for good
        counts = knowledge_base_delete(tenant=tenant, knowledge_base=kb)

    assert counts == {"documents": 9, "chunks": 8, "conversations": 1}
    assert not KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).exists()
    assert not Document.objects.for_tenant(tenant).filter(knowledge_base_id=kb.pk).exists()
    assert not Chunk.objects.for_tenant(tenant).filter(knowledge_base_id=kb.pk).exists()
    assert not Conversation.objects.for_tenant(tenant).filter(pk=conversation.pk).exists()
    assert not Turn.objects.for_tenant(tenant).filter(conversation_id=conversation.pk).exists()
    assert not ApiKey.objects.for_tenant(tenant).filter(pk=bound_key.pk).exists()
    assert _chunk_vectors(kb) == [] and _question_vectors(kb) == []
    assert not default_storage.exists(file_name)
    assert not redis_connection().exists(hot)
    # The audit log stays, as for an expired conversation.
    assert sorted(DedupEvent.objects.for_tenant(tenant).filter(pk__in=events).values_list("pk", flat=True)) == events
    # The tenant's other knowledge base and the other tenant's are untouched.
    for other in (kept_kb, foreign_kb):
        assert KnowledgeBase.objects.unscoped().filter(pk=other.pk).exists()
        assert _chunk_vectors(other) and _question_vectors(other)
    assert default_storage.exists(kept_upload.source_file.name)
    assert redis_connection().exists(state_key(tenant_id=tenant.pk, conversation_id=kept_conversation.pk))


def test_with_milvus_down_nothing_is_deleted_and_the_api_says_503(services, tenant, monkeypatch):
    kb, upload, conversation = _populated(tenant, "kept")
    api = _client_for(tenant)

    def down(**kwargs):
        raise vectorstore.VectorStoreUnavailable("Milvus is down")

    monkeypatch.setattr(vectorstore, "vectors_delete", down)
    response = api.delete(f"/api/v1/knowledge-bases/{kb.pk}/")
    assert response.status_code == 503
    assert "the knowledge base was kept" in response.json()["message"] and response["Retry-After"]
    assert KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).exists()
    assert Conversation.objects.for_tenant(tenant).filter(pk=conversation.pk).exists()
    assert default_storage.exists(upload.source_file.name) and _chunk_vectors(kb)


def test_a_knowledge_base_being_reindexed_is_not_deleted(services, tenant):
    kb = indexed_kb(tenant, name="busy")
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(
        reindex_status=ReindexStatus.RUNNING, reindex_lease_expires_at=timezone.now() + timedelta(minutes=5)
    )
    with pytest.raises(ConflictError):
        knowledge_base_delete(tenant=tenant, knowledge_base=KnowledgeBase.objects.for_tenant(tenant).get(pk=kb.pk))
    assert _chunk_vectors(kb)
    assert _client_for(tenant).delete(f"/api/v1/knowledge-bases/{kb.pk}/").status_code == 409


def test_only_an_admin_key_of_the_whole_tenant_deletes_a_knowledge_base(services, tenant, other_tenant):
    kb = indexed_kb(tenant, name="guarded")
    url = f"/api/v1/knowledge-bases/{kb.pk}/"
    _, bound_raw = api_key_create(tenant=tenant, name="bound admin", scopes=SCOPE_ORDER, knowledge_base=kb)
    bound = _client_for(tenant)
    bound.credentials(HTTP_AUTHORIZATION=f"Api-Key {bound_raw}")
    assert bound.get(url).json()["id"] == kb.pk  # it may read the knowledge base it is limited to
    response = bound.delete(url)
    assert response.status_code == 403 and "cannot delete it" in response.json()["message"]
    assert _client_for(tenant, [Scope.CHAT, Scope.INGEST]).delete(url).status_code == 403
    assert _client_for(other_tenant).delete(url).status_code == 404
    assert KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).exists()
    assert _client_for(tenant).delete(url).status_code == 204
    assert _client_for(tenant).get(url).status_code == 404


def test_the_admin_deletes_a_knowledge_base_through_the_service_and_says_what_went(
    services, client, tenant, django_capture_on_commit_callbacks
):
    kb, upload, _ = _populated(tenant, "admin-doomed")
    admin_user = user_with_role(tenant, Role.ADMIN, "kb-admin@example.com")
    client.force_login(admin_user)
    url = reverse("admin:retrieval_knowledgebase_delete", args=[kb.pk])

    page = client.get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert "9 documents, 8 chunks and their vectors and files, 1 conversations" in text
    assert "Cannot delete" not in text

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"post": "yes"})
    assert response.status_code == 302
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("was deleted successfully" in m for m in shown), shown
    assert not KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).exists()
    assert _chunk_vectors(kb) == [] and not default_storage.exists(upload.source_file.name)
    assert LogEntry.objects.filter(object_id=str(kb.pk), action_flag=3).count() == 1


def test_the_admin_keeps_a_knowledge_base_milvus_cannot_clear_and_does_not_say_deleted(
    services, client, tenant, monkeypatch
):
    kb = indexed_kb(tenant, name="admin-kept")
    client.force_login(user_with_role(tenant, Role.ADMIN, "kb-admin2@example.com"))

    def down(**kwargs):
        raise vectorstore.VectorStoreUnavailable("Milvus is down")

    monkeypatch.setattr(vectorstore, "vectors_delete", down)
    response = client.post(reverse("admin:retrieval_knowledgebase_delete", args=[kb.pk]), {"post": "yes"})
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("the knowledge base was kept" in m for m in shown), shown
    assert not any("deleted" in m and "kept" not in m for m in shown), shown
    assert KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).exists()
    assert not LogEntry.objects.filter(object_id=str(kb.pk), action_flag=3).exists()

    # The bulk action says how many were really deleted.
    changelist = reverse("admin:retrieval_knowledgebase_changelist")
    confirm = client.post(changelist, {"action": "delete_selected", "_selected_action": [kb.pk]})
    assert confirm.status_code == 200 and "8 chunks" in confirm.content.decode()
    response = client.post(changelist, {"action": "delete_selected", "_selected_action": [kb.pk], "post": "yes"})
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert "Deleted 0 knowledge bases." in shown and any("kept" in m for m in shown), shown
    monkeypatch.undo()
    response = client.post(changelist, {"action": "delete_selected", "_selected_action": [kb.pk], "post": "yes"})
    assert "Deleted 1 knowledge base." in [str(m) for m in get_messages(response.wsgi_request)]
    assert not KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).exists()


def test_the_admin_deletes_a_document_although_no_one_may_delete_a_chunk_by_hand(services, client, tenant):
    kb = indexed_kb(tenant, name="docs")
    document = Document.objects.for_tenant(tenant).filter(knowledge_base=kb).first()
    client.force_login(user_with_role(tenant, Role.ADMIN, "doc-admin@example.com"))
    url = reverse("admin:retrieval_document_delete", args=[document.pk])
    page = client.get(url).content.decode()
    assert "Cannot delete" not in page and "1 chunks and their vectors" in page
    client.post(url, {"post": "yes"})
    assert not Document.objects.for_tenant(tenant).filter(pk=document.pk).exists()
    assert all(hit.document_id != document.pk for hit in _chunk_vectors(kb))


def test_deleting_a_tenant_in_the_admin_clears_its_knowledge_bases_first(
    services, client, tenant, other_tenant, django_capture_on_commit_callbacks
):
    from django.contrib.auth import get_user_model

    from tenants.models import Tenant

    dedup_policy_update(tenant=tenant, scope="tenant")
    kb, upload, _ = _populated(tenant, "tenant-gone")
    foreign_kb, _, _ = _populated(other_tenant, "stays")
    superuser = get_user_model().objects.create_superuser("root-delete", "root@example.com", "pw-123456789")
    client.force_login(superuser)
    url = reverse("admin:tenants_tenant_delete", args=[tenant.pk])
    page = client.get(url).content.decode()
    assert "1 knowledge bases with 9 documents and 8 chunks" in page and "Cannot delete" not in page
    with django_capture_on_commit_callbacks(execute=True):
        client.post(url, {"post": "yes"})
    assert not Tenant.objects.filter(pk=tenant.pk).exists()
    assert _chunk_vectors(kb) == [] and _question_vectors(kb) == []
    assert not default_storage.exists(upload.source_file.name)
    assert _chunk_vectors(foreign_kb)
