"""A stored answer is served only to a question asked under an equal metadata filter: through the REST API on real
Redis and `milvus-lite server` (and PostgreSQL under CI), in every scope that reaches across conversations, and on
a question collection made before questions carried their filter's key."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.core.management import call_command

from conversations.models import Turn
from retrieval import milvus, question_index, vectorstore
from retrieval.embeddings import model_id
from retrieval.metadata import metadata_filter_key
from tests.conversations.helpers import HANDBOOK, indexed_kb, indexed_question_turn_ids
from tests.conversations.test_api import ask, set_policy

pytestmark = pytest.mark.django_db

# The same question has a different answer in each edition: a cloud answer served to a server user is wrong.
EDITIONS = {
    **HANDBOOK,
    "password": [
        "To reset your password in the cloud edition, open Settings, choose Security and click Reset password. "
        "A reset link is emailed to you and stays valid for 30 minutes."
    ],
    "password-server": [
        "To reset your password on a self-hosted server, ask an administrator: the server console resets it under "
        "Users, and no email is sent."
    ],
}
METADATA = {
    external_id: {"lang": "en", "edition": "server" if external_id == "password-server" else "cloud"}
    for external_id in EDITIONS
}
CLOUD = {"lang": "en", "edition": "cloud"}
SERVER = {"lang": "en", "edition": "server"}
# Written otherwise (keys in another order, a list of one value, a value twice), the same filter as CLOUD.
CLOUD_AGAIN = {"edition": ["cloud"], "lang": ["en", "en"]}


@pytest.fixture
def kb(redis_available, milvus_server, tenant):
    return indexed_kb(tenant, EDITIONS, metadata=METADATA)


def start(client, kb, *, metadata_filter: dict | None, user_id: str = "u1") -> int:
    body = {"knowledge_base": kb.pk, "user_id": user_id}
    if metadata_filter is not None:
        body["metadata_filter"] = metadata_filter
    response = client.post("/api/v1/conversations/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def sources_of(body: dict) -> set[str]:
    return {source["document_external_id"] for source in body["sources"]}


@pytest.mark.parametrize("scope", ["user", "tenant"])
def test_an_answer_found_under_one_filter_is_served_only_under_an_equal_filter(api_client, tenant, kb, scope):
    set_policy(tenant, scope=scope)
    cloud = ask(api_client, start(api_client, kb, metadata_filter=CLOUD), "How do I reset my password?")
    assert cloud["dedup"]["action"] == "answered" and "password" in sources_of(cloud)
    assert "password-server" not in sources_of(cloud)

    server = ask(api_client, start(api_client, kb, metadata_filter=SERVER), "How can I reset my password?")
    assert server["dedup"]["action"] == "answered", server["dedup"]
    assert sources_of(server) == {"password-server"}

    unfiltered = ask(api_client, start(api_client, kb, metadata_filter=None), "How can I reset my password?")
    assert unfiltered["dedup"]["action"] == "answered", unfiltered["dedup"]

    again = ask(api_client, start(api_client, kb, metadata_filter=CLOUD_AGAIN), "How can I reset my password?")
    assert again["dedup"]["action"] == "served_cached", again["dedup"]
    assert again["dedup"]["matched_turn_id"] == cloud["turn_id"] and again["answer"] == cloud["answer"]

    # And the other way round: the unfiltered answer is the one an unfiltered question is served.
    plain = ask(api_client, start(api_client, kb, metadata_filter=None), "How do I reset my password?")
    assert plain["dedup"]["action"] == "served_cached", plain["dedup"]
    assert plain["dedup"]["matched_turn_id"] == unfiltered["turn_id"]

    keys = dict(
        Turn.objects.for_tenant(tenant)
        .filter(pk__in=[cloud["turn_id"], server["turn_id"], unfiltered["turn_id"], again["turn_id"]])
        .values_list("pk", "metadata_filter_key")
    )
    assert keys[cloud["turn_id"]] == keys[again["turn_id"]] == metadata_filter_key(CLOUD) != ""
    assert keys[server["turn_id"]] == metadata_filter_key(SERVER)
    assert keys[unfiltered["turn_id"]] == ""


def test_a_conversation_keeps_the_filter_it_started_with(api_client, tenant, kb):
    """Session scope compares a conversation's own turns only, which all searched under its filter: the filter cannot
    be changed once the conversation has started."""
    conversation_id = start(api_client, kb, metadata_filter=CLOUD)
    response = api_client.patch(f"/api/v1/conversations/{conversation_id}/", {"metadata_filter": SERVER}, format="json")
    assert response.status_code == 400, response.content
    assert api_client.get(f"/api/v1/conversations/{conversation_id}/").json()["metadata_filter"] == CLOUD


def test_a_question_collection_made_before_filter_keys_never_serves_across_filters_and_is_rebuilt_with_them(
    api_client, tenant, redis_available, milvus_server, settings
):
    from pymilvus import DataType, MilvusClient

    settings.MILVUS_COLLECTION = f"kb_before_keys_{uuid.uuid4().hex[:8]}"
    milvus.reset()
    client = MilvusClient(uri=milvus_server.uri)
    legacy = question_index.question_collection_name(model=model_id())
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("turn_id", DataType.INT64, is_primary=True)
    schema.add_field("tenant_id", DataType.VARCHAR, max_length=64, is_partition_key=True)
    schema.add_field("knowledge_base_id", DataType.INT64)
    schema.add_field("created_ts", DataType.INT64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=384)
    index = client.prepare_index_params()
    index.add_index(
        field_name="vector", index_type="HNSW", metric_type="COSINE", params={"M": 16, "efConstruction": 64}
    )
    client.create_collection(collection_name=legacy, schema=schema, index_params=index)
    try:
        kb = indexed_kb(tenant, EDITIONS, metadata=METADATA)
        set_policy(tenant, scope="tenant")
        cloud = ask(api_client, start(api_client, kb, metadata_filter=CLOUD), "How do I reset my password?")
        assert indexed_question_turn_ids(tenant, kb) == {cloud["turn_id"]}  # the old collection, without its key
        assert not question_index.question_collection_keyed(legacy)
        server = ask(api_client, start(api_client, kb, metadata_filter=SERVER), "How can I reset my password?")
        assert server["dedup"]["action"] == "answered", server["dedup"]
        assert sources_of(server) == {"password-server"}

        out = StringIO()
        call_command("milvus_rebuild", questions=True, stdout=out, stderr=StringIO())
        assert f"{legacy}: made again with each question's metadata filter key" in out.getvalue()
        assert question_index.question_collection_keyed(legacy)
        assert indexed_question_turn_ids(tenant, kb) == {cloud["turn_id"], server["turn_id"]}
        rows = client.query(
            collection_name=legacy,
            filter=question_index.question_filter_build(tenant_id=tenant.pk, knowledge_base_id=kb.pk),
            output_fields=["turn_id", question_index.QUESTION_FILTER_FIELD],
        )
        assert {row["turn_id"]: row[question_index.QUESTION_FILTER_FIELD] for row in rows} == {
            cloud["turn_id"]: metadata_filter_key(CLOUD),
            server["turn_id"]: metadata_filter_key(SERVER),
        }

        for metadata_filter, origin in ((CLOUD_AGAIN, cloud), (SERVER, server)):
            again = ask(
                api_client, start(api_client, kb, metadata_filter=metadata_filter), "How could I reset my password?"
            )
            assert again["dedup"]["action"] == "served_cached", again["dedup"]
            assert again["dedup"]["matched_turn_id"] == origin["turn_id"]
        assert (
            ask(api_client, start(api_client, kb, metadata_filter=None), "How could I reset my password?")["dedup"][
                "action"
            ]
            == "answered"
        )
        out = StringIO()
        call_command("milvus_rebuild", questions=True, stdout=out, stderr=StringIO())
        assert "made again" not in out.getvalue()  # once is enough
    finally:
        for name in vectorstore.deployment_collection_names():
            client.drop_collection(name)
        milvus.reset()
