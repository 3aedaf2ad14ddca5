"""Bulk documents, split client chunks, chunk edits and metadata filters end to end: through the API, a real Celery
worker, Redis broker and `milvus-lite server` (and PostgreSQL under CI)."""

from __future__ import annotations

import uuid

import pytest

from retrieval import milvus, tasks
from retrieval.models import Chunk, Document, DocumentStatus, IngestQueueMarker, TextIndexStatus
from retrieval.services import documents_recover_stalled
from tests.retrieval.factories import kb_make
from tests.retrieval.test_ingestion_integration import vector_count, wait_final
from tests.services import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TOPICS = ["volcano", "glacier", "desert", "coral reef", "rainforest", "tundra", "savanna", "wetland"]


def bulk(client, kb, documents: list) -> dict:
    response = client.post(f"/api/v1/knowledge-bases/{kb.pk}/documents/bulk/", {"documents": documents}, format="json")
    assert response.status_code == 202, response.content
    return response.json()


def test_a_thousand_documents_in_two_requests_are_all_indexed_by_one_task_each(
    api_client, tenant, celery_worker_process, monkeypatch
):
    sent: list[int] = []
    real_delay = tasks.documents_index_batch.delay

    def counted(ids, tenant_id, **kwargs):
        sent.append(len(ids))
        return real_delay(ids, tenant_id, **kwargs)

    monkeypatch.setattr(tasks.documents_index_batch, "delay", counted)
    kb = kb_make(tenant, name=f"bulk-{uuid.uuid4().hex[:6]}")
    ids = []
    for start in (0, 500):
        body = bulk(
            api_client,
            kb,
            [
                {"text": f"Note {n} on the {TOPICS[n % len(TOPICS)]}.", "external_id": f"n{n}", "metadata": {"n": n}}
                for n in range(start, start + 500)
            ],
        )
        assert body["created"] == 500
        ids += [result["document"]["id"] for result in body["results"]]
    assert sent == [500, 500]
    rows = wait_final(tenant, ids, celery_worker_process)
    assert {row.status for row in rows.values()} == {DocumentStatus.INDEXED}
    assert vector_count(kb) == 1000
    hits = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/search/",
        {"query": "Note 777 on the savanna", "metadata_filter": {"n": 777}},
        format="json",
    ).json()["results"]
    assert [hit["document_external_id"] for hit in hits] == ["n777"]


def test_a_bulk_batch_whose_task_was_lost_is_recovered_by_the_stalled_document_sweep(
    api_client, tenant, celery_worker_process, monkeypatch, settings
):
    """The batch's one task never reached the broker (or its worker died): the documents stay queued, nothing is lost,
    and the minute's sweep queues them again once a worker has taken its queue marker (so the batch's message is not
    still waiting in the broker)."""
    monkeypatch.setattr(tasks.documents_index_batch, "delay", lambda *args, **kwargs: None)
    kb = kb_make(tenant, name=f"lost-{uuid.uuid4().hex[:6]}")
    body = bulk(api_client, kb, [{"text": f"Lost note {n}."} for n in range(20)])
    ids = [result["document"]["id"] for result in body["results"]]
    assert set(Document.objects.for_tenant(tenant).filter(pk__in=ids).values_list("status", flat=True)) == {"queued"}
    monkeypatch.undo()
    settings.INGEST_QUEUED_STALE_SECONDS = 0
    documents_recover_stalled()  # sends the marker: the batch's message might still wait in the broker
    sent_at = IngestQueueMarker.objects.get(pk=1).sent_at
    wait_for(
        lambda: IngestQueueMarker.objects.get(pk=1).seen_at_sent == sent_at,
        timeout=60,
        what="the worker to take the queue marker",
        worker=celery_worker_process,
    )
    assert documents_recover_stalled() >= 20
    rows = wait_final(tenant, ids, celery_worker_process)
    assert {row.status for row in rows.values()} == {DocumentStatus.INDEXED}


def test_an_oversize_client_chunk_is_split_and_its_pieces_are_found_by_search(
    api_client, tenant, celery_worker_process
):
    kb = kb_make(tenant, name=f"split-{uuid.uuid4().hex[:6]}", chunk_max_tokens=40)
    sentences = [
        "Mount Etna is an active stratovolcano on the east coast of Sicily.",
        "Glaciers in Patagonia calve icebergs into freshwater lakes.",
        "The Sahara receives less than a few centimetres of rain each year.",
        "Coral polyps build reefs from calcium carbonate over centuries.",
        "Emperor penguins breed during the Antarctic winter.",
    ]
    response = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/",
        {
            "external_id": "geo",
            "chunks": [
                {"text": "A short intro.", "external_id": "intro"},
                {"text": " ".join(sentences), "external_id": "abc"},
            ],
            "split_oversize_chunks": True,
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    document_id = response.json()["id"]
    (row,) = wait_final(tenant, [document_id], celery_worker_process).values()
    assert row.status == DocumentStatus.INDEXED, row.error_message
    external_ids = list(
        Chunk.objects.for_tenant(tenant)
        .filter(document_id=document_id)
        .order_by("position")
        .values_list("external_id", flat=True)
    )
    assert external_ids[0] == "intro" and len(external_ids) > 2
    assert external_ids[1:] == [f"abc#{n}" for n in range(1, len(external_ids))]
    hits = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/search/",
        {"query": "Where do emperor penguins breed?", "group_by_document": False, "limit": 3},
        format="json",
    ).json()["results"]
    assert hits[0]["external_id"].startswith("abc#") and "penguins" in hits[0]["text"]


def test_chunks_are_listed_edited_disabled_and_enabled_with_their_effect_on_search(
    api_client, tenant, celery_worker_process
):
    kb = kb_make(tenant, name=f"chunks-{uuid.uuid4().hex[:6]}")
    texts = [f"Paragraph {n} describes the {topic}." for n, topic in enumerate(TOPICS)]
    response = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/documents/",
        {"chunks": [{"text": text, "external_id": f"p{n}"} for n, text in enumerate(texts)]},
        format="json",
    )
    document_id = response.json()["id"]
    wait_final(tenant, [document_id], celery_worker_process)

    page = api_client.get(f"/api/v1/documents/{document_id}/chunks/", {"limit": 3, "offset": 2}).json()
    assert page["count"] == len(TOPICS)
    assert [chunk["position"] for chunk in page["results"]] == [2, 3, 4]
    assert [chunk["text"] for chunk in page["results"]] == texts[2:5]
    assert api_client.get(f"/api/v1/documents/{document_id}/chunks/", {"page": 2}).status_code == 400

    def chunk_hits(query: str) -> list[dict]:
        return api_client.post(
            f"/api/v1/knowledge-bases/{kb.pk}/search/",
            {"query": query, "group_by_document": False, "limit": len(TOPICS)},
            format="json",
        ).json()["results"]

    volcano = page["results"][0]  # position 2: the desert, edited into a note on volcanoes
    edited = api_client.patch(
        f"/api/v1/chunks/{volcano['id']}/", {"text": "Lava flows from erupting volcanoes in Iceland."}, format="json"
    )
    assert edited.status_code == 200, edited.content
    assert edited.json()["content_hash"] != volcano["content_hash"]
    top = chunk_hits("Icelandic lava eruption")[0]
    assert (top["chunk_id"], top["text"]) == (volcano["id"], "Lava flows from erupting volcanoes in Iceland.")
    # The edit is the document's source from now on: indexing it again keeps it, and the chunk's id.
    reindexed = api_client.post(f"/api/v1/documents/{document_id}/reindex/")
    assert reindexed.status_code == 202
    wait_final(tenant, [document_id], celery_worker_process)
    assert Chunk.objects.for_tenant(tenant).get(pk=volcano["id"]).text.startswith("Lava flows")

    disabled = api_client.patch(f"/api/v1/chunks/{volcano['id']}/", {"enabled": False}, format="json")
    assert disabled.status_code == 200 and disabled.json()["enabled"] is False
    assert volcano["id"] not in [hit["chunk_id"] for hit in chunk_hits("Icelandic lava eruption")]
    assert vector_count(kb) == len(TOPICS) - 1
    # Indexing the document again keeps the chunk disabled and without a vector.
    api_client.post(f"/api/v1/documents/{document_id}/reindex/")
    wait_final(tenant, [document_id], celery_worker_process)
    assert vector_count(kb) == len(TOPICS) - 1
    assert Chunk.objects.for_tenant(tenant).get(pk=volcano["id"]).enabled is False

    enabled = api_client.patch(f"/api/v1/chunks/{volcano['id']}/", {"enabled": True}, format="json")
    assert enabled.status_code == 200 and enabled.json()["enabled"] is True
    assert chunk_hits("Icelandic lava eruption")[0]["chunk_id"] == volcano["id"]
    assert vector_count(kb) == len(TOPICS)

    too_long = api_client.patch(f"/api/v1/chunks/{volcano['id']}/", {"text": "word " * 300}, format="json")
    assert too_long.status_code == 400 and "300 word pieces" in too_long.json()["message"]
    assert api_client.patch(f"/api/v1/chunks/{volcano['id']}/", {"colour": "red"}, format="json").status_code == 400
    assert Chunk.objects.for_tenant(tenant).get(pk=volcano["id"]).text.startswith("Lava flows")


def test_metadata_filters_narrow_search_and_conversations_and_follow_a_patch(
    api_client, other_api_client, tenant, other_tenant, celery_worker_process
):
    kb = kb_make(tenant, name=f"meta-{uuid.uuid4().hex[:6]}")
    docs = {
        "en-a": ("The warranty covers the battery for two years.", {"lang": "en", "product": "a"}),
        "en-b": ("The warranty covers the screen for one year.", {"lang": "en", "product": "b"}),
        "de-a": ("Die Garantie deckt den Akku zwei Jahre lang ab.", {"lang": "de", "product": "a"}),
        "en-c": ("The warranty covers the charger for six months.", {"lang": "en", "product": "c"}),
    }
    body = bulk(
        api_client,
        kb,
        [{"text": text, "external_id": key, "metadata": metadata} for key, (text, metadata) in docs.items()],
    )
    ids = {result["document"]["external_id"]: result["document"]["id"] for result in body["results"]}
    # The other tenant holds the same texts under the same metadata: no filter of ours may reach them.
    their_kb = kb_make(other_tenant, name=f"meta-theirs-{uuid.uuid4().hex[:6]}")
    theirs = bulk(
        other_api_client,
        their_kb,
        [{"text": text, "external_id": key, "metadata": metadata} for key, (text, metadata) in docs.items()],
    )
    wait_final(tenant, list(ids.values()), celery_worker_process)
    wait_final(other_tenant, [r["document"]["id"] for r in theirs["results"]], celery_worker_process)

    def found(metadata_filter: dict | None) -> set[str]:
        payload = {"query": "How long is the warranty?", "limit": 10}
        if metadata_filter is not None:
            payload["metadata_filter"] = metadata_filter
        response = api_client.post(f"/api/v1/knowledge-bases/{kb.pk}/search/", payload, format="json")
        assert response.status_code == 200, response.content
        hits = response.json()["results"]
        assert {hit["document_id"] for hit in hits} <= set(ids.values())  # never one of the other tenant's
        return {hit["document_external_id"] for hit in hits}

    assert found(None) == set(docs)
    assert found({"lang": "en"}) == {"en-a", "en-b", "en-c"}
    assert found({"lang": "en", "product": ["a", "b"]}) == {"en-a", "en-b"}
    assert found({"product": ["a"], "lang": "de"}) == {"de-a"}
    assert found({"lang": "fr"}) == set()
    refused = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/search/",
        {"query": "warranty", "metadata_filter": {'lang"] == "en" or tenant_id != "': "x"}},
        format="json",
    )
    assert refused.status_code == 400 and "metadata_filter" in refused.json()["extra"]["fields"]

    # A conversation carries its filter into every turn's search.
    conversation = api_client.post(
        "/api/v1/conversations/",
        {"knowledge_base": kb.pk, "metadata_filter": {"lang": "en", "product": "b"}},
        format="json",
    )
    assert conversation.status_code == 201, conversation.content
    assert conversation.json()["metadata_filter"] == {"lang": "en", "product": "b"}
    turn = api_client.post(
        f"/api/v1/conversations/{conversation.json()['id']}/messages/",
        {"question": "How long is the battery warranty?"},
        format="json",
    )
    assert turn.status_code == 200, turn.content
    assert {source["document_external_id"] for source in turn.json()["sources"]} == {"en-b"}

    # New metadata is stored at once and reaches the vectors once the document is indexed again.
    patched = api_client.patch(
        f"/api/v1/documents/{ids['en-c']}/", {"metadata": {"lang": "en", "product": "b"}}, format="json"
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["metadata"] == {"lang": "en", "product": "b"}
    wait_final(tenant, [ids["en-c"]], celery_worker_process)
    assert found({"product": "b"}) == {"en-b", "en-c"}
    assert api_client.patch(f"/api/v1/documents/{ids['en-c']}/", {"meta": {}}, format="json").status_code == 400


def test_a_metadata_filter_on_a_collection_made_before_metadata_is_a_409(api_client, tenant, milvus_server, settings):
    from pymilvus import DataType, MilvusClient

    name = f"kb_before_metadata_{uuid.uuid4().hex[:8]}"
    client = MilvusClient(uri=milvus_server.uri)
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("chunk_id", DataType.INT64, is_primary=True)
    schema.add_field("tenant_id", DataType.VARCHAR, max_length=64, is_partition_key=True)
    schema.add_field("knowledge_base_id", DataType.INT64)
    schema.add_field("doc_id", DataType.INT64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=384)
    index = client.prepare_index_params()
    index.add_index(
        field_name="vector", index_type="HNSW", metric_type="COSINE", params={"M": 16, "efConstruction": 64}
    )
    client.create_collection(collection_name=name, schema=schema, index_params=index)
    settings.MILVUS_COLLECTION = name
    milvus.reset()
    try:
        kb = kb_make(tenant, name="old")
        # A knowledge base made before full text: its vectors are in the old collection until it is moved over.
        kb.text_index = TextIndexStatus.MISSING
        kb.retrieval_mode = "semantic"
        kb.save(update_fields=["text_index", "retrieval_mode"])
        url = f"/api/v1/knowledge-bases/{kb.pk}/search/"
        assert api_client.post(url, {"query": "anything"}, format="json").status_code == 200
        refused = api_client.post(url, {"query": "anything", "metadata_filter": {"lang": "en"}}, format="json")
        assert refused.status_code == 409
        assert refused.json()["extra"]["code"] == "metadata_filter_unsupported"
        assert "text_index" in refused.json()["message"]
    finally:
        client.drop_collection(name)
        milvus.reset()
