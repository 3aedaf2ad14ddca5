from __future__ import annotations

import itertools
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from lifecycle.services import tenant_get_or_create
from tenants.scopes import SCOPE_ORDER, Scope
from tenants.services import api_key_create
from tests.services import CeleryWorker, MilvusServer, service_missing

SQLITE_IDS_PER_TEST = 100_000
# What a key of the former "standard" role was given by the scopes migration.
STANDARD_SCOPES = (Scope.CHAT, Scope.INGEST)

# Fixtures that start or reach a real service (Milvus Lite, a Celery worker, Redis). A test that uses one, directly
# or through another fixture, is an integration test whatever its own marks say, so `make test-unit`
# (`-m "not integration and not browser"`) never starts or waits on one.
SERVICE_FIXTURES = frozenset({"milvus_server", "celery_worker_process", "redis_available"})
_sqlite_id_blocks = itertools.count(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    _node_ids_made_unique(items)


def _node_ids_made_unique(items: list[pytest.Item]) -> None:
    """Every test has an id of its own, or the collection fails.

    pytest-xdist (`make test`) hands tests to its workers by node id, so tests sharing one would run once between
    them, silently. pytest 9.2 builds a test's id from its function name and its parametrize ids, and schemathesis
    puts each API operation in the test's name only (`test_x[GET /api/health/]`), leaving all its tests one id: such
    a test gets the bracketed part of its name as its id's parameters (through pytest's private `_id`, the only way
    to set it after collection)."""
    shared = Counter(item.nodeid for item in items)
    for item in items:
        base, bracket, params = item.name.partition("[")
        if shared[item.nodeid] > 1 and bracket and params.endswith("]") and item.parent is not None:
            item._id = item.parent.id.child(base).with_params(params[:-1])
    still = sorted(nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1)
    if still:
        raise pytest.UsageError(f"tests sharing a node id would run once under xdist: {still[:5]}")


@pytest.fixture(autouse=True)
def _sqlite_ids_never_handed_out_twice(request, django_db_blocker):
    """On SQLite (`make test` without DATABASE_URL), every test's rows get ids of their own block.

    SQLite rolls a test's AUTOINCREMENT counters back with its rows, so the next test is handed the same tenant,
    knowledge base, chunk and turn ids again, while the session's one Milvus server keeps the vectors earlier tests
    filed under them: counts by knowledge base then read other tests' vectors. PostgreSQL's sequences never go back,
    so there this does nothing."""
    if connection.vendor != "sqlite":
        return
    uses_database = request.node.get_closest_marker("django_db") or {"db", "transactional_db"} & set(
        request.fixturenames
    )
    if not uses_database:
        return
    request.getfixturevalue("django_db_setup")
    start = next(_sqlite_id_blocks) * SQLITE_IDS_PER_TEST
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%AUTOINCREMENT%'")
        tables = [name for (name,) in cursor.fetchall()]
        cursor.execute(f"DELETE FROM sqlite_sequence WHERE name IN ({', '.join('%s' for _ in tables)})", tables)
        cursor.executemany("INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [(t, start) for t in tables])


@pytest.fixture(scope="session", autouse=True)
def _this_runs_files_removed_when_it_ends():
    """The media and verifier directories of this run and xdist worker (kbplatform.settings.test names them by
    ISOLATION_ID) are removed when its session ends, after the Celery worker has stopped: runs leave nothing behind
    under var/."""
    own = [
        Path(d) for d in (settings.MEDIA_ROOT, settings.DUPLICATE_MODEL_DIR) if Path(d).name == settings.ISOLATION_ID
    ]
    yield
    for directory in own:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_health_answer_kept_from_another_test(monkeypatch):
    """The health check keeps its answer about Milvus's contents for a while, per process: each test starts
    without one, so no test is told about another test's data."""
    from kbplatform import health

    monkeypatch.setattr(health, "_contents_checked", None)


@pytest.fixture
def tenant(db):
    return tenant_get_or_create(slug="acme", name="Acme")[0]


@pytest.fixture
def other_tenant(db):
    return tenant_get_or_create(slug="globex", name="Globex")[0]


def _client_for(tenant, scopes=SCOPE_ORDER) -> APIClient:
    api_key, raw_key = api_key_create(tenant=tenant, name=f"test-{'-'.join(scopes)}", scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    client.api_key = api_key
    client.raw_key = raw_key
    return client


@pytest.fixture
def api_client(tenant) -> APIClient:
    """An API client holding a key of `tenant` with every scope."""
    return _client_for(tenant)


@pytest.fixture
def standard_api_client(tenant) -> APIClient:
    """A key of `tenant` with the chat and ingest scopes: what a standard key became."""
    return _client_for(tenant, STANDARD_SCOPES)


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
    from retrieval import milvus

    server = MilvusServer()
    server.start()
    previous = settings.MILVUS_URI
    settings.MILVUS_URI = server.uri
    milvus.reset()
    yield server
    milvus.reset()
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
