"""A follow-up's search through the turn pipeline on the real services (Redis, `milvus-lite server`): in a hybrid
knowledge base it runs by vector alone (`search_query.search_mode_choose`), a question of its own stays fused, and
grouping, exclusion and the relax rule hold as for any turn."""

from __future__ import annotations

import pytest

from conversations.services import dedup_policy_update
from retrieval import embeddings, vectorstore
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
FOLLOWUP = "How do I fix that?"


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


def test_in_hybrid_a_follow_up_is_searched_by_its_vector_and_a_question_of_its_own_fused(
    api_client, tenant, services, searches
):
    # More documents than a turn shows: the follow-up finds enough once the first turn's are left out.
    knowledge_base = indexed_kb(
        tenant, {**HANDBOOK, **SUPPORT}, name="support-hybrid", retrieval_mode=RetrievalMode.HYBRID
    )
    conversation_id = start(api_client, knowledge_base)
    modes: list[set[str]] = []  # per turn, the modes its searches (a relaxed turn makes two) ran in

    def turn(question: str) -> dict:
        # What each turn shows, without an answer: the extractive answerer, which reads no history, cannot place "that"
        # and would show nothing for the follow-up (tests/conversations/test_answering.py).
        before = len(searches)
        body = ask(api_client, conversation_id, question, mode="retrieve")
        modes.append({call["mode"] for call in searches[before:]})
        return body

    first = turn(ASKED)
    assert turn("thanks")["dedup"]["intent"] == "thanks"  # small talk searches nothing
    followup = turn(FOLLOWUP)
    turn("Why does the printer not respond to my jobs?")

    assert modes == [{"hybrid"}, set(), {"semantic"}, {"hybrid"}]
    # Exclusion and grouping as for any turn: what the first turn showed is left out, one place per document.
    shown_first = {s["document_id"] for s in first["sources"]}
    shown = [s["document_id"] for s in followup["sources"]]
    assert followup["dedup"]["excluded_count"] == len(shown_first) and followup["dedup"]["relaxed"] is False
    assert shown and not shown_first & set(shown) and len(shown) == len(set(shown))
    assert first["sources"][0]["document_external_id"] == "codes"  # the exact term, found fused


def test_show_me_that_again_after_a_follow_up_searches_as_the_follow_up_did(api_client, tenant, services, searches):
    knowledge_base = indexed_kb(
        tenant, {**HANDBOOK, **SUPPORT}, name="support-hybrid-repeat", retrieval_mode=RetrievalMode.HYBRID
    )
    dedup_policy_update(tenant=tenant, exclusion_enabled=False)  # "show me that again" leaves nothing out either
    conversation_id = start(api_client, knowledge_base)
    ask(api_client, conversation_id, ASKED)
    followup = ask(api_client, conversation_id, FOLLOWUP)
    before = len(searches)

    again = ask(api_client, conversation_id, "show me that again")

    assert again["dedup"]["intent"] == "repeat"
    assert {call["mode"] for call in searches[before:]} == {"semantic"}
    assert [s["chunk_id"] for s in again["sources"]] == [s["chunk_id"] for s in followup["sources"]]


@pytest.mark.parametrize("mode", [RetrievalMode.FULL_TEXT, RetrievalMode.SEMANTIC])
def test_a_follow_up_in_a_knowledge_base_of_another_mode_is_searched_in_that_mode(
    api_client, tenant, services, searches, mode
):
    knowledge_base = indexed_kb(tenant, SUPPORT, name=f"support-{mode}", retrieval_mode=mode)
    conversation_id = start(api_client, knowledge_base)

    ask(api_client, conversation_id, ASKED)
    ask(api_client, conversation_id, FOLLOWUP)

    assert {call["mode"] for call in searches} == {mode}


@pytest.mark.parametrize(
    ("model", "searched"),
    [
        (embeddings.USE_MODEL_NAME, "hybrid"),
        # The bundled model reads Chinese as unknown pieces: BM25 alone ranks such a question (never its vector).
        ("all-MiniLM-L6-v2", "full_text"),
    ],
)
def test_a_chinese_follow_up_keeps_the_knowledge_bases_mode(api_client, tenant, services, searches, model, searched):
    knowledge_base = indexed_kb(
        tenant,
        {"tea": ["绿茶在中国有悠久的历史，龙井是最有名的一种。"], "weather": ["今天天气很好，我们下午去公园散步。"]},
        name="chinese-hybrid",
        text_analyzer=TextAnalyzer.CHINESE,
        retrieval_mode=RetrievalMode.HYBRID,
        embedding_model=model,
    )
    conversation_id = start(api_client, knowledge_base)

    ask(api_client, conversation_id, "龙井是什么？")
    ask(api_client, conversation_id, "它在哪里？", force_refresh=True)  # "where is it?"

    assert {call["mode"] for call in searches} == {searched}
