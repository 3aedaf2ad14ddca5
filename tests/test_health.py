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
        from retrieval import vectorstore

        vectorstore._reset()
        try:
            body = client.get("/api/health/").json()
        finally:
            vectorstore._reset()
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
    assert body["components"]["embedding_model"] == {
        "status": "ok",
        "detail": f"{embeddings.model_identity()} on {embeddings.backend()}",
        "ms": body["components"]["embedding_model"]["ms"],
    }
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
