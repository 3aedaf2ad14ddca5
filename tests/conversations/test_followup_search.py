"""A follow-up's search through the turn pipeline on the real services (Redis, `milvus-lite server`): its BM25 words
are its own and those of the question it leans on (`search_query.search_query_build`), its vector is its own, and
grouping, exclusion and the relax rule hold as for any turn."""

from __future__ import annotations

import numpy as np
import pytest

from conversations.services import dedup_policy_update
from retrieval import vectorstore
from retrieval.embeddings import embed_query
from retrieval.models import RetrievalMode, TextAnalyzer
from tests.conversations.helpers import HANDBOOK, indexed_kb

pytestmark = pytest.mark.django_db

ERROR_CODE = "ZX-4471Q"
SUPPORT = {
    "network": ["When the gateway cannot reach the upstream server the request fails and is retried with backoff."],
    "codes": [f"The device reports {ERROR_CODE} when its battery calibration table is corrupt; reflash the table."],
    "printing": ["If the printer does not respond, check that it is switched on and has paper."],
    "power": ["The battery charges fully in two hours with the supplied adapter."],
}
ASKED = f"What does {ERROR_CODE} mean?"
FOLLOWUP = "How do I fix that?"  # none of its words is in any passage


@pytest.fixture
def services(redis_available, milvus_server):
    return milvus_server


def start(client, knowledge_base) -> int:
    response = client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base.pk}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def ask(client, conversation_id: int, question: str, **extra: object) -> dict:
    response = client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": question, **extra}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def searches(monkeypatch):
    """Every chunk search the turns send to the vector store, as sent (the real search runs)."""
    calls: list[dict] = []
    real = vectorstore.vectors_search

    def recording(**kwargs: object) -> list:
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(vectorstore, "vectors_search", recording)
    return calls


def test_a_follow_up_is_found_by_the_words_of_the_question_it_follows(api_client, tenant, services):
    knowledge_base = indexed_kb(tenant, SUPPORT, name="support-full-text", retrieval_mode=RetrievalMode.FULL_TEXT)
    dedup_policy_update(tenant=tenant, exclusion_enabled=False)
    conversation_id = start(api_client, knowledge_base)

    first = ask(api_client, conversation_id, ASKED)
    followup = ask(api_client, conversation_id, FOLLOWUP)

    assert first["sources"][0]["document_external_id"] == "codes"
    # Its own words find nothing by BM25; those of the question before it find the passage.
    assert followup["sources"] and followup["sources"][0]["document_external_id"] == "codes"


def test_in_hybrid_a_follow_ups_bm25_leg_reads_its_context_and_its_vector_is_its_own(
    api_client, tenant, services, searches
):
    # More documents than a turn shows: the follow-up finds enough once the first turn's are left out.
    knowledge_base = indexed_kb(
        tenant, {**HANDBOOK, **SUPPORT}, name="support-hybrid", retrieval_mode=RetrievalMode.HYBRID
    )
    conversation_id = start(api_client, knowledge_base)

    searched: list[set[str]] = []  # per turn, the texts its searches (a relaxed turn makes two) sent to BM25

    def turn(question: str) -> dict:
        before = len(searches)
        body = ask(api_client, conversation_id, question)
        searched.append({call["query_text"] for call in searches[before:]})
        return body

    first = turn(ASKED)
    assert turn("thanks")["dedup"]["intent"] == "thanks"  # names no topic: skipped
    followup_searches = len(searches)
    followup = turn(FOLLOWUP)
    standalone = turn("Why does the printer not respond to my jobs?")

    assert searched == [{ASKED}, set(), {f"{ASKED} {FOLLOWUP}"}, {"Why does the printer not respond to my jobs?"}]
    assert {call["mode"] for call in searches} == {RetrievalMode.HYBRID}
    np.testing.assert_allclose(searches[followup_searches]["query_vector"], embed_query(FOLLOWUP), atol=1e-5)
    # Exclusion and grouping as for any turn: what the first turn showed is left out, one place per document.
    shown_first = {s["document_id"] for s in first["sources"]}
    shown = [s["document_id"] for s in followup["sources"]]
    assert followup["dedup"]["excluded_count"] == len(shown_first) and followup["dedup"]["relaxed"] is False
    assert shown and not shown_first & set(shown) and len(shown) == len(set(shown))
    assert standalone["dedup"]["action"] == "answered"


def test_a_chinese_follow_up_is_searched_with_its_own_words(api_client, tenant, services, searches):
    knowledge_base = indexed_kb(
        tenant,
        {"tea": ["绿茶在中国有悠久的历史，龙井是最有名的一种。"], "weather": ["今天天气很好，我们下午去公园散步。"]},
        name="chinese-hybrid",
        text_analyzer=TextAnalyzer.CHINESE,
        retrieval_mode=RetrievalMode.HYBRID,
    )
    conversation_id = start(api_client, knowledge_base)

    ask(api_client, conversation_id, "龙井是什么？")
    ask(api_client, conversation_id, "公园在哪里？", force_refresh=True)

    # The second turn is relaxed (two documents, both shown): its two searches send the same text.
    assert list(dict.fromkeys(call["query_text"] for call in searches)) == ["龙井是什么？", "公园在哪里？"]
