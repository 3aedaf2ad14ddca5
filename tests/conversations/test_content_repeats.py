"""A passage held by two documents (the same file uploaded twice, a paragraph copied into another page) is shown
once: never twice in one result list, and not again as news in the turns that exclusion covers. Pure function, then
through the API on real PostgreSQL, Redis and `milvus-lite server`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conversations.services import dedup_policy_update
from conversations.turn import sources
from retrieval import vectorstore
from retrieval.models import Chunk
from retrieval.selectors import CONTENT_REPEAT_SLACK, ChunkHit, hits_of_distinct_content
from tests.conversations.helpers import HANDBOOK, indexed_kb

RESET = HANDBOOK["password"][0]


def hit(chunk_id: int, content_hash: str, document_id: int | None = None) -> ChunkHit:
    return ChunkHit(
        chunk_id=chunk_id,
        document_id=document_id or chunk_id,
        score=1.0 - chunk_id / 100,
        text=content_hash,
        position=0,
        token_count=3,
        content_hash=content_hash,
        external_id=None,
        document_external_id=None,
        document_title="",
    )


def test_a_copy_of_a_better_hit_or_of_a_shown_passage_is_dropped_and_the_order_kept():
    hits = [hit(1, "a"), hit(2, "b"), hit(3, "a"), hit(4, "c"), hit(5, "b"), hit(6, "d")]
    assert [h.chunk_id for h in hits_of_distinct_content(hits)] == [1, 2, 4, 6]
    assert [h.chunk_id for h in hits_of_distinct_content(hits, shown_content_hashes={"b", "z"})] == [1, 4, 6]
    assert hits_of_distinct_content([], shown_content_hashes={"a"}) == []


@pytest.fixture
def twins_kb(redis_available, milvus_server, tenant):
    """The handbook with its password page uploaded a second time, under another name."""
    return indexed_kb(tenant, {**HANDBOOK, "password-copy": [RESET]}, name="handbook-with-a-copy")


def texts(body: dict) -> list[str]:
    return [source["text"] for source in body["sources"]]


def conversation_asker(api_client, knowledge_base) -> Callable[[str], dict]:
    """`ask(question)` in a new conversation on `knowledge_base`: the turn's body, once it answered 200."""
    conversation_id = api_client.post(
        "/api/v1/conversations/", {"knowledge_base": knowledge_base.pk}, format="json"
    ).json()["id"]

    def ask(question: str) -> dict:
        response = api_client.post(
            f"/api/v1/conversations/{conversation_id}/messages/", {"question": question}, format="json"
        )
        assert response.status_code == 200, response.content
        return response.json()

    return ask


@pytest.mark.django_db
def test_a_search_shows_a_passage_held_by_two_documents_once_and_still_fills_its_limit(api_client, twins_kb):
    response = api_client.post(
        f"/api/v1/knowledge-bases/{twins_kb.pk}/search/",
        {"query": "How do I reset my password?", "limit": 3},
        format="json",
    )
    assert response.status_code == 200, response.content
    results = [result["text"] for result in response.json()["results"]]
    assert results[0] == RESET
    assert len(results) == len(set(results)) == 3


@pytest.mark.django_db
@pytest.mark.parametrize("granularity", ["doc", "chunk"])
def test_the_turn_after_does_not_show_the_copy_of_a_passage_as_news(api_client, tenant, twins_kb, granularity):
    dedup_policy_update(tenant=tenant, granularity=granularity, min_results=1)
    ask = conversation_asker(api_client, twins_kb)
    first = ask("How do I reset my password?")
    assert texts(first).count(RESET) == 1
    second = ask("Where is the password reset link sent, and how long does it stay valid?")
    assert second["dedup"]["action"] == "answered" and second["dedup"]["relaxed"] is False
    assert RESET not in texts(second)
    assert not set(texts(first)) & set(texts(second))


@pytest.mark.django_db
@pytest.mark.parametrize("scope", ["session", "off"])
def test_the_shown_texts_come_from_the_rows_read_while_the_question_is_embedded(
    api_client, tenant, twins_kb, monkeypatch, scope
):
    """The exclusion window's chunks are read with the stored answers' sources, beside the embedding: the search's
    excluded texts need no query of their own, whether or not the policy looks for repeated questions."""
    dedup_policy_update(tenant=tenant, granularity="doc", min_results=1, scope=scope)
    ask = conversation_asker(api_client, twins_kb)
    first = ask("How do I reset my password?")
    assert RESET in texts(first)

    def no_query_of_its_own(**kwargs):
        raise AssertionError(f"the excluded texts were read on their own: {kwargs}")

    monkeypatch.setattr(sources, "chunk_content_hashes", no_query_of_its_own)
    second = ask("Where is the password reset link sent, and how long does it stay valid?")
    assert second["dedup"]["action"] == "answered" and second["dedup"]["excluded_count"] > 0
    assert RESET not in texts(second)


@pytest.mark.django_db
def test_the_hashes_of_chunks_the_rows_read_ahead_miss_are_read_and_disabled_ones_count(tenant, twins_kb):
    chunks = list(Chunk.objects.for_tenant(tenant).filter(knowledge_base=twins_kb).order_by("pk")[:3])
    chunks[0].enabled = False
    chunks[0].save(update_fields=["enabled"])
    ids = [chunk.pk for chunk in chunks]
    ahead = sources.stored_source_rows_read(tenant=tenant, chunk_ids=ids[:2])
    assert set(ahead.rows) == {ids[1]}  # a sources check never cites a disabled chunk ...
    assert set(ahead.hashes) == set(ids[:2])  # ... but its text was shown all the same
    expected = {chunk.content_hash for chunk in chunks}
    assert sources.content_hashes_of(tenant=tenant, chunk_ids=ids[:2], read_ahead=ahead) == expected - {
        chunks[2].content_hash
    }
    assert sources.content_hashes_of(tenant=tenant, chunk_ids=ids, read_ahead=ahead) == expected
    assert sources.content_hashes_of(tenant=tenant, chunk_ids=[*ids, 10**12], read_ahead=None) == expected
    assert sources.content_hashes_of(tenant=tenant, chunk_ids=[], read_ahead=ahead) == set()


def _limits_asked(monkeypatch) -> list[int]:
    """The `limit` of every search sent to Milvus from now on."""
    asked: list[int] = []
    real = vectorstore.vectors_search

    def counted(**kwargs):
        asked.append(kwargs["limit"])
        return real(**kwargs)

    monkeypatch.setattr(vectorstore, "vectors_search", counted)
    return asked


def _search(api_client, knowledge_base, limit: int = 3) -> list[str]:
    response = api_client.post(
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/",
        {"query": "How do I reset my password?", "limit": limit},
        format="json",
    )
    assert response.status_code == 200, response.content
    return [result["text"] for result in response.json()["results"]]


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_page_that_loses_a_copy_still_fills_its_limit_in_every_mode(api_client, twins_kb, monkeypatch, mode):
    twins_kb.retrieval_mode = mode
    twins_kb.save(update_fields=["retrieval_mode"])
    asked = _limits_asked(monkeypatch)
    results = _search(api_client, twins_kb)
    assert results[0] == RESET and len(results) == len(set(results)) == 3
    slack = 3 + CONTENT_REPEAT_SLACK
    # A vector search asks for its limit, then once more with the slack for the copy it dropped; a fused search
    # always brings the slack from each side.
    assert asked == ([3, slack] if mode == "semantic" else [slack])


@pytest.mark.django_db
def test_a_vector_search_that_drops_nothing_asks_milvus_once_for_its_limit(
    api_client, redis_available, milvus_server, tenant, monkeypatch
):
    knowledge_base = indexed_kb(tenant, retrieval_mode="semantic")
    asked = _limits_asked(monkeypatch)
    results = _search(api_client, knowledge_base)
    assert results[0] == RESET and len(results) == len(set(results)) == 3
    assert asked == [3]
