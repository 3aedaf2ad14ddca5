"""The PostgreSQL connection of a request is killed (pg_terminate_backend) in the middle of writing a turn.

Guarantees shown: the client gets a clean 503 saying nothing was saved (not a 500, not a hang); the turn's rows
(QA pair, consumed items, audit event, the conversation's counter) are all absent, never half-written, because
they are written in one transaction; the next request reconnects and the retried turn takes the same number.
"""

from __future__ import annotations

import socket
import threading

import psycopg
import pytest
from django.db import connection

from conversations.models import ConsumedItem, Conversation, DedupEvent, Turn
from tests.faults.conftest import handbook_index
from tests.faults.helpers import ask, conversation_start, returns_within
from tests.services import service_missing

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class BackendKiller:
    """A database execute wrapper: just before the first statement touching `table`, the server is told to
    terminate this connection's backend, from a second connection, as a failover or an admin would."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.fired = False

    def __call__(self, execute, sql, params, many, context):
        if not self.fired and f'"{self.table}"' in sql:
            self.fired = True
            pid = connection.connection.info.backend_pid
            with psycopg.connect(**connection.get_connection_params(), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        return execute(sql, params, many, context)


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        service_missing("PostgreSQL", f"the database is {connection.vendor}; set DATABASE_URL to a PostgreSQL one")


@pytest.mark.parametrize("table", ["conversations_consumeditem", "conversations_dedupevent"])
def test_connection_killed_mid_turn_is_a_clean_503_and_writes_nothing(
    postgres, milvus_server, redis_available, api_client, tenant, table
):
    knowledge_base = handbook_index(tenant)
    conversation_id = conversation_start(api_client, knowledge_base.pk)
    first = ask(api_client, conversation_id, "How do I reset my password?")

    killer = BackendKiller(table)
    # The second turn in retrieve mode, so that it shows (and consumes) passages whatever the first showed: the
    # exclusion window may have left out the pricing document, and the extractive answer shows nothing from the others.
    with connection.execute_wrapper(killer):
        response = api_client.post(
            f"/api/v1/conversations/{conversation_id}/messages/",
            {"question": "How much does the Team plan cost?", "mode": "retrieve"},
            format="json",
        )
    assert killer.fired, f"the turn never wrote to {table}"
    assert response.status_code == 503, response.content
    assert "nothing was saved" in response.json()["message"]
    assert int(response["Retry-After"]) > 0
    connection.close()  # what Django does with a broken connection at the end of a real request

    conversation = Conversation.objects.for_tenant(tenant).get(pk=conversation_id)
    assert conversation.turn_count == 1
    assert list(Turn.objects.for_tenant(tenant).filter(conversation=conversation).values_list("pk", flat=True)) == [
        first["turn_id"]
    ]
    assert not ConsumedItem.objects.for_tenant(tenant).filter(conversation=conversation, turn_number=2).exists()
    assert DedupEvent.objects.for_tenant(tenant).filter(conversation_ref=conversation_id).count() == 1

    retried = ask(api_client, conversation_id, "How much does the Team plan cost?", mode="retrieve")
    turn = Turn.objects.for_tenant(tenant).get(pk=retried["turn_id"])
    assert turn.number == 2
    assert set(
        ConsumedItem.objects.for_tenant(tenant)
        .filter(conversation=conversation, turn_number=2, kind="doc")
        .values_list("item_id", flat=True)
    ) == {source["document_id"] for source in retried["sources"]}


def test_a_database_that_accepts_but_never_answers_fails_the_connection_at_its_timeout(postgres):
    # A listener that takes the TCP connection and then says nothing, like a failed-over host behind a load balancer
    # or a server stuck before its startup reply: without a connect timeout libpq waits for the kernel (minutes), and
    # so does every request and task; with the platform's default (DATABASE_CONNECT_TIMEOUT) it fails in seconds.
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    accepting = threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True)
    accepting.start()
    params = {**connection.get_connection_params(), "host": "127.0.0.1", "port": listener.getsockname()[1]}

    def connect() -> str:
        try:
            psycopg.connect(**params).close()
        except psycopg.OperationalError as exc:
            return str(exc)
        return "connected"

    try:
        outcome, seconds = returns_within(30, connect)
        assert outcome != "connected" and seconds < 15, (outcome, seconds)
    finally:
        for held_socket in held:
            held_socket.close()
        listener.close()
