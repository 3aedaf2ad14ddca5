"""Conversations through the REST API on real Redis and `milvus-lite server` (and PostgreSQL under CI)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from conversations.models import (
    ConsumedItem,
    Conversation,
    DedupAction,
    DedupEvent,
    DedupPolicy,
    DedupScope,
    Granularity,
    Intent,
    Turn,
)
from conversations.services import dedup_policy_update
from conversations.turn.languages import NOTHING_EARLIER, REPLIES
from conversations.turn.state import hot_copy_writes_wait, state_key
from kbplatform.redis_client import redis_connection
from retrieval.models import Chunk
from tenants.scopes import SCOPE_ORDER, Scope
from tests.conftest import _client_for
from tests.conversations.helpers import indexed_kb
from tests.security.world import world_build

pytestmark = pytest.mark.django_db


@pytest.fixture
def services(redis_available, milvus_server):
    return milvus_server


@pytest.fixture
def kb(services, tenant):
    return indexed_kb(tenant)


def start(client, kb, user_id: str = "") -> int:
    response = client.post("/api/v1/conversations/", {"knowledge_base": kb.pk, "user_id": user_id}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def ask(client, conversation_id: int, question: str, **extra) -> dict:
    response = client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": question, **extra}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def set_policy(tenant, **fields) -> None:
    dedup_policy_update(tenant=tenant, **fields)


def test_new_tenant_is_seeded_with_policy_and_builtin_intents(tenant):
    assert DedupPolicy.objects.for_tenant(tenant).count() == 1
    assert set(Intent.objects.for_tenant(tenant).values_list("name", flat=True)) == {
        "greeting",
        "thanks",
        "repeat",
        "elaborate",
    }


def test_turn_answers_with_sources_and_writes_audit_event(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    body = ask(api_client, conversation_id, "How do I reset my password?")
    assert body["dedup"]["action"] == "answered"
    assert body["dedup"]["intent"] == "other"
    assert body["sources"][0]["document_external_id"] == "password"
    assert "[1]" in body["answer"]
    assert len({s["document_id"] for s in body["sources"]}) == len(body["sources"])  # grouped by document
    turn = Turn.objects.for_tenant(tenant).get(pk=body["turn_id"])
    assert turn.number == 1 and turn.context_tokens > 0
    assert sorted(turn.source_chunk_ids) == sorted(s["chunk_id"] for s in body["sources"])
    event = DedupEvent.objects.for_tenant(tenant).get(turn=turn)
    assert event.action == "answered" and event.threshold == DedupPolicy.objects.for_tenant(tenant).get().threshold


def test_turn_body_is_exactly_what_its_documented_serializer_says(api_client, kb):
    # The view builds the body by hand (cheaper than DRF serializing it); it must stay what the schema documents.
    from conversations.api.apis import ConversationMessageApi

    conversation_id = start(api_client, kb)
    for body in (
        ask(api_client, conversation_id, "How do I reset my password?"),
        ask(api_client, conversation_id, "How can I reset my password?"),
        ask(api_client, conversation_id, "thanks"),
    ):
        documented = ConversationMessageApi.OutputSerializer(body)
        assert documented.data == body
        assert set(body) == set(documented.fields)
        assert set(body["dedup"]) == set(documented.fields["dedup"].fields)
        for source in body["sources"]:
            assert set(source) == set(documented.fields["sources"].child.fields)


def test_repeated_question_is_served_from_the_stored_answer(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    second = ask(api_client, conversation_id, "How can I reset my password?")
    assert second["dedup"]["action"] == "served_cached"
    assert second["dedup"]["matched_turn_id"] == first["turn_id"]
    assert second["dedup"]["similarity"] >= DedupPolicy.objects.for_tenant(tenant).get().threshold
    assert second["answer"] == first["answer"]
    assert [s["chunk_id"] for s in second["sources"]] == [s["chunk_id"] for s in first["sources"]]
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=second["turn_id"])
    first_turn = Turn.objects.for_tenant(tenant).get(pk=first["turn_id"])
    assert event.tokens_saved == first_turn.context_tokens + first_turn.answer_tokens > 0


def test_with_the_head_switched_off_hits_are_decided_without_it(api_client, tenant, kb, settings):
    settings.DUPLICATE_HEAD = False
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    second = ask(api_client, conversation_id, "How can I reset my password?")
    assert second["dedup"]["action"] == "served_cached" and second["dedup"]["similarity"] >= 0.90
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=second["turn_id"])
    assert event.pair_probability is None and event.match_passes_checks is True
    settings.DUPLICATE_HEAD = True
    third = ask(api_client, conversation_id, "How can I reset my password?")
    assert DedupEvent.objects.for_tenant(tenant).get(turn_id=third["turn_id"]).pair_probability is not None


def test_without_the_head_the_audit_event_records_the_gate_the_decision_applied(api_client, tenant, kb, settings):
    """Without the duplicate head the cosine gate never sits below 0.90. A match at 0.89 is then refused as "below
    threshold", and the event must say so against the gate applied (0.90), not the policy's 0.76, which the recorded
    similarity is above."""
    settings.DUPLICATE_HEAD = False
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    body = ask(api_client, conversation_id, "How do I recover my password?")
    assert body["dedup"]["action"] == "answered" and body["dedup"]["reason"] == "below threshold"
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=body["turn_id"])
    assert DedupPolicy.objects.for_tenant(tenant).get().threshold < event.similarity < 0.90
    assert event.threshold == 0.90
    settings.DUPLICATE_HEAD = True
    with_head = ask(api_client, conversation_id, "How do I recover my password?")
    assert DedupEvent.objects.for_tenant(tenant).get(turn_id=with_head["turn_id"]).threshold == pytest.approx(0.76)


def test_next_turn_leaves_out_documents_already_shown(api_client, tenant, kb):
    set_policy(tenant, min_results=1)
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    shown = {s["document_id"] for s in first["sources"]}
    second = ask(api_client, conversation_id, "Where do I manage account security settings?")
    assert second["dedup"]["excluded_count"] == len(shown)
    assert second["dedup"]["relaxed"] is False
    assert not shown & {s["document_id"] for s in second["sources"]}
    assert ConsumedItem.objects.for_tenant(tenant).filter(kind="doc").count() == len(
        shown | {s["document_id"] for s in second["sources"]}
    )


def test_exclusion_relaxes_when_too_little_is_left(api_client, tenant, services):
    small = indexed_kb(
        tenant, {"a": ["Passwords are reset from the Security page."], "b": ["Plans are billed yearly."]}
    )
    set_policy(tenant, min_results=2)
    conversation_id = start(api_client, small)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    assert len(first["sources"]) == 2
    second = ask(api_client, conversation_id, "Which page resets passwords?")
    assert second["dedup"]["relaxed"] is True
    assert second["dedup"]["excluded_count"] == 2
    assert len(second["sources"]) == 2
    assert DedupEvent.objects.for_tenant(tenant).get(turn_id=second["turn_id"]).relaxed is True


def test_a_relaxed_turn_at_chunk_granularity_still_gives_each_document_one_place(api_client, tenant, services):
    """Chunk exclusion leaves the shown chunk of a document out and finds its other chunk; relaxing then fills from
    the unexcluded search, whose best chunk of that document is the one shown before. The merged list must stay
    grouped by document, as both searches are (it used to hold both chunks of the document)."""
    small = indexed_kb(
        tenant,
        {
            "a": ["Passwords are reset from the Security page.", "Password resets email a link valid for 30 minutes."],
            "b": ["Plans are billed yearly."],
        },
    )
    set_policy(tenant, granularity="chunk", min_results=3)
    conversation_id = start(api_client, small)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    again = ask(api_client, conversation_id, "How do I reset my password?", force_refresh=True)
    assert again["dedup"]["relaxed"] is True and again["dedup"]["excluded_count"] == len(first["sources"])
    documents = [s["document_id"] for s in again["sources"]]
    assert len(documents) == len(set(documents)) == 2
    # The novel chunk keeps its document's place; the relaxed fill adds only the other document.
    novel = {s["chunk_id"] for s in again["sources"]} - {s["chunk_id"] for s in first["sources"]}
    assert again["sources"][0]["chunk_id"] in novel


def test_repeat_intent_shows_the_same_passages_again(api_client, tenant, kb):
    set_policy(tenant, min_results=1)
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How much does the Team plan cost?")
    again = ask(api_client, conversation_id, "show me that again")
    assert again["dedup"]["intent"] == "repeat"
    assert again["dedup"]["excluded_count"] == 0
    assert [s["chunk_id"] for s in again["sources"]] == [s["chunk_id"] for s in first["sources"]]


def test_show_me_that_again_twice_or_after_thanks_shows_the_same_passages(api_client, tenant, kb):
    """A repeat searches with the question it stands for. A second "show me that again", or one after "thanks",
    stands for the same question as the first: it used to search with the words "show me that again" (or
    "thanks") themselves and show other passages."""
    set_policy(tenant, min_results=1)
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How much does the Team plan cost?")
    shown = [s["chunk_id"] for s in first["sources"]]
    assert [s["chunk_id"] for s in ask(api_client, conversation_id, "show me that again")["sources"]] == shown
    twice = ask(api_client, conversation_id, "show me that again")
    assert twice["dedup"]["intent"] == "repeat"
    assert [s["chunk_id"] for s in twice["sources"]] == shown
    assert ask(api_client, conversation_id, "thanks")["dedup"]["intent"] == "thanks"
    after_thanks = ask(api_client, conversation_id, "show me that again")
    assert [s["chunk_id"] for s in after_thanks["sources"]] == shown
    assert "12 dollars" in after_thanks["answer"]


def test_asking_for_an_answer_again_before_any_is_told_there_is_none(api_client, tenant, kb):
    """It searched its own words and said the knowledge base held nothing that answers them."""
    conversation_id = start(api_client, kb)
    for request in ("Can you explain that differently?", "show me that again"):
        body = ask(api_client, conversation_id, request)
        assert body["dedup"]["action"] == "bypassed" and body["dedup"]["reason"].endswith(": nothing earlier")
        assert body["answer"] == REPLIES["en"][NOTHING_EARLIER] and body["sources"] == []
    # Once a question names a topic, the request stands for it again.
    ask(api_client, conversation_id, "How much does the Team plan cost?")
    assert "12 dollars" in ask(api_client, conversation_id, "show me that again")["answer"]


def test_smalltalk_neither_retrieves_nor_dedups(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "hello")
    body = ask(api_client, conversation_id, "hello")
    assert body["dedup"]["action"] == "smalltalk" and body["dedup"]["intent"] == "greeting"
    assert body["sources"] == [] and body["answer"]


def test_force_refresh_and_elaborate_bypass_question_dedup(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    forced = ask(api_client, conversation_id, "How do I reset my password?", force_refresh=True)
    assert forced["dedup"]["action"] == "bypassed" and forced["dedup"]["matched_turn_id"] is None
    more = ask(api_client, conversation_id, "explain in more detail")
    assert more["dedup"]["intent"] == "elaborate" and more["dedup"]["action"] == "bypassed"


def test_stored_answer_is_not_served_once_its_sources_changed(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    Chunk.objects.for_tenant(tenant).filter(pk=first["sources"][0]["chunk_id"]).update(content_hash="changed")
    second = ask(api_client, conversation_id, "How can I reset my password?")
    assert second["dedup"]["action"] == "bypassed"
    assert second["dedup"]["reason"] == "sources changed"
    # The audit event says what happened: the head was asked and the match refused (not "not asked", "no match").
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=second["turn_id"])
    assert event.matched_turn_ref == first["turn_id"] and event.reason == "sources changed"
    assert event.pair_probability is not None and event.pair_probability > 0.5
    assert event.match_passes_checks is False


@pytest.mark.parametrize(
    "change", [{"text": "To reset a password, ask an administrator to send you a new link."}, {"enabled": False}]
)
def test_a_stored_answer_is_not_served_once_a_chunk_it_cites_is_edited_or_disabled(api_client, tenant, kb, change):
    """An edit through the chunk API changes the chunk's content hash, which the stored answer is checked against;
    a disabled chunk is no source at all. Either way the duplicate question is answered afresh."""
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    cited = first["sources"][0]["chunk_id"]
    response = api_client.patch(f"/api/v1/chunks/{cited}/", change, format="json")
    assert response.status_code == 200, response.content
    second = ask(api_client, conversation_id, "How can I reset my password?")
    assert second["dedup"]["action"] == "bypassed"
    assert second["dedup"]["reason"] == "sources changed"
    hits = api_client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/search/", {"query": "reset password link", "limit": 8}, format="json"
    ).json()["results"]
    shown = {hit["chunk_id"]: hit["text"] for hit in hits}
    if "text" in change:
        assert shown[cited] == change["text"]
    else:
        assert cited not in shown


def test_an_answer_that_found_nothing_is_not_served_once_the_knowledge_base_has_the_answer(
    api_client, tenant, services
):
    """Asked before the knowledge base held anything, the question got "I found nothing", which cites no source. Once
    a document is indexed, asking again must search it, not serve the empty answer (its sources never change, so
    the sources check alone let it be served for as long as the conversation lasted, or the TTL in user scope)."""
    from retrieval.embeddings import embed_texts
    from retrieval.models import Document, DocumentStatus, SourceKind
    from retrieval.services import chunk_vectors_upsert
    from tests.conversations.helpers import HANDBOOK, chunk_hash

    knowledge_base = indexed_kb(tenant, {}, name="filling up")
    conversation_id = start(api_client, knowledge_base)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    assert first["sources"] == [] and "nothing" in first["answer"]

    text = HANDBOOK["password"][0]
    document = Document.objects.create(
        tenant=tenant,
        knowledge_base=knowledge_base,
        title="password",
        source_kind=SourceKind.CHUNKS,
        status=DocumentStatus.INDEXED,
        chunk_count=1,
    )
    chunk = Chunk.objects.create(
        tenant=tenant,
        document=document,
        knowledge_base=knowledge_base,
        position=0,
        text=text,
        token_count=30,
        content_hash=chunk_hash(text),
    )
    chunk_vectors_upsert(chunks=[chunk], vectors=embed_texts([text]), dimension=knowledge_base.embedding_dimension)

    again = ask(api_client, conversation_id, "How do I reset my password?")
    assert again["dedup"]["action"] == "bypassed" and again["dedup"]["reason"] == "answer cites no source"
    assert [s["chunk_id"] for s in again["sources"]] == [chunk.pk]
    assert "Security" in again["answer"]


def test_shadow_mode_logs_the_hit_but_answers_fresh(api_client, tenant, kb):
    set_policy(tenant, shadow_mode=True)
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    second = ask(api_client, conversation_id, "How can I reset my password?")
    assert second["dedup"]["action"] == "answered"
    assert second["dedup"]["shadow_action"] == "served_cached"
    assert second["dedup"]["excluded_count"] >= 1  # decided...
    event = DedupEvent.objects.for_tenant(tenant).get(turn_id=second["turn_id"])
    assert event.action == "served_cached" and event.shadow is True
    shown_before = {s["chunk_id"] for s in first["sources"]}
    assert {s["chunk_id"] for s in second["sources"]} & shown_before  # ...but not applied


def test_retrieve_mode_then_client_answer_serves_later_duplicates(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    retrieved = ask(api_client, conversation_id, "How much does the Team plan cost?", mode="retrieve")
    assert retrieved["answer"] is None and retrieved["sources"]
    unanswered = ask(api_client, conversation_id, "What does the Team plan cost?")
    assert unanswered["dedup"]["action"] == "bypassed", unanswered["dedup"]
    assert unanswered["dedup"]["reason"] == "no stored answer", unanswered["dedup"]
    response = api_client.put(
        f"/api/v1/turns/{retrieved['turn_id']}/answer/", {"answer": "12 dollars per user per month."}, format="json"
    )
    assert response.status_code == 200 and response.json()["answer"] == "12 dollars per user per month."
    # A paraphrase the duplicate head serves; "...cost per month?" it refuses (p=0.70 under the cut): QQP, which
    # it learned from, counts an added "per month" as another question (docs/conversations.md).
    later = ask(api_client, conversation_id, "How much do we pay for the Team plan?")
    assert later["dedup"]["action"] == "served_cached"
    assert later["answer"] == "12 dollars per user per month."


def test_a_client_answer_to_a_turn_of_an_expired_conversation_is_gone_not_stored(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    retrieved = ask(api_client, conversation_id, "How much does the Team plan cost?", mode="retrieve")
    Conversation.objects.for_tenant(tenant).filter(pk=conversation_id).update(expires_at=timezone.now())
    response = api_client.put(
        f"/api/v1/turns/{retrieved['turn_id']}/answer/", {"answer": "12 dollars per user per month."}, format="json"
    )
    assert response.status_code == 410, response.content
    assert response.json()["extra"] == {"conversation": conversation_id}
    assert Turn.objects.for_tenant(tenant).get(pk=retrieved["turn_id"]).answer == ""


def test_client_answer_changed_while_redis_unreachable_is_never_served_stale(api_client, tenant, kb, monkeypatch):
    conversation_id = start(api_client, kb)
    retrieved = ask(api_client, conversation_id, "How much does the Team plan cost?", mode="retrieve")
    url = f"/api/v1/turns/{retrieved['turn_id']}/answer/"
    assert api_client.put(url, {"answer": "12 dollars per user per month."}, format="json").status_code == 200
    ask(api_client, conversation_id, "How do I reset my password?")  # rebuilds the hot copy, answer included
    key = state_key(tenant_id=tenant.pk, conversation_id=conversation_id)
    hot_copy_writes_wait()  # the copy is written behind the answer
    held = redis_connection().get(key)
    assert held is not None and b"12 dollars" in held  # the hot copy carries the first answer

    # The client corrects its answer while Redis is unreachable: the copy cannot be dropped and stays in Redis.
    monkeypatch.setattr(settings, "REDIS_URL", "redis://127.0.0.1:1/0")
    assert api_client.put(url, {"answer": "15 dollars per user per month."}, format="json").status_code == 200
    monkeypatch.undo()
    assert redis_connection().get(key) == held

    # Redis is back holding the old copy; it is recognised as older than the answer and rebuilt.
    again = ask(api_client, conversation_id, "How much do we pay for the Team plan?")
    assert again["dedup"]["action"] == "served_cached"
    assert again["answer"] == "15 dollars per user per month."


def test_a_corrected_client_answer_reaches_the_turns_that_served_the_earlier_one(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    retrieved = ask(api_client, conversation_id, "How much does the Team plan cost?", mode="retrieve")
    url = f"/api/v1/turns/{retrieved['turn_id']}/answer/"
    assert api_client.put(url, {"answer": "12 dollars per user per month."}, format="json").status_code == 200
    copy = ask(api_client, conversation_id, "How much do we pay for the Team plan?")
    assert copy["dedup"]["action"] == "served_cached" and copy["answer"] == "12 dollars per user per month."

    assert api_client.put(url, {"answer": "15 dollars per user per month."}, format="json").status_code == 200
    # Asked in the copy's own words, the nearest pair is the copy: it serves its origin's answer as it is now.
    again = ask(api_client, conversation_id, "How much do we pay for the Team plan?")
    assert again["dedup"]["action"] == "served_cached"
    assert again["dedup"]["matched_turn_id"] == copy["turn_id"]
    assert again["answer"] == "15 dollars per user per month."
    third = ask(api_client, conversation_id, "How much do we pay for the Team plan?")
    assert third["answer"] == "15 dollars per user per month."

    turns = {turn.pk: turn for turn in Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id)}
    # The copy keeps, as the record, what it served; every copy names the first answer as its origin (no chains).
    assert turns[copy["turn_id"]].answer == "12 dollars per user per month."
    assert {turns[t["turn_id"]].answer_origin_id for t in (copy, again, third)} == {retrieved["turn_id"]}
    assert turns[again["turn_id"]].matched_turn_id == copy["turn_id"]
    assert turns[retrieved["turn_id"]].answer_origin_id is None


def test_a_corrected_answer_reaches_a_copy_in_another_conversation_of_the_user(api_client, tenant, kb):
    set_policy(tenant, scope="user")
    retrieved = ask(
        api_client, start(api_client, kb, user_id="u1"), "How much does the Team plan cost?", mode="retrieve"
    )
    url = f"/api/v1/turns/{retrieved['turn_id']}/answer/"
    assert api_client.put(url, {"answer": "12 dollars per user per month."}, format="json").status_code == 200
    other = start(api_client, kb, user_id="u1")
    copy = ask(api_client, other, "How much do we pay for the Team plan?")
    assert copy["dedup"]["action"] == "served_cached" and copy["answer"] == "12 dollars per user per month."

    # The correction bumps the first conversation's revision only: the other one's hot copy still holds the copy.
    assert api_client.put(url, {"answer": "15 dollars per user per month."}, format="json").status_code == 200
    hot_copy_writes_wait()
    assert b"12 dollars" in redis_connection().get(state_key(tenant_id=tenant.pk, conversation_id=other))
    again = ask(api_client, other, "How much do we pay for the Team plan?")
    assert again["dedup"]["action"] == "served_cached"
    assert again["answer"] == "15 dollars per user per month."


def test_a_client_answer_to_a_turn_that_was_served_a_stored_answer_is_what_later_duplicates_get(api_client, tenant, kb):
    """A retrieve-mode turn can be served a stored answer; the client may still store its own answer to it. Later
    duplicates of that turn must get the client's answer, not the stored answer it was served (its origin)."""
    conversation_id = start(api_client, kb)
    retrieved = ask(api_client, conversation_id, "How much does the Team plan cost?", mode="retrieve")
    url = f"/api/v1/turns/{retrieved['turn_id']}/answer/"
    assert api_client.put(url, {"answer": "12 dollars per user per month."}, format="json").status_code == 200
    served = ask(api_client, conversation_id, "How much do we pay for the Team plan?", mode="retrieve")
    assert served["dedup"]["action"] == "served_cached" and served["answer"] == "12 dollars per user per month."

    url = f"/api/v1/turns/{served['turn_id']}/answer/"
    response = api_client.put(url, {"answer": "Ours: 13 dollars per user per month."}, format="json")
    assert response.status_code == 200
    later = ask(api_client, conversation_id, "How much do we pay for the Team plan?")
    assert later["dedup"]["action"] == "served_cached" and later["dedup"]["matched_turn_id"] == served["turn_id"]
    assert later["answer"] == "Ours: 13 dollars per user per month."
    assert Turn.objects.for_tenant(tenant).get(pk=later["turn_id"]).answer_origin_id == served["turn_id"]


def test_client_answer_only_for_retrieve_mode_and_not_empty(api_client, kb):
    conversation_id = start(api_client, kb)
    answered = ask(api_client, conversation_id, "How do I reset my password?")
    url = f"/api/v1/turns/{answered['turn_id']}/answer/"
    assert api_client.put(url, {"answer": "mine"}, format="json").status_code == 409
    assert api_client.put(url, {"answer": ""}, format="json").status_code == 400


def test_a_smalltalk_turn_refuses_a_client_answer(api_client, tenant, kb):
    """A greeting or a thanks asked in retrieve mode retrieves nothing and gets the canned reply: a client answer
    stored on it became a QA pair that no search stood behind. It is refused as other wrong-state turns are (409),
    and the turn keeps its reply."""
    conversation_id = start(api_client, kb)
    for question, intent in (("hello", "greeting"), ("thanks", "thanks")):
        turn = ask(api_client, conversation_id, question, mode="retrieve")
        assert (turn["dedup"]["action"], turn["dedup"]["intent"]) == ("smalltalk", intent)
        reply = Turn.objects.for_tenant(tenant).get(pk=turn["turn_id"]).answer
        response = api_client.put(
            f"/api/v1/turns/{turn['turn_id']}/answer/", {"answer": "12 dollars per user per month."}, format="json"
        )
        assert response.status_code == 409, response.content
        assert "small-talk" in response.json()["message"]
        assert Turn.objects.for_tenant(tenant).get(pk=turn["turn_id"]).answer == reply


def test_user_scope_finds_the_same_users_question_in_another_conversation(api_client, tenant, kb):
    set_policy(tenant, scope="user")
    first = ask(api_client, start(api_client, kb, user_id="u1"), "How do I reset my password?")
    other_user = ask(api_client, start(api_client, kb, user_id="u2"), "How can I reset my password?")
    assert other_user["dedup"]["action"] == "answered"
    same_user = ask(api_client, start(api_client, kb, user_id="u1"), "How can I reset my password?")
    assert same_user["dedup"]["action"] == "served_cached"
    assert same_user["dedup"]["matched_turn_id"] == first["turn_id"]


def test_tenant_scope_searches_questions_in_milvus_and_never_across_tenants(
    api_client, other_api_client, tenant, other_tenant, kb
):
    set_policy(tenant, scope="tenant")
    set_policy(other_tenant, scope="tenant")
    first = ask(api_client, start(api_client, kb, user_id="a"), "How do I reset my password?")
    other = ask(api_client, start(api_client, kb, user_id="b"), "How can I reset my password?")
    assert other["dedup"]["action"] == "served_cached" and other["dedup"]["matched_turn_id"] == first["turn_id"]
    other_kb = indexed_kb(other_tenant, name="other")
    foreign = ask(other_api_client, start(other_api_client, other_kb), "How can I reset my password?")
    assert foreign["dedup"]["action"] == "answered"


def test_followup_in_another_context_is_not_served(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How much does the Team plan cost?")
    ask(api_client, conversation_id, "and for admins?")
    ask(api_client, conversation_id, "How do I export reports as PDF?")
    again = ask(api_client, conversation_id, "and for admins?")
    assert again["dedup"]["action"] == "bypassed", again["dedup"]
    assert again["dedup"]["reason"] == "follow-up in another context", again["dedup"]


@pytest.mark.parametrize("followup", ["what's the discount?", "whats the discount", "what abt discounts"])
def test_followup_typed_with_a_contraction_or_in_chat_spelling_in_another_context_is_not_served(
    api_client, tenant, kb, followup
):
    """ "what's the discount?" names one thing, as "what is the discount?" does: it read as two ("what'" and
    "discount"), so it was no follow-up, and asked again after another question it was served the first's answer."""
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How much does the Team plan cost?")
    ask(api_client, conversation_id, followup)
    ask(api_client, conversation_id, "How do I export reports as PDF?")
    again = ask(api_client, conversation_id, followup)
    assert again["dedup"]["action"] == "bypassed", again["dedup"]
    assert again["dedup"]["reason"] == "follow-up in another context", again["dedup"]


def test_followup_in_the_same_context_is_served(api_client, tenant, kb):
    """The control of the test above: the same follow-up after the same question is served its stored answer."""
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How much does the Team plan cost?")
    first = ask(api_client, conversation_id, "and for admins?")
    ask(api_client, conversation_id, "How much does the Team plan cost?")
    again = ask(api_client, conversation_id, "and for admins?")
    assert again["dedup"]["action"] == "served_cached", again["dedup"]
    assert again["dedup"]["matched_turn_id"] == first["turn_id"]


@pytest.mark.parametrize("scope", ["session", "user", "tenant"])
def test_a_rephrasing_right_after_the_first_question_is_served_its_answer(api_client, tenant, kb, scope):
    """The first question of a conversation has no context of its own, and the follow-up guard refused a
    context-dependent rephrasing asked right after it ("follow-up in another context"): the question asked just
    before is the new one's own context. Asked after another question, the same rephrasing is still refused."""
    set_policy(tenant, scope=scope)
    conversation_id = start(api_client, kb, user_id="u1")
    first = ask(api_client, conversation_id, "How do I reset my password?")
    again = ask(api_client, conversation_id, "How can I reset my password then?")
    assert again["dedup"]["action"] == "served_cached", again["dedup"]
    assert again["dedup"]["matched_turn_id"] == first["turn_id"]
    assert again["answer"] == first["answer"]
    if scope == "session":
        later = start(api_client, kb, user_id="u1")
        ask(api_client, later, "How do I reset my password?")
        ask(api_client, later, "How much does the Team plan cost?")
        refused = ask(api_client, later, "How can I reset my password then?")
        assert refused["dedup"]["action"] == "bypassed", refused["dedup"]
        assert refused["dedup"]["reason"] == "follow-up in another context"


def test_followup_after_thanks_is_not_served_the_answer_given_in_another_context(api_client, tenant, kb):
    """The follow-up guard compares the questions asked just before; "thanks" before both "and for admins?" made the
    contexts look alike (the same words), so the second was served the first's answer, given about pricing, although
    it followed a question about exports. A follow-up after a question without a topic has no known context."""
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How much does the Team plan cost?")
    assert ask(api_client, conversation_id, "thanks")["dedup"]["intent"] == "thanks"
    ask(api_client, conversation_id, "and for admins?")
    ask(api_client, conversation_id, "How do I export reports as PDF?")
    ask(api_client, conversation_id, "thanks")
    again = ask(api_client, conversation_id, "and for admins?")
    assert again["dedup"]["action"] == "bypassed" and again["dedup"]["reason"] == "follow-up in another context"


def test_followup_after_thanks_is_not_served_across_conversations_in_user_scope(api_client, tenant, kb):
    set_policy(tenant, scope="user")
    first = start(api_client, kb, user_id="u1")
    ask(api_client, first, "How much does the Team plan cost?")
    ask(api_client, first, "thanks")
    ask(api_client, first, "and for admins?")
    second = start(api_client, kb, user_id="u1")
    ask(api_client, second, "How do I export reports as PDF?")
    ask(api_client, second, "thanks")
    again = ask(api_client, second, "and for admins?")
    assert again["dedup"]["action"] == "bypassed" and again["dedup"]["reason"] == "follow-up in another context"
    # A question that stands alone is still served across the user's conversations.
    standalone = ask(api_client, second, "How much does the Team plan cost?")
    assert standalone["dedup"]["action"] == "served_cached"


def test_redis_down_mid_conversation_loses_nothing(api_client, tenant, kb, monkeypatch):
    set_policy(tenant, min_results=0)  # never relax: every shown document must stay excluded
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    key = state_key(tenant_id=tenant.pk, conversation_id=conversation_id)
    hot_copy_writes_wait()
    assert redis_connection().get(key) is not None  # the hot copy is in Redis

    # Redis "stops": every connection now goes to a port nothing listens on.
    monkeypatch.setattr(settings, "REDIS_URL", "redis://127.0.0.1:1/0")
    during = ask(api_client, conversation_id, "How much does the Team plan cost?")
    assert during["dedup"]["action"] == "answered"
    repeat = ask(api_client, conversation_id, "How can I reset my password?")
    assert repeat["dedup"]["action"] == "served_cached" and repeat["dedup"]["matched_turn_id"] == first["turn_id"]

    # Redis is back with a copy two turns old: it is detected as stale and rebuilt from the database.
    monkeypatch.undo()
    after = ask(api_client, conversation_id, "Who can see the audit log?")
    shown = {s["document_id"] for s in first["sources"]} | {s["document_id"] for s in during["sources"]}
    assert after["dedup"]["excluded_count"] == len(shown)
    assert not shown & {s["document_id"] for s in after["sources"]}
    assert list(
        Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).values_list("number", flat=True)
    ) == [
        1,
        2,
        3,
        4,
    ]
    assert DedupEvent.objects.for_tenant(tenant).filter(conversation_ref=conversation_id).count() == 4


# --- cross-tenant and permissions -------------------------------------------------------------------------------------


def test_other_tenants_conversation_turn_and_knowledge_base_are_404(api_client, other_api_client, kb):
    conversation_id = start(api_client, kb)
    turn_id = ask(api_client, conversation_id, "How much does the Team plan cost?", mode="retrieve")["turn_id"]
    assert other_api_client.get(f"/api/v1/conversations/{conversation_id}/").status_code == 404
    response = other_api_client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": "hi"}, format="json"
    )
    assert response.status_code == 404
    assert other_api_client.put(f"/api/v1/turns/{turn_id}/answer/", {"answer": "x"}, format="json").status_code == 404
    response = other_api_client.post("/api/v1/conversations/", {"knowledge_base": kb.pk}, format="json")
    assert response.status_code == 404
    assert other_api_client.get("/api/v1/audit-events/").json()["count"] == 0
    assert other_api_client.get(f"/api/v1/audit-events/?conversation={conversation_id}").json()["count"] == 0


def test_conversation_detail_lists_turns(api_client, kb):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    ask(api_client, conversation_id, "thanks")
    body = api_client.get(f"/api/v1/conversations/{conversation_id}/").json()
    assert body["turn_count"] == 2
    assert [t["number"] for t in body["turns"]] == [1, 2]
    assert body["turns"][1]["decision"] == "smalltalk"


def test_a_key_bound_to_one_knowledge_base_reads_but_cannot_change_the_tenants_policy(tenant):
    """The policy applies to every knowledge base of the tenant; a key limited to one may not change it."""
    from retrieval.models import KnowledgeBase
    from tenants.services import api_key_create

    kb = KnowledgeBase.objects.create(tenant=tenant, name="one")
    _, raw = api_key_create(tenant=tenant, name="bound admin", scopes=SCOPE_ORDER, knowledge_base=kb)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw}")
    before = client.get("/api/v1/dedup-policy/")
    assert before.status_code == 200
    response = client.put("/api/v1/dedup-policy/", {"threshold": 0.5}, format="json")
    assert response.status_code == 403
    assert "cannot change the tenant's dedup policy" in response.json()["message"]
    assert client.get("/api/v1/dedup-policy/").json() == before.json()


def test_a_boolean_is_not_a_threshold(api_client, tenant):
    before = api_client.get("/api/v1/dedup-policy/").json()["threshold"]
    response = api_client.put("/api/v1/dedup-policy/", {"threshold": True}, format="json")
    assert response.status_code == 400 and "threshold" in response.json()["extra"]["fields"]
    assert api_client.get("/api/v1/dedup-policy/").json()["threshold"] == before


def test_dedup_policy_admin_only_and_validated(api_client, standard_api_client, other_api_client, tenant):
    assert standard_api_client.get("/api/v1/dedup-policy/").status_code == 403
    assert standard_api_client.put("/api/v1/dedup-policy/", {"threshold": 0.5}, format="json").status_code == 403
    policy = api_client.get("/api/v1/dedup-policy/").json()
    assert policy["scope"] == "session" and policy["allowlisted_intents"] == ["other"]
    response = api_client.put(
        "/api/v1/dedup-policy/", {"threshold": 0.8, "scope": "user", "exclusion_window": 3}, format="json"
    )
    assert response.status_code == 200 and response.json()["threshold"] == 0.8
    assert other_api_client.get("/api/v1/dedup-policy/").json()["threshold"] != 0.8
    from conversations.models import SettingsChange

    recorded = SettingsChange.objects.for_tenant(tenant).filter(field="threshold").get()
    assert recorded.new_value == 0.8 and api_client.api_key.prefix in recorded.changed_by_label
    empty = api_client.put("/api/v1/dedup-policy/", {}, format="json")
    assert empty.status_code == 400 and "at least one" in str(empty.json()["extra"])
    for bad in (
        {"threshold": 0},
        {"threshold": 1.01},
        {"question_window": 0},
        {"exclusion_window": 101},
        {"ttl_seconds": 0},
        {"allowlisted_intents": ["nope"]},
        {"scope": "planet"},
    ):
        response = api_client.put("/api/v1/dedup-policy/", bad, format="json")
        assert response.status_code == 400, bad
        assert response.json()["extra"]["fields"], bad
    assert DedupPolicy.objects.for_tenant(tenant).get().threshold == 0.8


def test_audit_events_filter(api_client, kb):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    ask(api_client, conversation_id, "How can I reset my password?")
    ask(api_client, conversation_id, "hello")
    assert api_client.get("/api/v1/audit-events/").json()["count"] == 3
    cached = api_client.get("/api/v1/audit-events/?action=served_cached").json()
    assert cached["count"] == 1 and cached["results"][0]["similarity"] >= 0.8
    # The bundled model's head scored the served pair; the first turn had nothing to match.
    assert cached["results"][0]["match_passes_checks"] is True and cached["results"][0]["pair_probability"] > 0.5
    first = api_client.get("/api/v1/audit-events/?action=answered").json()["results"][0]
    assert first["match_passes_checks"] is None and first["pair_probability"] is None
    assert api_client.get("/api/v1/audit-events/?similarity_min=0.999").json()["count"] == 0
    assert api_client.get(f"/api/v1/audit-events/?conversation={conversation_id}").json()["count"] == 3
    assert api_client.get("/api/v1/audit-events/?created_from=2999-01-01T00:00:00Z").json()["count"] == 0
    assert api_client.get("/api/v1/audit-events/?action=nonsense").status_code == 400


def test_audit_events_tell_served_answers_from_shadow_decisions(api_client, tenant, kb):
    """In shadow mode a hit is logged as `served_cached` but the answer was made fresh: `shadow=false` lists only the
    answers really served, `shadow=true` only what shadow mode decided without applying it."""
    set_policy(tenant, shadow_mode=True)
    shadowed = ask(api_client, (shadow_conversation := start(api_client, kb)), "How do I reset my password?")
    shadowed = ask(api_client, shadow_conversation, "How can I reset my password?")
    set_policy(tenant, shadow_mode=False)
    served_conversation = start(api_client, kb)
    ask(api_client, served_conversation, "How do I reset my password?")
    served = ask(api_client, served_conversation, "How can I reset my password?")
    assert served["dedup"]["action"] == "served_cached" and shadowed["dedup"]["shadow_action"] == "served_cached"

    def turns(query: str) -> list[int]:
        response = api_client.get(f"/api/v1/audit-events/?action=served_cached&{query}")
        assert response.status_code == 200, response.content
        return [event["turn"] for event in response.json()["results"]]

    assert turns("shadow=false") == [served["turn_id"]]
    assert turns("shadow=true") == [shadowed["turn_id"]]
    assert sorted(turns("")) == sorted([served["turn_id"], shadowed["turn_id"]])
    assert api_client.get("/api/v1/audit-events/?shadow=maybe").status_code == 400


@pytest.mark.parametrize("offset", [2**63, 10**20])
def test_audit_events_offset_past_the_databases_range_is_400(api_client, offset):
    response = api_client.get(f"/api/v1/audit-events/?offset={offset}")
    assert response.status_code == 400, response.content[:300]
    assert "offset" in response.json()["extra"]["fields"]


def test_audit_events_largest_offset_is_an_empty_page(api_client):
    response = api_client.get(f"/api/v1/audit-events/?offset={2**63 - 1}&limit=500")
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_bad_input_is_400(api_client, kb):
    conversation_id = start(api_client, kb)
    url = f"/api/v1/conversations/{conversation_id}/messages/"
    assert api_client.post(url, {"question": "   "}, format="json").status_code == 400
    assert api_client.post(url, {"question": "x", "mode": "poem"}, format="json").status_code == 400
    assert api_client.post(url, {"question": "x" * 5000}, format="json").status_code == 400
    assert api_client.post("/api/v1/conversations/", {"knowledge_base": "x"}, format="json").status_code == 400


def test_key_bound_to_another_knowledge_base_sees_404(api_client, tenant, kb):
    other_kb = indexed_kb(tenant, {"x": ["Something else entirely."]}, name="second")
    from tenants.services import api_key_create

    _, raw = api_key_create(tenant=tenant, name="bound", scopes=[Scope.CHAT, Scope.INGEST], knowledge_base=other_kb)
    bound = _client_for(tenant)
    bound.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw}")
    conversation_id = start(api_client, kb)
    assert bound.get(f"/api/v1/conversations/{conversation_id}/").status_code == 404
    assert bound.post("/api/v1/conversations/", {"knowledge_base": kb.pk}, format="json").status_code == 404


def test_a_key_bound_to_one_knowledge_base_sees_only_its_audit_events(tenant):
    world = world_build(tenant=tenant, marker="bound")
    second = world.objects["second_conversation"]
    DedupEvent.objects.create(
        tenant=tenant,
        conversation=second,
        conversation_ref=second.pk,
        action=DedupAction.ANSWERED,
        reason="of the second knowledge base",
        scope=DedupScope.SESSION,
        threshold=0.9,
        question_window=10,
        exclusion_window=5,
        granularity=Granularity.CHUNK,
    )
    bound = _client_for(tenant)
    bound.credentials(HTTP_AUTHORIZATION=f"Api-Key {world.raw_keys['kb_admin']}")
    body = bound.get("/api/v1/audit-events/").json()
    assert body["count"] == 1
    assert [event["conversation"] for event in body["results"]] == [world.id_of("conversation")]
    assert bound.get(f"/api/v1/audit-events/?conversation={second.pk}").json()["count"] == 0
    tenant_wide = _client_for(tenant)
    tenant_wide.credentials(HTTP_AUTHORIZATION=f"Api-Key {world.raw_keys['admin']}")
    assert tenant_wide.get("/api/v1/audit-events/").json()["count"] == 2
