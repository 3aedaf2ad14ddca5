"""Feedback on answers through the REST API on real Redis and `milvus-lite server` (and PostgreSQL under CI): one
rating per turn, replaced when given again, listed; a thumbs-down on a served stored answer marks its audit event
a suspected false hit for support, in the API's audit log and the admin's."""

from __future__ import annotations

import pytest

from conversations.admin.services import dedup_events_review
from conversations.models import DedupEvent, Feedback, ReviewVerdict
from retrieval.models import KnowledgeBase
from tenants.models import Role
from tenants.scopes import Scope
from tenants.services import api_key_create
from tests.conftest import _client_for
from tests.conversations.test_api import ask, kb, services, start
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
__all__ = ["kb", "services"]  # fixtures shared with test_api


def rate(client, turn_id: int, rating: str, *, method: str = "post", expect: int = 200, **extra) -> dict:
    response = getattr(client, method)(f"/api/v1/turns/{turn_id}/feedback/", {"rating": rating, **extra}, format="json")
    assert response.status_code == expect, response.content
    return response.json()


def event_of(tenant, turn_id: int) -> DedupEvent:
    return DedupEvent.objects.for_tenant(tenant).get(turn_id=turn_id)


def suspected_turns(client) -> list[int]:
    response = client.get("/api/v1/audit-events/?suspected_false_hit=true")
    assert response.status_code == 200, response.content
    return [event["turn"] for event in response.json()["results"]]


@pytest.fixture
def served(api_client, kb) -> tuple[int, int, int]:
    """A conversation whose second turn was served the first turn's stored answer: (conversation, fresh, served)."""
    conversation_id = start(api_client, kb)
    fresh = ask(api_client, conversation_id, "How do I reset my password?")
    repeat = ask(api_client, conversation_id, "How can I reset my password?")
    assert fresh["dedup"]["action"] == "answered" and repeat["dedup"]["action"] == "served_cached"
    return conversation_id, fresh["turn_id"], repeat["turn_id"]


def test_feedback_is_given_replaced_read_and_listed(api_client, tenant, served):
    conversation_id, fresh, repeat = served
    url = f"/api/v1/turns/{fresh}/feedback/"
    missing = api_client.get(url)
    assert missing.status_code == 404 and missing.json()["message"] == "This turn has no feedback yet."

    given = rate(api_client, fresh, "up", expect=201)
    assert (given["turn"], given["conversation"]) == (fresh, conversation_id)
    assert (given["rating"], given["comment"]) == ("up", "")
    changed = rate(api_client, fresh, "down", comment="  The link expired.  ")
    assert changed["id"] == given["id"] and (changed["rating"], changed["comment"]) == ("down", "The link expired.")
    assert api_client.get(url).json() == changed
    replaced = rate(api_client, fresh, "up", method="put")
    assert (replaced["rating"], replaced["comment"]) == ("up", "")  # a rating replaces the comment with it
    assert Feedback.objects.for_tenant(tenant).filter(turn_id=fresh).count() == 1
    assert rate(api_client, repeat, "down", method="put", expect=201)["rating"] == "down"

    other_conversation = start(api_client, KnowledgeBase.objects.for_tenant(tenant).get())
    ask(api_client, other_conversation, "hello")

    def listed(query: str = "") -> tuple[int, list[int]]:
        response = api_client.get(f"/api/v1/feedback/{query}")
        assert response.status_code == 200, response.content
        return response.json()["count"], [feedback["turn"] for feedback in response.json()["results"]]

    assert listed() == (2, [repeat, fresh])  # most recently given or changed first
    assert listed("?rating=down") == (1, [repeat])
    assert listed("?rating=up") == (1, [fresh])
    assert listed(f"?conversation={conversation_id}&limit=1") == (2, [repeat])
    assert listed(f"?conversation={conversation_id}&limit=1&offset=1") == (2, [fresh])
    assert listed(f"?conversation={other_conversation}") == (0, [])
    assert (
        api_client.get("/api/v1/feedback/?limit=1").json()["results"][0]
        == api_client.get(f"/api/v1/turns/{repeat}/feedback/").json()
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "rating"),
        ({"rating": "meh"}, "rating"),
        ({"rating": None}, "rating"),
        ({"rating": "up", "comment": "x" * 2001}, "comment"),
        ({"rating": "up", "comment": "a\x1bb"}, "comment"),
        ({"rating": "up", "comment": "a\x00b"}, None),  # the JSON parser refuses the whole body, naming the NUL
        ({"rating": "up", "stars": 5}, "stars"),
    ],
)
def test_bad_feedback_is_a_400_naming_the_field_and_keeps_what_was_given(api_client, tenant, served, body, field):
    _, fresh, _ = served
    rate(api_client, fresh, "up", comment="Kept.", expect=201)
    response = api_client.post(f"/api/v1/turns/{fresh}/feedback/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["extra"]["fields"] if field else "NUL" in response.json()["message"]
    assert Feedback.objects.for_tenant(tenant).values_list("rating", "comment").get() == ("up", "Kept.")


def test_a_turn_with_no_answer_yet_has_nothing_to_rate(api_client, tenant, kb):
    turn_id = ask(api_client, start(api_client, kb), "How do I reset my password?", mode="retrieve")["turn_id"]
    response = api_client.post(f"/api/v1/turns/{turn_id}/feedback/", {"rating": "down"}, format="json")
    assert response.status_code == 409 and "no answer" in response.json()["message"]
    assert not Feedback.objects.for_tenant(tenant).exists()
    api_client.put(f"/api/v1/turns/{turn_id}/answer/", {"answer": "Settings, Security, Reset."}, format="json")
    assert rate(api_client, turn_id, "down", expect=201)["rating"] == "down"


def test_a_thumbs_down_on_a_served_answer_marks_its_audit_event_and_one_on_a_fresh_answer_does_not(
    api_client, tenant, served
):
    _, fresh, repeat = served
    rate(api_client, fresh, "down", expect=201)
    rate(api_client, repeat, "up", expect=201)
    assert not event_of(tenant, fresh).suspected_false_hit and not event_of(tenant, repeat).suspected_false_hit
    assert suspected_turns(api_client) == []

    rate(api_client, repeat, "down", comment="Not what I asked.")
    event = event_of(tenant, repeat)
    assert event.suspected_false_hit and event.suspected_false_hit_at is not None
    assert suspected_turns(api_client) == [repeat]
    listed = api_client.get(f"/api/v1/audit-events/?suspected_false_hit=true&conversation={event.conversation_ref}")
    shown = listed.json()["results"][0]
    assert shown["suspected_false_hit"] is True and shown["suspected_false_hit_at"] is not None
    unflagged = api_client.get("/api/v1/audit-events/?suspected_false_hit=false").json()["results"]
    assert [e["turn"] for e in unflagged] == [fresh]
    assert not event_of(tenant, fresh).suspected_false_hit

    since = event.suspected_false_hit_at
    rate(api_client, repeat, "down", comment="Still wrong.")
    assert event_of(tenant, repeat).suspected_false_hit_at == since  # the first suspicion's time is kept

    rate(api_client, repeat, "up")  # changed to up before support looked: the suspicion is withdrawn
    event = event_of(tenant, repeat)
    assert not event.suspected_false_hit and event.suspected_false_hit_at is None
    assert suspected_turns(api_client) == []


def test_once_support_reviewed_a_suspected_false_hit_a_thumbs_up_does_not_clear_it(api_client, tenant, served):
    _, _, repeat = served
    rate(api_client, repeat, "down", expect=201)
    event = event_of(tenant, repeat)
    dedup_events_review(tenant=tenant, event_ids=[event.pk], user=None, verdict=ReviewVerdict.INCORRECT, note="")
    rate(api_client, repeat, "up")
    event.refresh_from_db()
    assert event.suspected_false_hit and event.review_verdict == ReviewVerdict.INCORRECT
    assert suspected_turns(api_client) == [repeat]


def test_a_thumbs_down_in_shadow_mode_is_no_false_hit(api_client, tenant, kb):
    """In shadow mode a hit is logged but the answer is made fresh: nothing stored was served."""
    from conversations.services import dedup_policy_update

    dedup_policy_update(tenant=tenant, shadow_mode=True)
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    shadowed = ask(api_client, conversation_id, "How can I reset my password?")
    assert shadowed["dedup"]["shadow_action"] == "served_cached"
    rate(api_client, shadowed["turn_id"], "down", expect=201)
    assert not event_of(tenant, shadowed["turn_id"]).suspected_false_hit


def test_another_tenant_and_a_key_of_another_knowledge_base_get_404_and_change_nothing(
    api_client, other_api_client, tenant, served
):
    _, fresh, repeat = served
    rate(api_client, repeat, "down", expect=201)
    _, raw = api_key_create(
        tenant=tenant,
        name="bound",
        scopes=[Scope.CHAT, Scope.INGEST],
        knowledge_base=KnowledgeBase.objects.create(tenant=tenant, name="second"),
    )
    bound = _client_for(tenant)
    bound.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw}")
    for client in (other_api_client, bound):
        for turn_id in (fresh, repeat):
            url = f"/api/v1/turns/{turn_id}/feedback/"
            assert client.get(url).status_code == 404
            for method in ("post", "put"):
                response = getattr(client, method)(url, {"rating": "up"}, format="json")
                assert response.status_code == 404 and response.json()["message"] == "Turn not found."
        assert client.get("/api/v1/feedback/").json()["count"] == 0
        assert client.get("/api/v1/audit-events/?suspected_false_hit=true").json()["count"] == 0
    assert Feedback.objects.for_tenant(tenant).values_list("turn_id", "rating").get() == (repeat, "down")
    assert event_of(tenant, repeat).suspected_false_hit


def test_the_admin_lists_feedback_and_filters_suspected_false_hits(client, api_client, tenant, served):
    _, fresh, repeat = served
    rate(api_client, fresh, "up", expect=201)
    rate(api_client, repeat, "down", comment="Wrong answer.", expect=201)
    user = UserFactory()
    MembershipFactory(user=user, tenant=tenant, role=Role.SUPPORT)
    client.force_login(user)

    feedback = client.get("/admin/conversations/feedback/?rating__exact=down")
    assert feedback.status_code == 200
    assert [row.turn_id for row in feedback.context["cl"].result_list] == [repeat]
    assert "Wrong answer." in feedback.content.decode() and "suspected false hit" in feedback.content.decode()

    events = client.get("/admin/conversations/dedupevent/?suspected_false_hit__exact=1")
    assert events.status_code == 200
    assert [event.turn_id for event in events.context["cl"].result_list] == [repeat]
    row = Feedback.objects.for_tenant(tenant).get(turn_id=repeat)
    detail = client.get(f"/admin/conversations/feedback/{row.pk}/change/")
    assert detail.status_code == 200 and "Wrong answer." in detail.content.decode()
