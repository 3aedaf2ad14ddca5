"""Each knowledge base with its own embedding model: an English one on the bundled model and a Chinese one on the
multilingual model, in one tenant, searched and conversed in without crossing; a model change of one re-indexes it
alone; an offered model that cannot be read is a clear error."""

from __future__ import annotations

import pytest

from conversations.models import Turn
from kbplatform.errors import ServiceUnavailableError
from retrieval import embeddings, vectorstore
from retrieval.models import KnowledgeBase, ReindexStatus
from retrieval.services import knowledge_base_reindex
from tests.conversations.helpers import HANDBOOK, HELP_CENTRE_ZH, indexed_kb
from tests.conversations.test_api import ask, start

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

MULTILINGUAL = embeddings.USE_MODEL_NAME


@pytest.fixture
def services(redis_available, milvus_server):
    return milvus_server


@pytest.fixture
def english(services, tenant):
    return indexed_kb(tenant, documents=HANDBOOK, name="help-en")


@pytest.fixture
def chinese(services, tenant):
    return indexed_kb(
        tenant, documents=HELP_CENTRE_ZH, name="help-zh", embedding_model=MULTILINGUAL, text_analyzer="chinese"
    )


def search(client, knowledge_base, query: str) -> dict:
    response = client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/", {"query": query, "limit": 3}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_a_knowledge_base_is_created_with_a_model_the_deployment_offers(api_client, services):
    made = api_client.post(
        "/api/v1/knowledge-bases/", {"name": "zh", "embedding_model": MULTILINGUAL, "text_analyzer": "chinese"}
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["embedding_model"], body["embedding_dimension"]) == (MULTILINGUAL, 512)
    assert body["effective_retrieval_mode"] == "hybrid"
    default = api_client.post("/api/v1/knowledge-bases/", {"name": "en"}).json()
    assert (default["embedding_model"], default["embedding_dimension"]) == ("all-MiniLM-L6-v2", 384)
    refused = api_client.post("/api/v1/knowledge-bases/", {"name": "x", "embedding_model": "bge-m3"})
    assert refused.status_code == 400
    assert "bge-m3" in refused.json()["message"] and MULTILINGUAL in refused.json()["message"]
    assert refused.json()["extra"]["offered"] == list(embeddings.offered_models())


def test_each_knowledge_base_is_searched_with_its_own_model_in_its_own_collection(api_client, english, chinese):
    zh = search(api_client, chinese, "退款多久能到账？")
    assert zh["results"][0]["document_external_id"] == "refund", zh["results"]
    en = search(api_client, english, "How long are deleted files kept?")
    assert en["results"][0]["document_external_id"] == "retention", en["results"]
    # Each model's vectors are in their own collection: the other holds none of the knowledge base's.
    model_collection = vectorstore.model_chunk_collection_name(dimension=512)
    assert vectorstore.vectors_count(
        tenant_id=chinese.tenant_id, knowledge_base_id=chinese.pk, dimension=512, collection=model_collection
    ) == len(HELP_CENTRE_ZH)
    assert vectorstore.vectors_count(tenant_id=english.tenant_id, knowledge_base_id=chinese.pk, dimension=384) == 0
    assert (
        vectorstore.vectors_count(
            tenant_id=english.tenant_id, knowledge_base_id=english.pk, dimension=512, collection=model_collection
        )
        == 0
    )


def test_conversations_embed_their_questions_with_their_knowledge_bases_model(api_client, tenant, english, chinese):
    zh = start(api_client, chinese)
    en = start(api_client, english)
    asked_zh = ask(api_client, zh, "退款多久能到账？")
    asked_en = ask(api_client, en, "How do I reset my password?")
    assert asked_zh["sources"][0]["document_external_id"] == "refund"
    assert asked_en["sources"][0]["document_external_id"] == "password"
    turns = {t.pk: t for t in Turn.objects.for_tenant(tenant).filter(pk__in=[asked_zh["turn_id"], asked_en["turn_id"]])}
    assert turns[asked_zh["turn_id"]].question_vector_model == embeddings.model_id(MULTILINGUAL)
    assert turns[asked_en["turn_id"]].question_vector_model == embeddings.model_id("all-MiniLM-L6-v2")
    # The Chinese questions are readable by their model: a look-alike is judged by similarity, not only as text.
    again = ask(api_client, zh, "如何申请退款？")
    assert again["dedup"]["action"] != "served_cached"
    assert again["dedup"]["similarity"] is not None


def test_a_model_change_reindexes_one_knowledge_base_and_leaves_the_other_serving(api_client, tenant, english, chinese):
    moved = api_client.post(f"/api/v1/knowledge-bases/{english.pk}/reindex/", {"embedding_model": MULTILINGUAL})
    assert moved.status_code == 202, moved.content
    assert moved.json()["embedding_model"] == MULTILINGUAL
    # Until a worker takes the re-index up, the moved knowledge base's search is refused; the other one serves.
    refused = api_client.post(f"/api/v1/knowledge-bases/{english.pk}/search/", {"query": "reset password"})
    assert refused.status_code == 409 and refused.json()["extra"]["code"] == "embedding_model_mismatch"
    assert search(api_client, chinese, "发票什么时候开？")["results"][0]["document_external_id"] == "invoice"
    assert knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=english.pk) == len(HANDBOOK)
    english.refresh_from_db()
    assert english.reindex_status == ReindexStatus.DONE
    assert (english.embedding_dimension, english.embedding_model_identity) == (
        512,
        embeddings.model_identity(MULTILINGUAL),
    )
    found = search(api_client, english, "How long are deleted files kept?")
    assert found["index"]["status"] == "current"
    assert found["results"][0]["document_external_id"] == "retention"
    # Its vectors of the model it left are gone; the Chinese knowledge base was never touched.
    assert vectorstore.vectors_count(tenant_id=tenant.pk, knowledge_base_id=english.pk, dimension=384) == 0
    chinese_row = KnowledgeBase.objects.for_tenant(tenant).get(pk=chinese.pk)
    assert chinese_row.reindex_status == ReindexStatus.IDLE


def test_an_unknown_model_in_a_reindex_is_a_400(api_client, english):
    refused = api_client.post(f"/api/v1/knowledge-bases/{english.pk}/reindex/", {"embedding_model": "nope"})
    assert refused.status_code == 400
    english.refresh_from_db()
    assert english.reindex_status == ReindexStatus.IDLE


def test_a_broken_multilingual_model_is_a_503_for_its_turns_and_the_english_one_serves(
    api_client, english, chinese, monkeypatch, tmp_path
):
    from retrieval import embedding_use

    empty = tmp_path / "resources"
    empty.mkdir()
    monkeypatch.setattr(embedding_use, "model_path", lambda: empty)
    monkeypatch.setattr(embeddings, "_models", {})
    conversation = start(api_client, chinese)
    response = api_client.post(
        f"/api/v1/conversations/{conversation}/messages/", {"question": "退款多久能到账？"}, format="json"
    )
    assert response.status_code == 503, response.content
    assert response.json()["extra"]["code"] == embeddings.EMBEDDING_MODEL_UNAVAILABLE
    assert ask(api_client, start(api_client, english), "How do I reset my password?")["sources"]


def test_indexing_into_a_knowledge_base_whose_model_is_broken_waits_and_retries(
    tenant, services, monkeypatch, tmp_path
):
    from retrieval import embedding_use
    from retrieval.models import Document, DocumentStatus, SourceKind
    from retrieval.services import TransientIngestError, documents_index, knowledge_base_create

    knowledge_base = knowledge_base_create(
        tenant=tenant, name="zh-broken", embedding_model=MULTILINGUAL, text_analyzer="chinese"
    )
    document = Document.objects.create(
        tenant=tenant,
        knowledge_base=knowledge_base,
        title="退款",
        source_kind=SourceKind.TEXT,
        source_text="退款审核通过后三到五个工作日到账。",
    )
    weights = tmp_path / "resources"
    weights.mkdir()
    (weights / "sp.model").write_bytes(b"not a sentencepiece model")
    monkeypatch.setattr(embedding_use, "model_path", lambda: weights)
    monkeypatch.setattr(embeddings, "_models", {})
    embeddings._identity_of.cache_clear()
    with pytest.raises(TransientIngestError):
        documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    document.refresh_from_db()
    assert document.status == DocumentStatus.QUEUED
    assert document.error_message.startswith("Waiting to retry: The embedding model cannot be read at")

    monkeypatch.undo()
    embeddings._identity_of.cache_clear()
    assert documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).encoded == 1
    document.refresh_from_db()
    assert document.status == DocumentStatus.INDEXED
    knowledge_base.refresh_from_db()
    assert knowledge_base.embedding_model_identity == embeddings.model_identity(MULTILINGUAL)


def test_a_chinese_repeat_is_decided_by_the_multilingual_head_not_by_a_verifier_of_the_bundled_model(
    api_client, tenant, chinese, settings, tmp_path
):
    """The tenant's active verifier was trained on the bundled model's vectors: in a conversation of the multilingual
    model it does not decide; the multilingual model's own head does, at the tenant's threshold, and is named."""
    from conversations.dedup import tenant_verifiers
    from conversations.dedup.decisions import SHIPPED_VERIFIER_LABEL
    from conversations.dedup.duplicate_model import pair_model_default
    from conversations.models import DedupEvent
    from conversations.training.verifiers import duplicate_model_activate
    from tests.conversations.verifier_files import trained_version

    settings.DUPLICATE_MODEL_DIR = tmp_path / "models"
    tenant_verifiers._models.clear()
    english_verifier = trained_version(tenant, cut=0.999)  # the bundled head's weights: would refuse nearly all
    duplicate_model_activate(tenant=tenant, version_id=english_verifier.pk)
    conversation = start(api_client, chinese)
    first = ask(api_client, conversation, "怎么重置密码？")
    again = ask(api_client, conversation, "如何重置密码？")
    assert again["dedup"]["action"] == "served_cached", again["dedup"]
    assert again["dedup"]["matched_turn_id"] == first["turn_id"]
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=again["turn_id"])
    assert event.verifier_id is None and event.verifier_label == SHIPPED_VERIFIER_LABEL
    assert event.pair_probability >= pair_model_default(MULTILINGUAL).cut
    assert event.threshold == pytest.approx(0.76)  # the tenant's threshold: a head decided, the gate was not raised


def test_two_offered_models_of_one_vector_size_are_refused_rather_than_share_a_collection(monkeypatch):
    """A primary model at EMBEDDING_MODEL_PATH of the multilingual model's size: refused with what to do."""
    real = embeddings.embedding_dimension

    def sizes(model: str | None = None) -> int:
        return 512 if model == "all-MiniLM-L6-v2" else real(model)

    monkeypatch.setattr(embeddings, "embedding_dimension", sizes)
    with pytest.raises(ServiceUnavailableError, match="different vector sizes"):
        vectorstore.model_chunk_collection_name(dimension=512)


def test_an_analyser_change_rewrites_one_knowledge_bases_bm25_text_and_leaves_the_other(api_client, tenant, english):
    """A Spanish knowledge base made with `english` moves to `spanish` by a re-index: its chunks' BM25 text is
    rewritten as stems, so a question's other form of a word finds the page; the other knowledge base is not
    touched. An analyser that does not exist is a 400 and starts nothing."""
    spanish = indexed_kb(
        tenant,
        documents={
            "returns": ["Devoluciones de los pedidos: tienes 30 días desde la entrega."],
            "shipping": ["Gastos de envío de la tienda a Canarias y Baleares."],
        },
        name="ayuda",
    )
    url = f"/api/v1/knowledge-bases/{spanish.pk}/search/"
    question = {"query": "como devuelvo un pedido", "retrieval_mode": "full_text"}
    assert api_client.post(url, question, format="json").json()["results"] == []

    refused = api_client.post(f"/api/v1/knowledge-bases/{spanish.pk}/reindex/", {"text_analyzer": "klingon"})
    assert refused.status_code == 400 and "text_analyzer" in refused.json()["extra"]["fields"]
    moved = api_client.post(f"/api/v1/knowledge-bases/{spanish.pk}/reindex/", {"text_analyzer": "spanish"})
    assert moved.status_code == 202, moved.content
    assert moved.json()["text_analyzer"] == "spanish" and moved.json()["reindex_status"] == "running"
    assert knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=spanish.pk) == 2

    found = api_client.post(url, question, format="json").json()
    assert [hit["document_external_id"] for hit in found["results"]][:1] == ["returns"]
    english.refresh_from_db()
    assert (english.text_analyzer, english.reindex_status) == ("english", ReindexStatus.IDLE)
