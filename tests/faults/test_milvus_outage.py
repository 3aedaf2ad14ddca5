"""`milvus-lite server` stopped under a running platform, then started again on the same data.

Guarantees shown: a turn or a search answers 503 with a message saying what is down and a Retry-After, and
writes nothing; health names Milvus as the part that is down; an upload made during the outage is accepted,
waits in the queue (never `failed`), and ends `indexed` once Milvus is back; after the restart, turns and
searches work again on the reopened collection.
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from conversations.models import Conversation, Turn
from retrieval.models import Document, DocumentStatus
from tests.faults.conftest import handbook_index
from tests.faults.helpers import ask, conversation_start, returns_within
from tests.services import wait_for

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def milvus_stopped(milvus_server):
    milvus_server.stop()
    try:
        yield
    finally:
        if milvus_server.process is None:
            milvus_server.start()


@pytest.mark.django_db
def test_turns_and_search_answer_503_while_milvus_is_down(milvus_server, redis_available, api_client, tenant, client):
    knowledge_base = handbook_index(tenant)
    conversation_id = conversation_start(api_client, knowledge_base.pk)
    ask(api_client, conversation_id, "How do I reset my password?")

    with milvus_stopped(milvus_server):
        response = api_client.post(
            f"/api/v1/conversations/{conversation_id}/messages/",
            {"question": "How much does the Team plan cost?"},
            format="json",
        )
        assert response.status_code == 503, response.content
        assert "search index is unavailable" in response.json()["message"]
        assert int(response["Retry-After"]) > 0
        conversation = Conversation.objects.for_tenant(tenant).get(pk=conversation_id)
        assert conversation.turn_count == 1
        assert Turn.objects.for_tenant(tenant).filter(conversation=conversation).count() == 1

        search = api_client.post(
            f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/", {"query": "password"}, format="json"
        )
        assert search.status_code == 503, search.content
        assert search.json()["message"]

        health = client.get("/api/health/")
        assert health.status_code == 200  # usable: the database is up
        report = health.json()
        assert report["status"] == "degraded"
        assert report["components"]["milvus"]["status"] == "down"
        assert report["components"]["database"]["status"] == "ok"

    # Once the server is back, clients retrying after Retry-After get answers again (a 503 until it serves).
    retries: list[int] = []

    def answered() -> dict | None:
        # What the turn shows (retrieve mode): the first turn may have shown the pricing document already, which the
        # exclusion window then leaves out, and the extractive answer shows nothing from the others.
        response = api_client.post(
            f"/api/v1/conversations/{conversation_id}/messages/",
            {"question": "How much does the Team plan cost?", "mode": "retrieve"},
            format="json",
        )
        retries.append(response.status_code)
        assert response.status_code in (200, 503), response.content
        return response.json() if response.status_code == 200 else None

    after = wait_for(answered, timeout=60, interval=1.0, what="turns to be answered after Milvus restarted")
    assert after["dedup"]["action"] == "answered" and after["sources"]
    assert Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).count() == 2
    assert client.get("/api/health/").json()["components"]["milvus"]["status"] == "ok"


@pytest.mark.django_db(transaction=True)
def test_upload_during_outage_waits_queued_and_is_indexed_when_milvus_returns(
    milvus_server, celery_worker_process, api_client, tenant
):
    knowledge_base = handbook_index(tenant, name="outage")
    with milvus_stopped(milvus_server):
        response = api_client.post(
            f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/",
            {"title": "glaciers", "text": "Glaciers carve U-shaped valleys and leave moraines behind."},
            format="json",
        )
        assert response.status_code == 202, response.content
        document_id = response.json()["id"]

        def retried() -> Document | None:
            document = Document.objects.for_tenant(tenant).get(pk=document_id)
            return document if "Waiting to retry" in document.error_message else None

        waiting = wait_for(retried, timeout=60, what="the worker to meet the outage and queue a retry")
        assert waiting.status == DocumentStatus.QUEUED, "an outage must not fail the document"
        assert waiting.failed_at is None

    def indexed() -> Document | None:
        document = Document.objects.for_tenant(tenant).get(pk=document_id)
        assert document.status != DocumentStatus.FAILED, document.error_message
        return document if document.status == DocumentStatus.INDEXED else None

    document = wait_for(indexed, timeout=120, interval=0.5, what="the queued upload to be indexed")
    assert document.chunk_count >= 1 and document.attempts == 1
    results = api_client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/", {"query": "moraines", "limit": 3}, format="json"
    )
    assert results.status_code == 200
    assert results.json()["results"][0]["document_id"] == document_id


@contextlib.contextmanager
def milvus_stalled(milvus_server):
    """The server process frozen (SIGSTOP): its port still accepts connections but nothing answers, as with a
    Milvus node stuck in a long pause or a network path that drops packets instead of refusing them."""
    os.killpg(milvus_server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(milvus_server.process.pid, signal.SIGCONT)


@pytest.mark.django_db(transaction=True)  # the request runs on a thread of its own, with a connection of its own
def test_a_stalled_milvus_answers_503_within_milvus_timeout(
    milvus_server, redis_available, api_client, tenant, client, settings
):
    knowledge_base = handbook_index(tenant)
    conversation_id = conversation_start(api_client, knowledge_base.pk)
    ask(api_client, conversation_id, "How do I reset my password?")
    settings.MILVUS_TIMEOUT = 2.0

    with milvus_stalled(milvus_server):
        response, seconds = returns_within(
            30,
            lambda: api_client.post(
                f"/api/v1/conversations/{conversation_id}/messages/",
                {"question": "How much does the Team plan cost?"},
                format="json",
            ),
        )
        assert response.status_code == 503, response.content
        assert "search index is unavailable" in response.json()["message"]
        # MILVUS_TIMEOUT per call, not the web server's own timeout killing the worker without an answer.
        assert seconds < 20
        health, _ = returns_within(30, lambda: client.get("/api/health/"))
        assert health.json()["components"]["milvus"]["status"] == "down"
        assert Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).count() == 1

    after = wait_for(
        lambda: (lambda r: r.json() if r.status_code == 200 else None)(
            api_client.post(
                f"/api/v1/conversations/{conversation_id}/messages/",
                {"question": "How much does the Team plan cost?"},
                format="json",
            )
        ),
        timeout=60,
        interval=1.0,
        what="turns to be answered once Milvus resumed",
    )
    assert after["dedup"]["action"] == "answered"
