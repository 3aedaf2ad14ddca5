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
