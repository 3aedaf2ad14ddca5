"""Listing, renaming, deleting a conversation and paging its turns, through the REST API on real Redis and
`milvus-lite server` (and PostgreSQL under CI)."""

from __future__ import annotations

import pytest

from conversations.api.apis import ConversationDetailApi
from conversations.models import ConsumedItem, Conversation, DedupEvent, Feedback, Turn
from conversations.turn.state import hot_copy_writes_wait, state_key
from kbplatform.redis_client import redis_connection
from retrieval.models import KnowledgeBase
from tenants.scopes import Scope
from tenants.services import api_key_create
from tests.conftest import _client_for
from tests.conversations.helpers import indexed_kb, indexed_question_turn_ids
from tests.conversations.test_api import ask, kb, services, set_policy, start

pytestmark = pytest.mark.django_db
__all__ = ["kb", "services"]  # fixtures shared with test_api


def _bound_client(tenant, knowledge_base):
    _, raw = api_key_create(
        tenant=tenant, name="bound", scopes=[Scope.CHAT, Scope.INGEST], knowledge_base=knowledge_base
    )
    client = _client_for(tenant)
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw}")
    return client


def _listed(client, query: str = "") -> tuple[int, list[int]]:
    response = client.get(f"/api/v1/conversations/{query}")
    assert response.status_code == 200, response.content
    body = response.json()
    return body["count"], [conversation["id"] for conversation in body["results"]]


# --- list ---------------------------------------------------------------------------------------------------------


def test_the_list_filters_pages_and_puts_the_most_recently_active_first(api_client, other_api_client, tenant, kb):
    second_kb = KnowledgeBase.objects.create(tenant=tenant, name="second")
    first = start(api_client, kb, user_id="ann")
    bobs = start(api_client, kb, user_id="bob")
    anns_second = start(api_client, kb, user_id="ann")
    on_second_kb = start(api_client, second_kb, user_id="ann")
    other_tenants = start(other_api_client, indexed_kb(other_api_client.api_key.tenant, name="theirs"), user_id="ann")
    ask(api_client, first, "How do I reset my password?")  # the oldest conversation is now the most recently active

    assert _listed(api_client) == (4, [first, on_second_kb, anns_second, bobs])
    assert _listed(api_client, "?user_id=ann") == (3, [first, on_second_kb, anns_second])
    assert _listed(api_client, f"?knowledge_base={second_kb.pk}") == (1, [on_second_kb])
    assert _listed(api_client, f"?user_id=ann&knowledge_base={kb.pk}") == (2, [first, anns_second])
    assert _listed(api_client, "?user_id=") == (4, [first, on_second_kb, anns_second, bobs])  # empty reads as absent
    assert _listed(api_client, "?user_id=nobody") == (0, [])
    assert _listed(api_client, "?limit=2&offset=1") == (4, [on_second_kb, anns_second])
    assert _listed(api_client, "?limit=2&offset=4") == (4, [])
    assert _listed(other_api_client) == (1, [other_tenants])
    assert _listed(other_api_client, f"?knowledge_base={kb.pk}") == (0, [])

    listed = api_client.get("/api/v1/conversations/?limit=1").json()["results"][0]
    detail = api_client.get(f"/api/v1/conversations/{first}/").json()
    assert listed == {key: value for key, value in detail.items() if key not in ("turns", "turns_total")}
    assert listed["turn_count"] == 1 and listed["title"] == "How do I reset my password?"


def test_a_key_bound_to_one_knowledge_base_lists_only_its_conversations(api_client, tenant, kb):
    second_kb = KnowledgeBase.objects.create(tenant=tenant, name="second")
    start(api_client, kb)
    theirs = start(api_client, second_kb)
    bound = _bound_client(tenant, second_kb)
    assert _listed(bound) == (1, [theirs])
    assert _listed(bound, f"?knowledge_base={kb.pk}") == (0, [])


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("offset=-1", "offset"),
        (f"offset={2**63}", "offset"),
        ("knowledge_base=abc", "knowledge_base"),
        ("page=2", "page"),
        ("user_id=a%00b", "user_id"),
        ("user_id=a&user_id=b", "user_id"),
    ],
)
def test_a_bad_list_query_is_a_400_naming_the_field(api_client, query, field):
    response = api_client.get(f"/api/v1/conversations/?{query}")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["message"] and field in body["extra"]["fields"]


# --- rename and the default title ---------------------------------------------------------------------------------


def test_the_title_is_the_first_question_until_the_client_gives_one(api_client, kb):
    conversation_id = start(api_client, kb)
    created = api_client.get(f"/api/v1/conversations/{conversation_id}/").json()
    assert (created["title"], created["title_is_default"]) == ("", True)
    ask(api_client, conversation_id, "hello")  # small talk is no question
    assert api_client.get(f"/api/v1/conversations/{conversation_id}/").json()["title"] == ""
    ask(api_client, conversation_id, "How do I reset my password?")
    ask(api_client, conversation_id, "How much does the Team plan cost?")
    assert api_client.get(f"/api/v1/conversations/{conversation_id}/").json()["title"] == "How do I reset my password?"

    url = f"/api/v1/conversations/{conversation_id}/"
    renamed = api_client.patch(url, {"title": "  Password help  "}, format="json")
    assert renamed.status_code == 200, renamed.content
    assert (renamed.json()["title"], renamed.json()["title_is_default"]) == ("Password help", False)
    assert api_client.get(url).json()["title"] == "Password help"
    assert _listed(api_client)[1] == [conversation_id]
    assert api_client.get("/api/v1/conversations/").json()["results"][0]["title"] == "Password help"

    cleared = api_client.patch(url, {"title": ""}, format="json")
    assert cleared.status_code == 200
    assert (cleared.json()["title"], cleared.json()["title_is_default"]) == ("How do I reset my password?", True)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "title"),
        ({"title": "x" * 201}, "title"),
        ({"title": "a\x00b"}, None),  # refused for the whole body by the JSON parser, which names the NUL
        ({"title": "a\x07b"}, "title"),
        ({"title": None}, "title"),
        ({"title": "ok", "name": "x"}, "name"),
    ],
)
def test_a_bad_title_is_a_400_and_changes_nothing(api_client, tenant, kb, body, field):
    conversation_id = start(api_client, kb)
    api_client.patch(f"/api/v1/conversations/{conversation_id}/", {"title": "Kept"}, format="json")
    response = api_client.patch(f"/api/v1/conversations/{conversation_id}/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["extra"]["fields"] if field else "NUL" in response.json()["message"]
    assert Conversation.objects.for_tenant(tenant).get(pk=conversation_id).title == "Kept"


# --- delete -------------------------------------------------------------------------------------------------------


def test_deleting_a_conversation_removes_everything_held_for_it_and_nothing_of_another(
    api_client, tenant, kb, django_capture_on_commit_callbacks
):
    set_policy(tenant, scope="tenant")
    doomed = start(api_client, kb, user_id="ann")
    kept = start(api_client, kb, user_id="ann")
    doomed_turns = [
        ask(api_client, doomed, "How do I reset my password?")["turn_id"],
        ask(api_client, doomed, "How much does the Team plan cost?")["turn_id"],
    ]
    kept_turn = ask(api_client, kept, "Which platforms does the mobile app run on?")["turn_id"]
    rated = api_client.post(f"/api/v1/turns/{doomed_turns[0]}/feedback/", {"rating": "up"}, format="json")
    assert rated.status_code == 201
    hot_copy_writes_wait()
    redis = redis_connection()
    doomed_key = state_key(tenant_id=tenant.pk, conversation_id=doomed)
    kept_key = state_key(tenant_id=tenant.pk, conversation_id=kept)
    assert redis.get(doomed_key) is not None and redis.get(kept_key) is not None
    assert indexed_question_turn_ids(tenant, kb) >= {*doomed_turns, kept_turn}
    assert ConsumedItem.objects.for_tenant(tenant).filter(conversation_id=doomed).exists()
    kept_consumed = list(ConsumedItem.objects.for_tenant(tenant).filter(conversation_id=kept).values())
    assert kept_consumed

    with django_capture_on_commit_callbacks(execute=True):
        response = api_client.delete(f"/api/v1/conversations/{doomed}/")
    assert response.status_code == 204, response.content

    assert not Conversation.objects.for_tenant(tenant).filter(pk=doomed).exists()
    assert not Turn.objects.for_tenant(tenant).filter(pk__in=doomed_turns).exists()
    assert not ConsumedItem.objects.for_tenant(tenant).filter(conversation_id=doomed).exists()
    assert not Feedback.objects.for_tenant(tenant).filter(turn_id__in=doomed_turns).exists()
    assert redis.get(doomed_key) is None
    indexed = indexed_question_turn_ids(tenant, kb)
    assert not indexed & set(doomed_turns) and kept_turn in indexed
    # The audit log outlives the conversation, as it does a purge: the ids stay, the links go.
    events = DedupEvent.objects.for_tenant(tenant).filter(conversation_ref=doomed)
    assert sorted(events.values_list("turn_ref", flat=True)) == sorted(doomed_turns)
    assert not events.exclude(conversation=None).exists()
    assert api_client.get(f"/api/v1/audit-events/?conversation={doomed}").json()["count"] == 2

    # The other conversation of the same user: untouched, and it still works.
    assert Turn.objects.for_tenant(tenant).filter(pk=kept_turn).exists()
    assert list(ConsumedItem.objects.for_tenant(tenant).filter(conversation_id=kept).values()) == kept_consumed
    assert redis.get(kept_key) is not None
    assert api_client.get(f"/api/v1/conversations/{doomed}/").status_code == 404
    assert api_client.delete(f"/api/v1/conversations/{doomed}/").status_code == 404
    # A deleted answer is never served again, here through the tenant-scope question index.
    again = ask(api_client, kept, "How can I reset my password?")
    assert again["dedup"]["action"] == "answered", again["dedup"]
    assert _listed(api_client) == (1, [kept])


# --- turns, paged -------------------------------------------------------------------------------------------------


def test_turns_are_paged_and_the_detail_holds_the_latest_with_a_count(api_client, kb, monkeypatch):
    conversation_id = start(api_client, kb)
    questions = ["hello", "How do I reset my password?", "thanks", "How do I export reports?", "What about SSO?"]
    turn_ids = [ask(api_client, conversation_id, question)["turn_id"] for question in questions]

    def page(query: str) -> tuple[int, list[int]]:
        response = api_client.get(f"/api/v1/conversations/{conversation_id}/turns/{query}")
        assert response.status_code == 200, response.content
        return response.json()["count"], [turn["id"] for turn in response.json()["results"]]

    assert page("") == (5, turn_ids)
    assert page("?limit=2") == (5, turn_ids[:2])
    assert page("?limit=2&offset=2") == (5, turn_ids[2:4])
    assert page("?limit=2&offset=4") == (5, turn_ids[4:])
    assert page("?offset=5") == (5, [])
    first = api_client.get(f"/api/v1/conversations/{conversation_id}/turns/?limit=1").json()["results"][0]
    assert first["question"] == "hello" and first["number"] == 1 and first["decision"] == "smalltalk"

    detail = api_client.get(f"/api/v1/conversations/{conversation_id}/").json()
    assert [turn["id"] for turn in detail["turns"]] == turn_ids and detail["turns_total"] == 5
    monkeypatch.setattr(ConversationDetailApi, "DETAIL_TURNS", 3)
    detail = api_client.get(f"/api/v1/conversations/{conversation_id}/").json()
    assert [turn["id"] for turn in detail["turns"]] == turn_ids[2:] and detail["turns_total"] == 5
    assert detail["turn_count"] == 5

    for query, field in (("limit=0", "limit"), ("limit=101", "limit"), ("offset=x", "offset"), ("page=1", "page")):
        response = api_client.get(f"/api/v1/conversations/{conversation_id}/turns/?{query}")
        assert response.status_code == 400 and field in response.json()["extra"]["fields"], query


# --- another tenant, another knowledge base ------------------------------------------------------------------------


def test_another_tenant_and_a_key_of_another_knowledge_base_get_404_and_change_nothing(
    api_client, other_api_client, tenant, kb
):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    url = f"/api/v1/conversations/{conversation_id}/"
    bound = _bound_client(tenant, KnowledgeBase.objects.create(tenant=tenant, name="second"))
    for client in (other_api_client, bound):
        assert client.get(f"{url}turns/").status_code == 404
        response = client.patch(url, {"title": "theirs"}, format="json")
        assert response.status_code == 404 and response.json()["message"] == "Conversation not found."
        assert client.delete(url).status_code == 404
        assert _listed(client) == (0, [])
    assert api_client.get(url).json()["title"] == "How do I reset my password?"
    assert Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).count() == 1
