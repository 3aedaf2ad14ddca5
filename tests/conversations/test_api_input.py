"""What a customer app can get wrong in a request to the conversation, audit and policy endpoints: each is a 400
that names the field and what to send, and changes nothing. None of these needs Milvus: every refusal comes before
a search."""

from __future__ import annotations

import pytest

from conversations.models import Conversation, DedupPolicy, SettingsChange, Turn
from retrieval.models import KnowledgeBase
from tenants.models import ApiKey

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb(tenant):
    return KnowledgeBase.objects.create(tenant=tenant, name="handbook")


@pytest.fixture
def conversation_id(api_client, kb) -> int:
    response = api_client.post("/api/v1/conversations/", {"knowledge_base": kb.pk}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def refused_fields(response) -> dict:
    assert response.status_code == 400, response.content[:500]
    body = response.json()
    assert set(body) == {"message", "extra"}
    return body["extra"]["fields"]


def test_a_misspelt_policy_field_is_refused_and_nothing_changes(api_client, tenant):
    """`shadowmode` for `shadow_mode` was a 200 that changed the threshold and left shadow mode off: the admin believed
    the change was only being logged while every tenant conversation already applied it."""
    before = api_client.get("/api/v1/dedup-policy/").json()
    response = api_client.put("/api/v1/dedup-policy/", {"threshold": 0.5, "shadowmode": True}, format="json")
    fields = refused_fields(response)
    assert list(fields) == ["shadowmode"]
    assert "shadow_mode" in fields["shadowmode"][0]
    assert api_client.get("/api/v1/dedup-policy/").json() == before
    assert not SettingsChange.objects.for_tenant(tenant).exists()


def test_a_misspelt_field_of_a_new_conversation_is_refused(api_client, tenant, kb):
    """`userid` for `user_id` made a conversation with no user: user-scope dedup never saw this user's questions."""
    response = api_client.post("/api/v1/conversations/", {"knowledge_base": kb.pk, "userid": "alice"}, format="json")
    assert list(refused_fields(response)) == ["userid"]
    assert not Conversation.objects.for_tenant(tenant).exists()


def test_a_misspelt_field_of_a_question_is_refused_before_any_turn(api_client, tenant, conversation_id):
    """`forceRefresh` for `force_refresh` was ignored, and the stored answer the client asked to bypass was served."""
    response = api_client.post(
        f"/api/v1/conversations/{conversation_id}/messages/",
        {"question": "How do I reset my password?", "forceRefresh": True},
        format="json",
    )
    fields = refused_fields(response)
    assert list(fields) == ["forceRefresh"]
    assert "force_refresh" in fields["forceRefresh"][0]
    assert not Turn.objects.for_tenant(tenant).exists()


def test_unknown_and_invalid_fields_are_reported_together(api_client, conversation_id):
    url = f"/api/v1/conversations/{conversation_id}/messages/"
    response = api_client.post(url, {"question": "x", "mode": "poem", "lang": "en"}, format="json")
    assert set(refused_fields(response)) == {"mode", "lang"}


def test_a_misspelt_field_of_a_client_answer_is_refused(api_client):
    response = api_client.put("/api/v1/turns/1/answer/", {"answer": "x", "final": True}, format="json")
    assert list(refused_fields(response)) == ["final"]


def test_a_misspelt_knowledge_base_of_a_new_api_key_is_refused(api_client, tenant, kb):
    """`knowledge_base_id` for `knowledge_base` created a key that reached the whole tenant instead of one knowledge
    base, and the response (its `knowledge_base` null) was the only sign."""
    keys_before = ApiKey.objects.for_tenant(tenant).count()
    response = api_client.post("/api/v1/api-keys/", {"name": "widget", "knowledge_base_id": kb.pk}, format="json")
    assert list(refused_fields(response)) == ["knowledge_base_id"]
    assert ApiKey.objects.for_tenant(tenant).count() == keys_before


def test_a_misspelt_field_of_a_search_is_refused(api_client, kb):
    response = api_client.post(f"/api/v1/knowledge-bases/{kb.pk}/search/", {"query": "x", "top_k": 3}, format="json")
    assert list(refused_fields(response)) == ["top_k"]


@pytest.mark.parametrize(
    "query, name",
    [
        # A page number where the API takes an offset: every "page" was the first one, so a client paging until a
        # short page never stopped.
        ("page=2", "page"),
        # A filter it does not have: the whole audit log came back as if it were that day's.
        ("date=2024-01-01", "date"),
        ("conversation_id=7", "conversation_id"),
    ],
)
def test_an_unknown_audit_query_parameter_is_refused(api_client, query, name):
    fields = refused_fields(api_client.get(f"/api/v1/audit-events/?{query}"))
    assert list(fields) == [name]
    assert "offset" in fields[name][0] and "created_from" in fields[name][0]


@pytest.mark.parametrize(
    "query, field",
    [
        ("created_from=2025-01-02T00:00:00Z&created_to=2025-01-01T00:00:00Z", "created_to"),
        ("created_from=2025-01-01T00:00:00Z&created_to=2025-01-01T00:00:00Z", "created_to"),
        ("similarity_min=0.9&similarity_max=0.1", "similarity_max"),
    ],
)
def test_a_reversed_audit_range_is_refused_rather_than_answered_empty(api_client, query, field):
    """An empty page said "no such events" when the request could match none."""
    assert list(refused_fields(api_client.get(f"/api/v1/audit-events/?{query}"))) == [field]


def test_an_audit_range_of_one_similarity_is_a_valid_range(api_client):
    response = api_client.get("/api/v1/audit-events/?similarity_min=0.5&similarity_max=0.5")
    assert response.status_code == 200


@pytest.mark.parametrize(
    "question",
    [
        "\x01\x02\x03",  # control characters only
        "\u200b\u200b",  # zero-width spaces: nothing a person can read
        "\ufeff",
        "How do I \x1b[2Jreset my password?",  # a terminal escape inside a question
    ],
)
def test_a_question_with_control_characters_or_nothing_visible_is_refused(
    api_client, tenant, conversation_id, question
):
    """Such a question was embedded, answered with whatever ranked first and stored as a QA pair."""
    response = api_client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": question}, format="json"
    )
    assert list(refused_fields(response)) == ["question"]
    assert not Turn.objects.for_tenant(tenant).exists()


def test_a_user_id_with_a_control_character_is_refused(api_client, tenant, kb):
    response = api_client.post(
        "/api/v1/conversations/", {"knowledge_base": kb.pk, "user_id": "alice\x01"}, format="json"
    )
    fields = refused_fields(response)
    assert list(fields) == ["user_id"] and "U+0001" in fields["user_id"][0]
    assert not Conversation.objects.for_tenant(tenant).exists()


def test_policy_refusals_leave_the_policy_as_it_was(api_client, tenant):
    before = api_client.get("/api/v1/dedup-policy/").json()
    for bad in ({"threshold": 1.0001}, {"question_window": 101}, {"exclusion_window": 0}, {"min_results": -1}):
        assert refused_fields(api_client.put("/api/v1/dedup-policy/", bad, format="json")), bad
    assert api_client.get("/api/v1/dedup-policy/").json() == before
    assert DedupPolicy.objects.for_tenant(tenant).count() == 1


def test_a_filter_given_twice_is_refused_rather_than_reduced_to_its_last_value(api_client):
    """`?action=answered&action=served_cached` listed the served_cached events alone, as if asked for those only."""
    fields = refused_fields(api_client.get("/api/v1/audit-events/?action=answered&action=served_cached"))
    assert list(fields) == ["action"] and "once" in fields["action"][0]


def test_a_list_field_of_a_form_body_may_repeat(api_client):
    response = api_client.put(
        "/api/v1/dedup-policy/",
        "allowlisted_intents=other&allowlisted_intents=greeting",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 200, response.content
    assert response.json()["allowlisted_intents"] == ["greeting", "other"]


def test_two_spellings_of_one_user_id_are_one_user(api_client, tenant, kb):
    composed, decomposed = "Jos\u00e9", "Jose\u0301"
    for user_id in (composed, decomposed):
        response = api_client.post(
            "/api/v1/conversations/", {"knowledge_base": kb.pk, "user_id": user_id}, format="json"
        )
        assert response.status_code == 201, response.content
        assert response.json()["user_id"] == composed
    assert set(Conversation.objects.for_tenant(tenant).values_list("user_id", flat=True)) == {composed}


def test_a_user_id_longer_than_its_column_once_in_nfc_is_refused_not_cut(api_client, tenant, kb):
    # U+0958 is one character in any form but NFC, which writes it as two (a composition exclusion).
    response = api_client.post(
        "/api/v1/conversations/", {"knowledge_base": kb.pk, "user_id": "\u0958" * 200}, format="json"
    )
    fields = refused_fields(response)
    assert list(fields) == ["user_id"] and "NFC" in fields["user_id"][0]
    assert not Conversation.objects.for_tenant(tenant).exists()


def test_the_conversation_list_finds_a_user_however_the_id_is_spelt(api_client, tenant, kb):
    api_client.post("/api/v1/conversations/", {"knowledge_base": kb.pk, "user_id": "Jos\u00e9"}, format="json")
    listed = api_client.get("/api/v1/conversations/", {"user_id": "Jose\u0301"})
    assert listed.status_code == 200 and listed.json()["count"] == 1, listed.content
