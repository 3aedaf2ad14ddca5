"""The embedding model cannot be read (EMBEDDING_MODEL_PATH mistyped, a volume not mounted, a directory emptied by a
failed deploy): every request that embeds a question answers 503 with a message that names the setting, instead of
a 500, and writes nothing (real PostgreSQL and Redis under CI, `milvus-lite server`)."""

from __future__ import annotations

import pytest

from conversations.models import Turn
from retrieval import embeddings
from retrieval.models import Document, DocumentStatus, KnowledgeBase, ReindexStatus, SourceKind
from retrieval.services import TransientIngestError, documents_index, knowledge_base_reindex
from tests.conversations.helpers import indexed_kb
from tests.retrieval.factories import kb_make


@pytest.fixture
def unmount_model(settings, tmp_path, monkeypatch):
    """Returns a function that moves the process onto a model directory it cannot read, as a process started on it
    would be (nothing of the model loaded or cached), and returns that directory."""

    def unmount() -> str:
        monkeypatch.setattr(embeddings, "_models", {})
        embeddings._identity_of.cache_clear()
        embeddings._tokenizer_of.cache_clear()
        settings.EMBEDDING_MODEL_PATH = str(tmp_path / "not-mounted")
        return settings.EMBEDDING_MODEL_PATH

    yield unmount
    embeddings._identity_of.cache_clear()
    embeddings._tokenizer_of.cache_clear()


def assert_model_unavailable(response, path: str) -> None:
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["extra"]["code"] == "embedding_model_unavailable"
    assert "EMBEDDING_MODEL_PATH" in body["message"] and path in body["message"]


@pytest.mark.django_db(transaction=True)
def test_a_search_without_a_readable_model_is_a_503_that_names_the_setting(
    api_client, tenant, milvus_server, unmount_model
):
    knowledge_base = indexed_kb(tenant)
    path = unmount_model()

    response = api_client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/", {"query": "How do I reset my password?"}, format="json"
    )

    assert_model_unavailable(response, path)


@pytest.mark.django_db(transaction=True)
def test_a_turn_without_a_readable_model_is_a_503_and_writes_no_turn(
    api_client, tenant, milvus_server, redis_available, unmount_model
):
    knowledge_base = indexed_kb(tenant)
    conversation = api_client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base.pk}, format="json")
    assert conversation.status_code == 201, conversation.content
    path = unmount_model()

    response = api_client.post(
        f"/api/v1/conversations/{conversation.json()['id']}/messages/",
        {"question": "How do I reset my password?"},
        format="json",
    )

    assert_model_unavailable(response, path)
    assert not Turn.objects.for_tenant(tenant).exists()


@pytest.mark.django_db
def test_indexing_without_a_readable_model_waits_and_retries_instead_of_failing_the_file(
    tenant, milvus_server, settings, unmount_model
):
    """A worker started on an unreadable model directory: the documents go back to the queue saying why (the task
    retries with backoff, and after its last retry fails them with that reason), and are indexed once the model is
    back. They used to fail as "Indexing failed unexpectedly (FileNotFoundError)", to be re-indexed one by one."""
    knowledge_base = kb_make(tenant, name="model-gone")
    document = Document.objects.create(
        tenant=tenant,
        knowledge_base=knowledge_base,
        title="glacier",
        source_kind=SourceKind.TEXT,
        source_text="Glaciers carve U-shaped valleys and leave moraines behind when they retreat.",
    )
    path = unmount_model()

    with pytest.raises(TransientIngestError, match="EMBEDDING_MODEL_PATH"):
        documents_index(tenant_id=tenant.pk, document_ids=[document.pk])

    document.refresh_from_db()
    assert document.status == DocumentStatus.QUEUED
    assert document.error_message.startswith("Waiting to retry: The embedding model cannot be read at")
    assert path in document.error_message
    assert document.attempts == 0  # the run was not lost: the attempt does not count towards giving up

    settings.EMBEDDING_MODEL_PATH = ""
    embeddings._identity_of.cache_clear()
    embeddings._tokenizer_of.cache_clear()
    assert documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).encoded == 1
    document.refresh_from_db()
    assert document.status == DocumentStatus.INDEXED


@pytest.mark.django_db
def test_a_reindex_without_a_readable_model_is_handed_back_for_a_retry(tenant, milvus_server, unmount_model):
    knowledge_base = indexed_kb(tenant)
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base.pk).update(reindex_status=ReindexStatus.RUNNING)
    unmount_model()

    with pytest.raises(TransientIngestError, match="EMBEDDING_MODEL_PATH"):
        knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk)

    knowledge_base.refresh_from_db()
    assert knowledge_base.reindex_status == ReindexStatus.RUNNING
    assert knowledge_base.reindex_claim_token == ""  # the retry claims it again at once, not after the lease
