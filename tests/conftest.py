from __future__ import annotations

import os

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tenants.models import ApiKeyRole
from tenants.services import api_key_create, tenant_get_or_create
from tests.services import CeleryWorker, MilvusServer, service_missing


@pytest.fixture
def tenant(db):
    return tenant_get_or_create(slug="acme", name="Acme")[0]


@pytest.fixture
def other_tenant(db):
    return tenant_get_or_create(slug="globex", name="Globex")[0]


def _client_for(tenant, role: str = ApiKeyRole.ADMIN) -> APIClient:
    api_key, raw_key = api_key_create(tenant=tenant, name=f"test-{role}", role=role)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    client.api_key = api_key
    client.raw_key = raw_key
    return client


@pytest.fixture
def api_client(tenant) -> APIClient:
    """An API client holding an admin key of `tenant`."""
    return _client_for(tenant)


@pytest.fixture
def standard_api_client(tenant) -> APIClient:
    return _client_for(tenant, ApiKeyRole.STANDARD)


@pytest.fixture
def other_api_client(other_tenant) -> APIClient:
    return _client_for(other_tenant)


@pytest.fixture(scope="session")
def redis_available() -> str:
    from kbplatform.redis_client import redis_ping

    if not settings.REDIS_URL:
        service_missing("Redis", "REDIS_URL is empty")
    if not redis_ping():
        service_missing("Redis", f"no answer from {settings.REDIS_URL}")
    return settings.REDIS_URL


@pytest.fixture(scope="session")
def milvus_server():
    """A real `milvus-lite server` for this test session; settings.MILVUS_URI points at it."""
    from retrieval import vectorstore

    server = MilvusServer()
    server.start()
    previous = settings.MILVUS_URI
    settings.MILVUS_URI = server.uri
    vectorstore._reset()
    yield server
    vectorstore._reset()
    settings.MILVUS_URI = previous
    server.close()


@pytest.fixture(scope="session")
def celery_worker_process(redis_available, milvus_server, django_db_setup, django_db_blocker):
    """A real Celery worker on this run's queue, Redis broker, test database and Milvus server."""
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "kbplatform.settings.test",
            "KB_TEST_WORKER": "1",
            "MILVUS_URI": milvus_server.uri,
            "PYTHONUNBUFFERED": "1",
        }
    )
    worker = CeleryWorker(env=env, queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    worker.start()
    yield worker
    worker.stop()
