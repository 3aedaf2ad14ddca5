"""The PostgreSQL backend's health check of a kept connection (`kbplatform.db.postgresql`): a connection the server
has said nothing on passes without a query; one the server ended is found out and replaced before the request's
first query, as Django's `SELECT 1` check does."""

from __future__ import annotations

import select

import psycopg
import pytest
from django.core.checks.database import check_database_backends
from django.db import OperationalError, connection, connections

from kbplatform.db.postgresql.base import AUTOVACUUM_OFF, DatabaseWrapper, connection_quiet
from tests.services import service_missing

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kept_connection(monkeypatch):
    """Django's connection, open, with health checks on (as production keeps it); records each `SELECT 1` check."""
    if connection.vendor != "postgresql":
        service_missing("PostgreSQL", f"the database is {connection.vendor}; set DATABASE_URL to a PostgreSQL one")
    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", True)
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    connection.close()  # reopened with the settings above: kept for 60 s
    connection.ensure_connection()
    monkeypatch.setattr(connections["default"], "health_check_enabled", True)
    asked = []
    real_is_usable = DatabaseWrapper.is_usable

    def is_usable_recorded(self):
        usable = real_is_usable(self)
        asked.append(usable)
        return usable

    monkeypatch.setattr(DatabaseWrapper, "is_usable", is_usable_recorded)
    return asked


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_the_platform_backend_serves_postgresql():
    if connection.vendor != "postgresql":
        service_missing("PostgreSQL", f"the database is {connection.vendor}; set DATABASE_URL to a PostgreSQL one")
    assert connection.settings_dict["ENGINE"] == "kbplatform.db.postgresql"
    assert isinstance(connections["default"], DatabaseWrapper)


def test_a_quiet_kept_connection_passes_the_check_without_a_query(kept_connection):
    before = backend_pid()
    for _ in range(3):
        connection.close_if_unusable_or_obsolete()  # what every request's start and end do
        assert backend_pid() == before
    assert kept_connection == []


def test_a_connection_the_server_ended_is_replaced_before_the_next_query(kept_connection):
    before = backend_pid()
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [before])
    # The server's last words reach the client's socket a moment after the backend is told to end.
    select.select([connection.connection.fileno()], [], [], 10)
    assert not connection_quiet(connection.connection.fileno())

    connection.close_if_unusable_or_obsolete()
    after = backend_pid()  # would raise OperationalError on the dead connection
    assert after != before
    assert kept_connection == [False]  # the fallback asked the server, and found the connection gone


def test_a_closed_connection_is_replaced_without_asking_the_server(kept_connection):
    before = backend_pid()
    connection.connection.close()
    connection.close_if_unusable_or_obsolete()
    assert backend_pid() != before
    assert kept_connection == []


def _server_settings() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum'), current_setting('track_counts')")
        return cursor.fetchone()


def _autovacuum_warnings() -> list:
    issues = check_database_backends(databases=["default"])
    return [issue for issue in issues if issue.id == AUTOVACUUM_OFF]


def test_the_database_check_warns_exactly_when_the_server_keeps_no_statistics_fresh():
    if connection.vendor != "postgresql":
        service_missing("PostgreSQL", f"the database is {connection.vendor}; set DATABASE_URL to a PostgreSQL one")
    autovacuum, track_counts = _server_settings()
    warnings = _autovacuum_warnings()
    assert len(warnings) == (0 if (autovacuum, track_counts) == ("on", "on") else 1)
    # track_counts is settable per session by a superuser (the test database's owner): without it autovacuum
    # cannot know what changed, and the check says so whatever autovacuum itself is set to.
    with connection.cursor() as cursor:
        cursor.execute("SET track_counts TO off")
    try:
        (warning,) = _autovacuum_warnings()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET track_counts")
    assert "track_counts=off" in warning.msg
    assert "docs/operations.md" in warning.hint


def test_health_says_when_the_server_keeps_no_statistics_fresh_and_stays_ok(client, monkeypatch):
    if connection.vendor != "postgresql":
        service_missing("PostgreSQL", f"the database is {connection.vendor}; set DATABASE_URL to a PostgreSQL one")
    from kbplatform import health

    for name in ("milvus", "redis", "worker", "embedding_model"):  # tested in tests/test_health.py: the database here
        monkeypatch.setitem(health.CHECKS, name, lambda: ("ok", "stub"))

    def database_component() -> dict:
        # The health view's own check, on this thread's connection (so the session's SET below applies).
        state, detail = health.CHECKS["database"]()
        return {"status": state, "detail": detail}

    fresh = _server_settings() == ("on", "on")
    as_set = database_component()
    assert as_set["status"] == "ok"
    assert as_set["detail"].startswith("postgresql")
    assert ("autovacuum=" in as_set["detail"]) is not fresh
    with connection.cursor() as cursor:
        cursor.execute("SET track_counts TO off")
    try:
        component = database_component()
        body = client.get("/api/health/").json()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET track_counts")
    assert component["status"] == "ok"
    assert "track_counts=off" in component["detail"]
    assert "Planner statistics" in component["detail"]
    assert body["status"] == "ok"
    assert body["components"]["database"]["status"] == "ok"
    assert "track_counts=off" in body["components"]["database"]["detail"]


def test_the_database_check_says_nothing_when_the_server_cannot_be_asked(monkeypatch):
    if connection.vendor != "postgresql":
        service_missing("PostgreSQL", f"the database is {connection.vendor}; set DATABASE_URL to a PostgreSQL one")

    def refused(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(connections["default"], "cursor", refused)
    assert _autovacuum_warnings() == []


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def test_a_hot_read_is_prepared_once_it_recurs_on_a_kept_connection(kept_connection, monkeypatch, tenant):
    """The reads of `kbplatform.row_reads` are planned by the server once per connection: after the threshold's
    executions the statement is prepared there, and the rows read are the same as before it was."""
    from conversations.models import Conversation
    from kbplatform.row_reads import row_get, values_by_keys
    from retrieval.models import Chunk
    from tests.factories import ChunkFactory, ConversationFactory

    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "prepare_threshold", 3)
    connection.close()
    connection.ensure_connection()
    conversation = ConversationFactory(tenant=tenant)
    chunks = [ChunkFactory(tenant=tenant), ChunkFactory(tenant=tenant)]
    keys = [chunk.pk for chunk in chunks] + [2**40]  # one id no row has: the array is bigint whatever the ids' size
    read = []
    for _ in range(4):
        read.append(
            (
                row_get(model=Conversation, tenant_id=tenant.pk, equal={"pk": conversation.pk}).pk,
                sorted(values_by_keys(model=Chunk, columns=("pk", "text"), keys=keys, tenant_id=tenant.pk)),
            )
        )
    assert read == [read[0]] * 4
    assert read[0] == (conversation.pk, sorted((chunk.pk, chunk.text) for chunk in chunks))
    statements = _prepared_statements()
    assert any('FROM "conversations_conversation" t0' in statement for statement in statements), statements
    assert any('FROM "retrieval_chunk" t0' in statement for statement in statements), statements


def test_with_preparing_off_nothing_is_prepared(kept_connection, monkeypatch, tenant):
    from conversations.models import Conversation
    from kbplatform.row_reads import row_get
    from tests.factories import ConversationFactory

    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "prepare_threshold", None)
    connection.close()
    connection.ensure_connection()
    conversation = ConversationFactory(tenant=tenant)
    for _ in range(6):
        assert row_get(model=Conversation, tenant_id=tenant.pk, equal={"pk": conversation.pk}).pk == conversation.pk
    assert _prepared_statements() == []
