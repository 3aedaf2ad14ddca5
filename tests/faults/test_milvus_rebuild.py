"""The recovery drill (docs/operations.md): Milvus loses its data (server stopped, data directory deleted, started
again empty), and `manage.py milvus_rebuild` writes it again from the database.

Guarantees shown: while the collections are missing or empty, a turn answers 503 and writes nothing (no turn row, no
consumed item, the conversation's count unchanged), and so does a search, rather than answering with no sources;
after the rebuild, the search API gives the same top 10 (same chunk ids in the same order) for every query of a fixed
set, and tenant-scope dedup serves a stored answer again from the rebuilt question collection.
"""

from __future__ import annotations

import shutil
from io import StringIO

import pytest
from django.core.management import call_command

from conversations.models import ConsumedItem, Conversation, Turn
from conversations.services import dedup_policy_update
from kbplatform import health
from retrieval import milvus
from retrieval.selectors import VECTORS_LOST_MESSAGE
from tests.faults.conftest import HANDBOOK, handbook_index
from tests.faults.helpers import ask, conversation_start
from tests.services import MilvusServer

pytestmark = pytest.mark.integration

QUERIES = [
    "How do I reset my password?",
    "What does the Team plan cost?",
    "single sign-on with SAML",
    "export a report as CSV",
    "restore a deleted file",
    "does the app work offline",
    "who can delete a workspace",
    "revoke an API key",
]


@pytest.fixture
def own_milvus(settings):
    """A Milvus server of this test alone: its data directory is deleted under it, which the session's server (shared
    with every other test) must never see."""
    server = MilvusServer()
    server.start()
    settings.MILVUS_URI = server.uri
    milvus.reset()
    yield server
    milvus.reset()
    server.close()


def top_ten(api_client, knowledge_base_id: int) -> dict[str, list[int]]:
    ranked = {}
    for query in QUERIES:
        response = api_client.post(
            f"/api/v1/knowledge-bases/{knowledge_base_id}/search/", {"query": query, "limit": 10}, format="json"
        )
        assert response.status_code == 200, response.content
        ranked[query] = [hit["chunk_id"] for hit in response.json()["results"]]
    return ranked


def written(tenant) -> tuple[int, int, list[int]]:
    conversations = Conversation.objects.for_tenant(tenant).order_by("pk")
    return (
        Turn.objects.for_tenant(tenant).count(),
        ConsumedItem.objects.for_tenant(tenant).count(),
        list(conversations.values_list("turn_count", flat=True)),
    )


@pytest.mark.django_db
def test_milvus_rebuilt_from_the_database_after_losing_its_data(
    own_milvus, redis_available, api_client, tenant, monkeypatch
):
    knowledge_base = handbook_index(tenant)
    dedup_policy_update(tenant=tenant, scope="tenant")
    before = top_ten(api_client, knowledge_base.pk)
    assert all(before.values()) and len(before[QUERIES[0]]) == len(HANDBOOK)
    first = ask(api_client, conversation_start(api_client, knowledge_base.pk), QUERIES[0])
    served = ask(api_client, conversation_start(api_client, knowledge_base.pk), QUERIES[0])
    assert served["dedup"]["action"] == "served_cached", served["dedup"]

    own_milvus.stop()
    shutil.rmtree(own_milvus.data_dir / "data")
    own_milvus.start()

    conversation_id = conversation_start(api_client, knowledge_base.pk)
    kept = written(tenant)
    # The first call after the restart meets the missing collection; the next ones the empty one made again.
    outage = [
        api_client.post(f"/api/v1/conversations/{conversation_id}/messages/", {"question": question}, format="json")
        for question in (QUERIES[1], QUERIES[0], QUERIES[2])
    ]
    assert [response.status_code for response in outage] == [503, 503, 503], [r.content for r in outage]
    assert outage[-1].json()["message"] == VECTORS_LOST_MESSAGE
    assert int(outage[-1]["Retry-After"]) > 0
    assert written(tenant) == kept, "a turn refused with 503 must write nothing"
    search = api_client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/", {"query": QUERIES[0]}, format="json"
    )
    assert search.status_code == 503 and search.json()["message"] == VECTORS_LOST_MESSAGE
    monkeypatch.setattr(health, "CONTENTS_CHECK_SECONDS", 0)  # each health check below counts again
    report = api_client.get("/api/health/").json()
    assert (report["status"], report["components"]["milvus"]["status"]) == ("degraded", "vectors_lost"), report

    out = StringIO()
    call_command("milvus_rebuild", stdout=out, stderr=StringIO())
    report = out.getvalue()
    assert f"{tenant.slug}: 2 questions indexed" in report, report
    assert f"rebuilt 1 of 1 knowledge bases ({len(HANDBOOK)} chunks)" in report, report

    assert top_ten(api_client, knowledge_base.pk) == before
    assert api_client.get("/api/health/").json()["components"]["milvus"]["status"] == "ok"
    again = ask(api_client, conversation_id, QUERIES[0])
    assert again["dedup"]["action"] == "served_cached", again["dedup"]
    assert again["dedup"]["matched_turn_id"] == first["turn_id"]
    # In retrieve mode: what the turn shows, whatever the excluded search leaves (the extractive answer may show
    # nothing from it).
    fresh = ask(api_client, conversation_id, QUERIES[1], mode="retrieve")
    assert fresh["dedup"]["action"] == "answered" and fresh["sources"]
    assert written(tenant)[0] == kept[0] + 2
