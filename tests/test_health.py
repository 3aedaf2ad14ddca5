import pytest
from django.test import override_settings


@pytest.mark.django_db(transaction=True)
def test_health_reports_every_component_ok_on_real_services(client, celery_worker_process):
    response = client.get("/api/health/")
    assert response.status_code == 200
    body = response.json()
    assert {name: c["status"] for name, c in body["components"].items()} == {
        "database": "ok",
        "redis": "ok",
        "milvus": "ok",
        "worker": "ok",
        "embedding_model": "ok",
    }
    assert body["status"] == "ok"


@pytest.mark.django_db
def test_health_names_the_part_that_is_down(client, redis_available):
    with override_settings(MILVUS_URI="http://127.0.0.1:9", CELERY_TASK_ALWAYS_EAGER=True):
        from retrieval import milvus

        milvus.reset()
        try:
            body = client.get("/api/health/").json()
        finally:
            milvus.reset()
    assert body["status"] == "degraded"
    assert body["components"]["milvus"]["status"] == "down"
    assert "127.0.0.1:9" in body["components"]["milvus"]["detail"]
    assert body["components"]["database"]["status"] == "ok"


def test_health_is_public_and_reveals_no_tenant_data(client, db):
    body = client.get("/api/health/").json()
    assert set(body) == {"status", "components"}


@pytest.mark.django_db
def test_knowledge_bases_awaiting_a_reindex_are_counted_but_degrade_nothing(client, tenant, other_tenant, monkeypatch):
    from kbplatform import health
    from retrieval import embeddings
    from retrieval.models import Chunk, Document, KnowledgeBase

    for name in ("milvus", "redis", "worker"):  # reachability is tested above: only the model's part here
        monkeypatch.setitem(health.CHECKS, name, lambda: ("ok", "stub"))
    body = client.get("/api/health/").json()
    assert body["components"]["embedding_model"]["status"] == "ok"
    for model in embeddings.offered_models():  # each offered model, by its identity
        assert embeddings.model_identity(model) in body["components"]["embedding_model"]["detail"]
    # A knowledge base of the model in use, holding a chunk, is no re-index to do (a control the counts below need).
    current = KnowledgeBase.objects.create(
        tenant=tenant,
        name="current",
        embedding_model=embeddings.model_name(),
        embedding_model_identity=embeddings.model_identity(),
    )
    current_document = Document.objects.create(tenant=tenant, knowledge_base=current, title="d")
    Chunk.objects.create(
        tenant=tenant, document=current_document, knowledge_base=current, position=0, text="x", content_hash="h"
    )
    assert client.get("/api/health/").json()["components"]["embedding_model"]["status"] == "ok"
    for owner in (tenant, other_tenant):
        kb = KnowledgeBase.objects.create(
            tenant=owner, name="stale", embedding_model="e5-small", embedding_model_identity="e5-small@0123456789abcdef"
        )
        document = Document.objects.create(tenant=owner, knowledge_base=kb, title="d")
        Chunk.objects.create(tenant=owner, document=document, knowledge_base=kb, position=0, text="x", content_hash="h")

    body = client.get("/api/health/").json()
    assert body["status"] == "ok"
    component = body["components"]["embedding_model"]
    assert component["status"] == "reindex_needed"
    assert "2 knowledge base(s) hold another model's vectors" in component["detail"]
    assert "stale" not in component["detail"] and tenant.slug not in component["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["missing", "empty"])
def test_a_model_directory_that_is_missing_or_empty_is_reported_down(client, settings, tmp_path, monkeypatch, where):
    """EMBEDDING_MODEL_PATH mistyped, or a volume not mounted: every search and turn would fail, so the component is
    `down` and names the path. Its identity used to be the digest of no file at all, reported `ok`."""
    from kbplatform import health

    for name in ("milvus", "redis", "worker"):
        monkeypatch.setitem(health.CHECKS, name, lambda: ("ok", "stub"))
    model_dir = tmp_path / "e5-small"
    if where == "empty":
        model_dir.mkdir()
    settings.EMBEDDING_MODEL_PATH = str(model_dir)

    body = client.get("/api/health/").json()
    component = body["components"]["embedding_model"]
    assert component["status"] == "down", component
    assert str(model_dir) in component["detail"]
    assert body["status"] == "degraded"


@pytest.mark.parametrize(
    ("vector_counts", "expected"),
    [
        ([0], "vectors_lost"),
        ([0, 0, 0], "vectors_lost"),
        ([12, 0, 3], "vectors_lost"),  # one knowledge base lost its vectors: its searches answer 503
        ([1], "ok"),
        ([5000, 2, 7], "ok"),
        ([], "ok"),  # nothing indexed: an empty Milvus is what it should be
    ],
)
def test_milvus_contents_state(vector_counts, expected):
    from kbplatform.health import milvus_contents_state

    state, detail = milvus_contents_state(uri="http://m:1", vector_counts=vector_counts)
    assert state == expected
    assert ("milvus_rebuild" in detail) == (expected == "vectors_lost")


@pytest.fixture
def empty_deployment(milvus_server, settings):
    """A deployment of its own in the session's Milvus (collections no other test writes), emptied afterwards."""
    from retrieval import milvus, vectorstore

    settings.MILVUS_COLLECTION = f"{settings.MILVUS_COLLECTION}_health"
    milvus.reset()
    yield settings.MILVUS_COLLECTION
    for name in vectorstore.deployment_collection_names():
        milvus.connect().drop_collection(name)
    milvus.reset()


@pytest.mark.django_db
def test_a_milvus_that_lost_its_vectors_while_chunks_are_indexed_degrades_health(
    client, tenant, empty_deployment, monkeypatch
):
    """Milvus answers, but its chunk collection is gone (then made again, empty) while the database holds indexed
    chunks: every search of them answers 503, so health is `degraded` and says what to run; once a vector is back,
    `ok`. The count is reused for CONTENTS_CHECK_SECONDS, so asking again within it costs no count."""
    from kbplatform import health
    from retrieval import vectorstore
    from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase

    for name in ("redis", "worker", "embedding_model"):  # only Milvus's part here
        monkeypatch.setitem(health.CHECKS, name, lambda: ("ok", "stub"))
    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    document = Document.objects.create(
        tenant=tenant, knowledge_base=knowledge_base, title="d", status=DocumentStatus.QUEUED
    )
    chunk = Chunk.objects.create(
        tenant=tenant, document=document, knowledge_base=knowledge_base, position=0, text="x", content_hash="h"
    )
    # Not indexed yet: an empty Milvus is no loss.
    assert client.get("/api/health/").json()["components"]["milvus"]["status"] == "ok"

    Document.objects.for_tenant(tenant).filter(pk=document.pk).update(status=DocumentStatus.INDEXED)
    monkeypatch.setattr(health, "_contents_checked", None)
    body = client.get("/api/health/").json()
    assert body["status"] == "degraded"
    assert body["components"]["milvus"]["status"] == "vectors_lost"
    assert "milvus_rebuild" in body["components"]["milvus"]["detail"]
    # The loss as it happens: the collection is made again, empty, by the next search.
    vectorstore.collection_ensure(dimension=knowledge_base.embedding_dimension)
    monkeypatch.setattr(health, "_contents_checked", None)
    assert client.get("/api/health/").json()["components"]["milvus"]["status"] == "vectors_lost"

    vectorstore.vectors_upsert(
        rows=[
            vectorstore.ChunkVector(
                chunk_id=chunk.pk,
                tenant_id=tenant.pk,
                knowledge_base_id=knowledge_base.pk,
                document_id=document.pk,
                vector=[1.0] + [0.0] * (knowledge_base.embedding_dimension - 1),
                text="x",
            )
        ],
        dimension=knowledge_base.embedding_dimension,
    )
    counted = []
    real_count = vectorstore.vectors_count
    monkeypatch.setattr(vectorstore, "vectors_count", lambda **kwargs: counted.append(1) or real_count(**kwargs))
    # Within CONTENTS_CHECK_SECONDS the answer kept is given, without a count.
    assert client.get("/api/health/").json()["components"]["milvus"]["status"] == "vectors_lost"
    assert counted == []
    monkeypatch.setattr(health, "_contents_checked", None)
    body = client.get("/api/health/").json()
    assert body["components"]["milvus"]["status"] == "ok"
    assert body["status"] == "ok"
    assert counted == [1]
