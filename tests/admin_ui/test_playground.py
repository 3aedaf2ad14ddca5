"""The admin playground through Django's test client: who may open it, another tenant's knowledge base or
conversation a 404, bad input a message (never a 500), and the retrieval test giving the search endpoint's
results. The chat in a browser is in test_playground_browser.py."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError
from django.test import Client
from django.urls import reverse

from conversations.admin.playground import form_errors_message, playground_user_id, turn_display
from conversations.models import Conversation, DedupAction, Turn
from conversations.services import SourceView, TurnOutcome, conversation_create
from conversations.turn import turns
from retrieval.models import KnowledgeBase
from tenants.models import Role
from tests.admin_ui.conftest import user_with_role
from tests.conftest import _client_for
from tests.conversations.helpers import indexed_kb
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PAGE_URL = reverse("admin:conversations_conversation_playground")
START_URL = reverse("admin:conversations_conversation_playground_start")
SEARCH_URL = reverse("admin:conversations_conversation_playground_search")


def turn_url(conversation_id: int) -> str:
    return reverse("admin:conversations_conversation_playground_turn", args=[conversation_id])


@pytest.fixture
def admin_user(tenant):
    return user_with_role(tenant, Role.ADMIN, "admin@acme.example")


@pytest.fixture
def admin_client(client, admin_user) -> Client:
    client.force_login(admin_user)
    return client


@pytest.fixture
def kb(tenant):
    return KnowledgeBase.objects.create(tenant=tenant, name="Handbook")


@pytest.fixture
def other_kb(other_tenant):
    return KnowledgeBase.objects.create(tenant=other_tenant, name="Globex secrets")


@pytest.fixture
def conversation(tenant, kb, admin_user):
    return conversation_create(tenant=tenant, knowledge_base_id=kb.pk, user_id=playground_user_id(user=admin_user))


# --- the page ------------------------------------------------------------------------------------------------------
def test_a_tenant_admin_opens_the_playground_with_their_knowledge_bases_only(admin_client, tenant, kb, other_kb):
    second = KnowledgeBase.objects.create(tenant=tenant, name="Release notes")
    response = admin_client.get(PAGE_URL)
    assert response.status_code == 200
    assert response.context["tenant"] == tenant
    assert [k.pk for k in response.context["knowledge_bases"]] == sorted([kb.pk, second.pk])
    assert response.context["knowledge_base"].pk == min(kb.pk, second.pk)
    assert "Globex secrets" not in response.content.decode()
    picked = admin_client.get(PAGE_URL, {"knowledge_base": second.pk})
    assert picked.context["knowledge_base"] == second


def test_a_tenant_without_knowledge_bases_is_told_what_to_do(admin_client, tenant):
    response = admin_client.get(PAGE_URL)
    assert response.status_code == 200
    assert "has no knowledge base yet" in response.content.decode()


@pytest.mark.parametrize("role", [Role.SUPPORT, Role.VIEWER])
def test_support_and_viewers_are_refused(client, tenant, kb, role):
    client.force_login(user_with_role(tenant, role))
    assert client.get(PAGE_URL).status_code == 403
    assert client.get(PAGE_URL, {"tenant": tenant.pk}).status_code == 403
    assert client.post(SEARCH_URL, {"tenant": tenant.pk, "knowledge_base": kb.pk, "query": "x"}).status_code == 403


def test_staff_of_no_tenant_is_refused(client, tenant, kb):
    client.force_login(UserFactory(username="staff-only@example.com"))
    assert client.get(PAGE_URL).status_code == 403
    assert client.get(PAGE_URL, {"tenant": tenant.pk}).status_code == 404
    refused = client.post(START_URL, {"tenant": tenant.pk, "knowledge_base": kb.pk})
    assert refused.status_code == 404
    assert not Conversation.objects.for_tenant(tenant).exists()


def test_signed_out_visitors_go_to_the_sign_in_page(client, kb):
    response = client.get(PAGE_URL)
    assert response.status_code == 302 and reverse("admin:login") in response["Location"]
    assert client.post(START_URL, {"knowledge_base": kb.pk}).status_code == 302


def test_another_tenants_knowledge_base_is_a_404(admin_client, tenant, other_tenant, kb, other_kb):
    assert admin_client.get(PAGE_URL, {"tenant": other_tenant.pk}).status_code == 404
    assert admin_client.get(PAGE_URL, {"knowledge_base": other_kb.pk}).status_code == 404
    started = admin_client.post(START_URL, {"tenant": tenant.pk, "knowledge_base": other_kb.pk})
    assert started.status_code == 404 and started.json()["message"] == "Knowledge base not found."
    searched = admin_client.post(SEARCH_URL, {"tenant": tenant.pk, "knowledge_base": other_kb.pk, "query": "secrets"})
    assert searched.status_code == 404 and searched.json()["message"] == "Knowledge base not found."
    assert not Conversation.objects.for_tenant(other_tenant).exists()


@pytest.mark.parametrize("knowledge_base", ["abc", "1.5", "-1", "99999999999999999999"])
def test_a_knowledge_base_that_is_no_id_is_a_404_page_not_a_server_error(admin_client, kb, knowledge_base):
    assert admin_client.get(PAGE_URL, {"knowledge_base": knowledge_base}).status_code == 404


# --- the chat's endpoints -----------------------------------------------------------------------------------------
def test_a_conversation_is_started_for_the_admin_with_the_chosen_knowledge_base(admin_client, tenant, kb, admin_user):
    response = admin_client.post(START_URL, {"tenant": tenant.pk, "knowledge_base": kb.pk})
    assert response.status_code == 201
    conversation = Conversation.objects.for_tenant(tenant).get(pk=response.json()["conversation"])
    assert (conversation.knowledge_base_id, conversation.user_id) == (kb.pk, "playground:admin@acme.example")
    assert response.json()["user_id"] == "playground:admin@acme.example"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "knowledge_base"),
        ({"knowledge_base": "abc"}, "knowledge_base"),
        ({"knowledge_base": "0"}, "knowledge_base"),
    ],
)
def test_a_bad_start_is_a_message(admin_client, tenant, kb, data, field):
    response = admin_client.post(START_URL, {"tenant": tenant.pk, **data})
    assert response.status_code == 400
    body = response.json()
    assert body["message"].startswith("The request is not valid: knowledge_base:")
    assert field in body["extra"]["fields"]


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ("", "The request is not valid: question: This field is required."),
        ("   ", "The request is not valid: question: This field is required."),
        ("x" * 4001, "The request is not valid: question: Ensure this value has at most 4000 characters"),
        ("a\x00b", "The request is not valid: question: Null characters are not allowed."),
        ("a\x07b", "The question is not valid:"),
        ("\u200b\u200b", "The question is not valid: Has nothing visible"),
    ],
)
def test_a_bad_question_is_a_message_and_writes_no_turn(admin_client, tenant, conversation, question, message):
    response = admin_client.post(turn_url(conversation.pk), {"tenant": tenant.pk, "question": question})
    assert response.status_code == 400, response.content
    assert response.json()["message"].startswith(message), response.json()
    assert not Turn.objects.for_tenant(tenant).exists()


def test_a_customers_conversation_or_another_tenants_is_a_404(admin_client, tenant, other_tenant, kb, other_kb):
    customers = conversation_create(tenant=tenant, knowledge_base_id=kb.pk, user_id="customer-42")
    theirs = conversation_create(
        tenant=other_tenant, knowledge_base_id=other_kb.pk, user_id="playground:admin@acme.example"
    )
    for conversation in (customers, theirs):
        response = admin_client.post(turn_url(conversation.pk), {"tenant": tenant.pk, "question": "What is the price?"})
        assert response.status_code == 404 and response.json()["message"] == "Conversation not found."
    assert admin_client.post(turn_url(999_999_999), {"tenant": tenant.pk, "question": "hi"}).status_code == 404
    assert not Turn.objects.unscoped().exists()


def test_another_admins_playground_conversation_is_a_404(client, tenant, kb, conversation):
    client.force_login(user_with_role(tenant, Role.ADMIN, "second-admin@acme.example"))
    response = client.post(turn_url(conversation.pk), {"tenant": tenant.pk, "question": "What is the price?"})
    assert response.status_code == 404


def test_the_endpoints_take_posts_only_and_need_the_csrf_token(admin_user, tenant, kb, conversation):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    assert strict.post(START_URL, {"tenant": tenant.pk, "knowledge_base": kb.pk}).status_code == 403
    assert strict.post(turn_url(conversation.pk), {"tenant": tenant.pk, "question": "hi"}).status_code == 403
    for url in (START_URL, turn_url(conversation.pk), SEARCH_URL):
        assert strict.get(url).status_code == 405
    page = strict.get(PAGE_URL)
    token = page.cookies["csrftoken"].value
    started = strict.post(START_URL, {"tenant": tenant.pk, "knowledge_base": kb.pk}, headers={"X-CSRFToken": token})
    assert started.status_code == 201


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "x" * 4001}, "query"),
        ({"query": "price", "top_k": "0"}, "top_k"),
        ({"query": "price", "top_k": "101"}, "top_k"),
        ({"query": "price", "top_k": "ten"}, "top_k"),
    ],
)
def test_a_bad_search_is_a_message(admin_client, tenant, kb, data, field):
    response = admin_client.post(SEARCH_URL, {"tenant": tenant.pk, "knowledge_base": kb.pk, "top_k": "5", **data})
    assert response.status_code == 400
    assert list(response.json()["extra"]["fields"]) == [field]


# --- with the real services ------------------------------------------------------------------------------------------
@pytest.fixture
def handbook(redis_available, milvus_server, tenant):
    return indexed_kb(tenant, name="Handbook")


@pytest.mark.parametrize("group_by_document", [True, False])
def test_the_retrieval_test_gives_the_search_endpoints_results(admin_client, tenant, handbook, group_by_document):
    api = _client_for(tenant).post(
        f"/api/v1/knowledge-bases/{handbook.pk}/search/",
        {"query": "how do I export a report", "limit": 3, "group_by_document": group_by_document},
        format="json",
    )
    assert api.status_code == 200, api.content
    data = {"tenant": tenant.pk, "knowledge_base": handbook.pk, "query": "how do I export a report", "top_k": "3"}
    if group_by_document:
        data["group_by_document"] = "on"
    response = admin_client.post(SEARCH_URL, data)
    assert response.status_code == 200, response.content
    body = response.json()
    expected = api.json()["results"]
    assert [(r["chunk_id"], r["document_title"]) for r in body["results"]] == [
        (r["chunk_id"], r["document_title"]) for r in expected
    ]
    assert [r["score"] for r in body["results"]] == pytest.approx([r["score"] for r in expected], abs=1e-5)
    assert body["results"][0]["document_external_id"] == "export"
    assert body["index"] == api.json()["index"]


def test_a_turn_through_the_playground_is_a_turn_of_the_pipeline(admin_client, tenant, handbook):
    conversation_id = admin_client.post(START_URL, {"tenant": tenant.pk, "knowledge_base": handbook.pk}).json()[
        "conversation"
    ]
    first = admin_client.post(
        turn_url(conversation_id), {"tenant": tenant.pk, "question": "How do I reset my password?"}
    )
    assert first.status_code == 200, first.content
    first = first.json()
    assert first["dedup"]["action"] == DedupAction.ANSWERED
    assert first["sources"][0]["document_title"] == "password"
    second = admin_client.post(
        turn_url(conversation_id), {"tenant": tenant.pk, "question": "How can I reset my password?"}
    )
    second = second.json()
    assert second["dedup"]["action"] == DedupAction.SERVED_CACHED
    assert second["dedup"]["matched_turn_id"] == first["turn_id"] and second["answer"] == first["answer"]
    forced = admin_client.post(
        turn_url(conversation_id),
        {"tenant": tenant.pk, "question": "How can I reset my password?", "force_refresh": "on"},
    ).json()
    assert forced["dedup"]["action"] != DedupAction.SERVED_CACHED
    turns = Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).order_by("number")
    assert [t.pk for t in turns] == [first["turn_id"], second["turn_id"], forced["turn_id"]]
    # the audit event each turn wrote, which the page links to
    assert admin_client.get(second["audit_url"]).status_code == 200


def events_of(response) -> list[tuple[str, dict]]:
    """The Server-Sent Events of a streamed response, read to the end: (type, data) each."""
    assert response["Content-Type"].startswith("text/event-stream"), response["Content-Type"]
    assert "no-cache" in response["Cache-Control"] and response["X-Accel-Buffering"] == "no"
    events = []
    for block in b"".join(response.streaming_content).decode().split("\n\n"):
        if block:
            head, data = block.split("\n")
            events.append((head.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def test_a_streamed_playground_turn_is_the_apis_events_with_what_the_page_draws(admin_client, tenant, handbook):
    conversation_id = admin_client.post(START_URL, {"tenant": tenant.pk, "knowledge_base": handbook.pk}).json()[
        "conversation"
    ]
    url = turn_url(conversation_id)
    events = events_of(
        admin_client.post(
            url, {"tenant": tenant.pk, "question": "How do I reset my password?"}, HTTP_ACCEPT="text/event-stream"
        )
    )
    names = [name for name, _ in events]
    assert names[:2] == ["decision", "sources"] and names[-1] == "done" and set(names[2:-1]) == {"delta"}, names
    data = dict(events)
    assert data["decision"]["dedup"]["action"] == DedupAction.ANSWERED and data["decision"]["answer"] is None
    assert data["sources"]["sources"][0]["document_title"] == "password"
    assert data["sources"]["index"]["status"] == "current"
    turn = Turn.objects.for_tenant(tenant).get(pk=data["done"]["turn_id"])
    assert "".join(d["text"] for name, d in events if name == "delta") == data["done"]["answer"] == turn.answer
    assert (data["done"]["number"], data["done"]["question"]) == (1, "How do I reset my password?")
    assert admin_client.get(data["done"]["audit_url"]).status_code == 200

    served = events_of(
        admin_client.post(
            url, {"tenant": tenant.pk, "question": "How can I reset my password?"}, HTTP_ACCEPT="text/event-stream"
        )
    )
    assert [name for name, _ in served] == ["decision", "sources", "done"]
    assert served[0][1]["dedup"]["action"] == DedupAction.SERVED_CACHED
    assert served[0][1]["answer"] == served[2][1]["answer"] == turn.answer

    # A refusal comes before any event, as JSON, and writes nothing.
    refused = admin_client.post(url, {"tenant": tenant.pk, "question": "a\u0007b"}, HTTP_ACCEPT="text/event-stream")
    assert refused.status_code == 400 and refused.json()["message"].startswith("The question is not valid:")
    assert Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).count() == 2


def test_a_streamed_playground_turn_that_cannot_be_recorded_ends_with_an_error_event(
    admin_client, tenant, handbook, monkeypatch
):
    conversation_id = admin_client.post(START_URL, {"tenant": tenant.pk, "knowledge_base": handbook.pk}).json()[
        "conversation"
    ]

    def broken(record):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(turns, "turn_persist", broken)
    events = events_of(
        admin_client.post(
            turn_url(conversation_id),
            {"tenant": tenant.pk, "question": "How do I reset my password?"},
            HTTP_ACCEPT="text/event-stream",
        )
    )
    name, error = events[-1]
    assert name == "error" and (error["status"], error["turn_id"], error["number"], error["audit_url"]) == (
        503,
        None,
        None,
        None,
    )
    assert not Turn.objects.for_tenant(tenant).exists()


# --- pure parts -----------------------------------------------------------------------------------------------------
def test_turn_display_carries_the_decision_and_each_sources_document_title():
    turn = Turn(pk=7, number=2)
    outcome = TurnOutcome(
        turn=turn,
        answer="Open Settings.",
        sources=[
            SourceView(chunk_id=3, document_id=9, external_id="a#0", document_external_id="a", score=0.8, text="t")
        ],
        action=DedupAction.SERVED_CACHED,
        intent="other",
        similarity=0.95,
        matched_turn_id=5,
        excluded_count=0,
        relaxed=False,
        reason="similar question in this conversation",
    )
    body = turn_display(outcome=outcome, question="q?", document_titles={9: "Guide"}, audit_url="/a/")
    assert body["sources"][0]["document_title"] == "Guide"
    assert body["dedup"] == {
        "action": "served_cached",
        "intent": "other",
        "similarity": 0.95,
        "matched_turn_id": 5,
        "excluded_count": 0,
        "relaxed": False,
        "shadow_action": None,
        "reason": "similar question in this conversation",
    }
    assert (body["turn_id"], body["number"], body["question"], body["index"]) == (7, 2, "q?", None)
    json.dumps(body)


def test_form_errors_name_every_field_at_fault():
    from conversations.admin.playground import PlaygroundSearchForm

    form = PlaygroundSearchForm({"knowledge_base": "x", "query": "", "top_k": "0"})
    assert not form.is_valid()
    message, fields = form_errors_message(form)
    assert set(fields) == {"knowledge_base", "query", "top_k"}
    assert message.startswith("The request is not valid: knowledge_base: Enter a whole number.")


# --- links to it --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("role", "links"),
    [
        (Role.ADMIN, ["kb-link-playground", "kb-link-dashboard", "kb-link-settings"]),
        (Role.SUPPORT, ["kb-link-dashboard"]),
        (Role.VIEWER, []),
        (None, []),
    ],
)
def test_the_admin_index_links_the_pages_the_users_role_opens(client, tenant, role, links):
    user = user_with_role(tenant, role) if role else UserFactory()
    client.force_login(user)
    page = client.get(reverse("admin:index")).content.decode()
    shown = [link for link in ("kb-link-playground", "kb-link-dashboard", "kb-link-settings") if f'id="{link}"' in page]
    assert shown == links
    assert (f'<a href="{PAGE_URL}" id="kb-link-playground">' in page) is ("kb-link-playground" in links)


@pytest.mark.parametrize(("role", "linked"), [(Role.ADMIN, True), (Role.SUPPORT, False)])
def test_the_dashboard_links_the_playground_for_tenant_admins_only(client, tenant, role, linked):
    client.force_login(user_with_role(tenant, role))
    page = client.get(reverse("admin:conversations_dedupevent_dashboard")).content.decode()
    assert (f'href="{PAGE_URL}?tenant={tenant.pk}"' in page) is linked
