"""The OpenAI-compatible chat endpoint, `POST /api/v1/chat/completions`: OpenAI's request, response, stream and error
shapes over the platform's own turn; the official `openai` client against a live server; tenant isolation.

The refusals need no service (they happen before a turn embeds or searches anything); the turns run on real Redis and
`milvus-lite server` (PostgreSQL under CI), answered by the extractive answerer."""

from __future__ import annotations

import json

import openai
import pytest
from django.db import OperationalError
from django.db.models import QuerySet
from rest_framework.test import APIClient

from conversations.models import AnswerState, Conversation, DedupEvent, Turn
from conversations.services import conversation_create
from conversations.turn import turns
from conversations.turn.answering import NOTHING_FOUND
from conversations.turn.transcripts import conversation_of_transcript, transcript_digest, transcript_record
from retrieval.models import KnowledgeBase
from tenants.scopes import Scope
from tenants.services import api_key_create
from tests.conversations.fake_llm import Reply
from tests.conversations.helpers import indexed_kb
from tests.conversations.test_streaming import llm  # noqa: F401  (the fixture: a fake OpenAI-compatible answer service)

pytestmark = pytest.mark.django_db

URL = "/api/v1/chat/completions"
QUESTION = "How do I reset my password?"
PARAPHRASE = "How can I reset my password?"
ERROR_FIELDS = {"message", "type", "param", "code"}


def bearer_client(tenant, scopes=(Scope.CHAT,), knowledge_base=None) -> APIClient:
    api_key, raw_key = api_key_create(tenant=tenant, name="chat", scopes=scopes, knowledge_base=knowledge_base)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    client.raw_key = raw_key
    return client


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def post(client, body: dict, **headers):
    return client.post(URL, body, format="json", **headers)


def openai_error(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_FIELDS, body
    return body["error"]


def records(tenant) -> tuple[int, int, int]:
    return (
        Conversation.objects.for_tenant(tenant).count(),
        Turn.objects.for_tenant(tenant).count(),
        DedupEvent.objects.for_tenant(tenant).count(),
    )


@pytest.fixture
def chat(tenant):
    return bearer_client(tenant)


@pytest.fixture
def bare_kb(tenant):
    """A knowledge base with nothing indexed: enough for every refusal, which comes before a search."""
    return KnowledgeBase.objects.create(tenant=tenant, name="handbook")


# --- authentication and scope ------------------------------------------------------------------------------------


def test_a_missing_key_is_a_401_in_openais_shape(bare_kb):
    response = post(APIClient(), {"model": f"kb-{bare_kb.pk}", "messages": user(QUESTION)})
    error = openai_error(response, 401)
    assert (error["type"], error["code"]) == ("authentication_error", "missing_api_key")
    assert "Bearer" in error["message"] and response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("header", ["Bearer kb_wrong_key", "Bearer ", "Basic abc", "Token x"])
def test_a_wrong_key_is_a_401_in_openais_shape(bare_kb, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    error = openai_error(post(client, {"model": f"kb-{bare_kb.pk}", "messages": user(QUESTION)}), 401)
    assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")


def test_a_key_without_the_chat_scope_is_a_403_naming_it(tenant, bare_kb):
    client = bearer_client(tenant, scopes=(Scope.INGEST,))
    error = openai_error(post(client, {"model": f"kb-{bare_kb.pk}", "messages": user(QUESTION)}), 403)
    assert (error["type"], error["code"]) == ("permission_error", "insufficient_scope")
    assert '"chat" scope' in error["message"]
    assert records(bare_kb.tenant) == (0, 0, 0)


def test_the_api_key_header_still_works_here_and_bearer_only_here(tenant, chat):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {chat.raw_key}")
    error = openai_error(post(client, {}), 400)  # past authentication and scope: the body is checked
    assert error["param"] in ("model", "messages") and error["code"] == "missing_required_parameter"
    whoami = chat.get("/api/v1/whoami/")
    assert whoami.status_code == 401 and "Api-Key" in whoami.json()["message"]


# --- the request: what is refused, in OpenAI's shape -------------------------------------------------------------


def test_an_unknown_field_is_a_400_in_openais_shape(chat, bare_kb):
    body = {"model": f"kb-{bare_kb.pk}", "messages": user(QUESTION), "temprature": 0.2}
    error = openai_error(post(chat, body), 400)
    assert error == {
        "message": error["message"],
        "type": "invalid_request_error",
        "param": "temprature",
        "code": "unknown_parameter",
    }
    assert error["message"].startswith("Unknown parameter: 'temprature'.") and "temperature" in error["message"]
    assert records(bare_kb.tenant) == (0, 0, 0)


def test_an_unknown_field_inside_a_message_is_a_400(chat, bare_kb):
    body = {"model": f"kb-{bare_kb.pk}", "messages": [{"role": "user", "content": QUESTION, "contnet": "x"}]}
    error = openai_error(post(chat, body), 400)
    assert (error["param"], error["code"]) == ("messages[0].contnet", "unknown_parameter")


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ([{"role": "system", "content": "Be brief."}], "messages"),
        (
            [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "Open Settings."}],
            "messages[1].role",
        ),
        ([{"role": "robot", "content": QUESTION}], "messages[0].role"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "messages[0].content[0]"),
        ("How do I reset my password?", "messages"),
    ],
)
def test_messages_without_a_users_question_are_a_400_naming_the_message(chat, bare_kb, messages, param):
    error = openai_error(post(chat, {"model": f"kb-{bare_kb.pk}", "messages": messages}), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert records(bare_kb.tenant) == (0, 0, 0)


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"n": 2}, "n", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "unsupported_parameter"),
        ({"tool_choice": "required"}, "tool_choice", "unsupported_parameter"),
        ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_value"),
        ({"logprobs": True}, "logprobs", "unsupported_parameter"),
        ({"modalities": ["text", "audio"]}, "modalities", "unsupported_value"),
        ({"stream_options": {"include_usage": True, "extra": 1}}, "stream_options.extra", "unknown_parameter"),
        ({"temperature": "hot"}, "temperature", "invalid_value"),
    ],
)
def test_what_the_platform_cannot_do_is_a_400_naming_the_field(chat, bare_kb, fields, param, code):
    body = {"model": f"kb-{bare_kb.pk}", "messages": user(QUESTION), **fields}
    error = openai_error(post(chat, body), 400)
    assert (error["param"], error["code"]) == (param, code), error


def test_what_the_platform_does_not_read_is_accepted(chat):
    """Sampling settings and the like pass validation (the 404 is the next check: the model names no knowledge
    base), so a client that always sends them works."""
    body = {
        "model": "kb-999999",
        "messages": user(QUESTION),
        "temperature": 0.2,
        "top_p": 1,
        "max_tokens": 200,
        "max_completion_tokens": 200,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "stop": ["\n\n"],
        "seed": 1,
        "n": 1,
        "user": "alice",
        "metadata": {"a": "b"},
        "store": False,
        "tools": [],
        "tool_choice": "none",
        "response_format": {"type": "text"},
        "logprobs": False,
        "parallel_tool_calls": False,
        "stream_options": {"include_usage": True},
    }
    assert openai_error(post(chat, body), 404)["code"] == "model_not_found"


def test_a_body_that_is_not_json_is_refused_in_openais_shape(chat, bare_kb):
    error = openai_error(chat.post(URL, "{not json", content_type="application/json"), 400)
    assert error["type"] == "invalid_request_error"
    form = chat.post(URL, {"model": f"kb-{bare_kb.pk}", "messages": "x"})  # multipart
    assert openai_error(form, 415)["code"] == "unsupported_media_type"


def test_a_question_the_turn_refuses_leaves_no_new_conversation(chat, bare_kb):
    error = openai_error(post(chat, {"model": f"kb-{bare_kb.pk}", "messages": user("How\x07 do I?")}), 400)
    assert error["param"] == "messages"
    assert records(bare_kb.tenant) == (0, 0, 0)


# --- models, conversations and tenants ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4o", "kb-999999", "handbook"])
def test_a_model_that_names_no_knowledge_base_is_a_404(chat, bare_kb, model):
    error = openai_error(post(chat, {"model": model, "messages": user(QUESTION)}), 404)
    assert (error["param"], error["code"], error["type"]) == ("model", "model_not_found", "invalid_request_error")
    assert model in error["message"]


def test_one_tenants_key_cannot_reach_another_tenants_knowledge_base(other_tenant, bare_kb):
    client = bearer_client(other_tenant, scopes=(Scope.ADMIN,))
    error = openai_error(post(client, {"model": f"kb-{bare_kb.pk}", "messages": user(QUESTION)}), 404)
    assert error["code"] == "model_not_found" and "handbook" not in json.dumps(error)
    assert records(bare_kb.tenant) == records(other_tenant) == (0, 0, 0)


def test_one_tenants_key_cannot_reach_another_tenants_conversation(tenant, other_tenant, bare_kb):
    conversation = conversation_create(tenant=tenant, knowledge_base_id=bare_kb.pk, user_id="alice")
    theirs = KnowledgeBase.objects.create(tenant=other_tenant, name="theirs")
    client = bearer_client(other_tenant, scopes=(Scope.ADMIN,))
    for model in (f"kb-{theirs.pk}", f"kb-{bare_kb.pk}"):
        body = {"model": model, "messages": user(QUESTION), "conversation_id": conversation.pk}
        error = openai_error(post(client, body), 404)
        assert error["code"] in ("conversation_not_found", "model_not_found") and "alice" not in json.dumps(error)
    assert records(tenant) == (1, 0, 0) and records(other_tenant) == (0, 0, 0)


def test_a_key_limited_to_one_knowledge_base_reaches_no_other(tenant, bare_kb):
    other_kb = KnowledgeBase.objects.create(tenant=tenant, name="other")
    conversation = conversation_create(tenant=tenant, knowledge_base_id=other_kb.pk)
    client = bearer_client(tenant, knowledge_base=bare_kb)
    assert openai_error(post(client, {"model": f"kb-{other_kb.pk}", "messages": user(QUESTION)}), 404)
    body = {"model": f"kb-{other_kb.pk}", "messages": user(QUESTION), "conversation_id": conversation.pk}
    assert openai_error(post(client, body), 404)["code"] == "conversation_not_found"


def test_a_conversation_is_continued_only_over_its_own_knowledge_base_and_user(tenant, chat, bare_kb):
    other_kb = KnowledgeBase.objects.create(tenant=tenant, name="other")
    conversation = conversation_create(tenant=tenant, knowledge_base_id=bare_kb.pk, user_id="alice")
    body = {"model": f"kb-{other_kb.pk}", "messages": user(QUESTION), "conversation_id": conversation.pk}
    error = openai_error(post(chat, body), 400)
    assert (error["param"], error["code"]) == ("model", "model_mismatch") and f"kb-{bare_kb.pk}" in error["message"]
    body = {**body, "model": f"kb-{bare_kb.pk}", "user": "bob"}
    assert openai_error(post(chat, body), 400)["param"] == "user"
    assert records(tenant) == (1, 0, 0)


# --- turns (real Redis and Milvus Lite) --------------------------------------------------------------------------


def test_a_transcript_leads_only_to_its_own_tenants_conversation(tenant, other_tenant, bare_kb):
    conversation = conversation_create(tenant=tenant, knowledge_base_id=bare_kb.pk)
    messages = [*user(QUESTION), {"role": "assistant", "content": "Open Settings."}]
    transcript_record(tenant=tenant, conversation_id=conversation.pk, messages=messages[:1], answer="Open Settings.")
    digest = transcript_digest(messages)
    found = conversation_of_transcript(tenant=tenant, knowledge_base_id=bare_kb.pk, user_id=None, digest=digest)
    assert found == conversation.pk
    assert (
        conversation_of_transcript(tenant=other_tenant, knowledge_base_id=bare_kb.pk, user_id=None, digest=digest)
        is None
    )
    # Recording in another tenant's name touches nothing.
    transcript_record(tenant=other_tenant, conversation_id=conversation.pk, messages=user("Other"), answer="Other.")
    assert Conversation.objects.for_tenant(tenant).get(pk=conversation.pk).transcript_digest == digest


@pytest.fixture
def kb(redis_available, milvus_server, tenant):
    return indexed_kb(tenant)


def test_a_turn_answers_as_a_chat_completion_with_the_platforms_decision(tenant, chat, kb):
    response = post(chat, {"model": f"kb-{kb.pk}", "messages": user(QUESTION), "user": "alice"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "kbplatform"}
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert body["model"] == f"kb-{kb.pk}" and isinstance(body["created"], int)
    [choice] = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant" and "[1]" in choice["message"]["content"]
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    platform = body["kbplatform"]
    conversation = Conversation.objects.for_tenant(tenant).get()
    turn = Turn.objects.for_tenant(tenant).get()
    assert platform["conversation_id"] == conversation.pk and conversation.user_id == "alice"
    assert platform["turn_id"] == turn.pk and turn.answer == choice["message"]["content"]
    assert platform["dedup"]["action"] == "answered" and platform["dedup"]["matched_turn_id"] is None
    assert platform["sources"][0]["document_external_id"] == "password"
    assert platform["index"]["status"] and platform["rewritten_question"] is None


def test_a_repeated_question_in_the_conversation_is_served_the_stored_answer(tenant, chat, kb):
    first = post(chat, {"model": f"kb-{kb.pk}", "messages": user(QUESTION)}).json()
    conversation_id = first["kbplatform"]["conversation_id"]
    messages = [
        {"role": "system", "content": "Be brief."},
        *user(QUESTION),
        {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
        *user(PARAPHRASE),
    ]
    body = {"model": f"kb-{kb.pk}", "messages": messages, "conversation_id": conversation_id}
    second = post(chat, body).json()
    dedup = second["kbplatform"]["dedup"]
    assert dedup["action"] == "served_cached" and dedup["matched_turn_id"] == first["kbplatform"]["turn_id"]
    assert dedup["similarity"] > 0.9 and "reason" in dedup
    assert second["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    assert second["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert second["kbplatform"]["conversation_id"] == conversation_id and records(tenant) == (1, 2, 2)
    refreshed = post(chat, {**body, "force_refresh": True}).json()
    assert refreshed["kbplatform"]["dedup"]["action"] != "served_cached"


def test_a_client_that_sends_its_transcript_back_goes_on_in_its_conversation(tenant, chat, kb):
    """A chat front end sends the whole conversation each time and knows nothing of `conversation_id`: each request
    started a conversation of its own, so a question asked again in other words was answered afresh."""
    model = f"kb-{kb.pk}"
    first = post(chat, {"model": model, "messages": user(QUESTION)}).json()
    answer = first["choices"][0]["message"]["content"]
    messages = [{"role": "system", "content": "Be brief."}, *user(QUESTION), {"role": "assistant", "content": answer}]
    second = post(chat, {"model": model, "messages": [*messages, *user(PARAPHRASE)]}).json()
    assert second["kbplatform"]["conversation_id"] == first["kbplatform"]["conversation_id"]
    assert second["kbplatform"]["dedup"]["action"] == "served_cached" and records(tenant) == (1, 2, 2)
    # Streamed, with the answer as the client assembled it (its line breaks and spaces its own) and the question in
    # text parts: the third turn is the same conversation's too.
    messages += [
        {"role": "user", "content": [{"type": "text", "text": PARAPHRASE}]},
        {"role": "assistant", "content": second["choices"][0]["message"]["content"].replace(" [1]", " [1]\r\n") + " "},
        *user("How do I get a refund?"),
    ]
    chunks = chunks_of(post(chat, {"model": model, "messages": messages, "stream": True}))
    assert chunks[-1]["kbplatform"]["conversation_id"] == first["kbplatform"]["conversation_id"]
    third = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    # The stream's answer is what the next request's transcript is read against.
    messages += [{"role": "assistant", "content": third}, *user("What about a refund after it ships?")]
    fourth = post(chat, {"model": model, "messages": messages}).json()
    assert fourth["kbplatform"]["conversation_id"] == first["kbplatform"]["conversation_id"]
    assert records(tenant) == (1, 4, 4)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_transcript_the_database_cannot_record_leaves_the_turn_standing(tenant, chat, kb, monkeypatch, stream):
    """The turn is recorded and its answer sent before its transcript is: failing then would tell the client a turn
    failed that stands, and it would ask again."""
    update = QuerySet.update

    def failing(queryset, **fields):
        if "transcript_digest" in fields:
            raise OperationalError("server closed the connection unexpectedly")
        return update(queryset, **fields)

    monkeypatch.setattr(QuerySet, "update", failing)
    body = {"model": f"kb-{kb.pk}", "messages": user(QUESTION), "stream": stream}
    if stream:
        chunks = chunks_of(post(chat, body))
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    else:
        assert post(chat, body).status_code == 200
    assert records(tenant) == (1, 1, 1)
    assert Conversation.objects.for_tenant(tenant).get().transcript_digest == ""


def test_a_transcript_goes_on_only_in_the_conversation_it_is_the_last_state_of(tenant, chat, kb):
    """Another user's, another knowledge base's, an edited or an older transcript starts a new conversation."""
    model = f"kb-{kb.pk}"
    first = post(chat, {"model": model, "messages": user(QUESTION), "user": "alice"}).json()
    kept = [*user(QUESTION), {"role": "assistant", "content": first["choices"][0]["message"]["content"]}]
    conversation_id = first["kbplatform"]["conversation_id"]

    def conversation_of(messages, **fields) -> int:
        reply = post(chat, {"model": model, "messages": [*messages, *user(PARAPHRASE)], **fields})
        assert reply.status_code == 200, reply.content
        return reply.json()["kbplatform"]["conversation_id"]

    assert conversation_of(kept) != conversation_id  # no user: alice's conversation is not reached
    assert conversation_of(kept, user="bob") != conversation_id
    edited = [*user(QUESTION), {"role": "assistant", "content": "Something the platform never said."}]
    assert conversation_of(edited, user="alice") != conversation_id
    assert conversation_of(kept, user="alice") == conversation_id
    # The conversation has gone on: the same transcript again is a branch of it, a conversation of its own.
    assert conversation_of(kept, user="alice") != conversation_id
    assert Conversation.objects.for_tenant(tenant).get(pk=conversation_id).turn_count == 2


def test_a_turn_taken_through_the_messages_endpoint_ends_the_chat_transcripts_hold(tenant, chat, kb):
    """The transcript the chat client holds no longer holds the conversation's last turn."""
    model = f"kb-{kb.pk}"
    first = post(chat, {"model": model, "messages": user(QUESTION)}).json()
    conversation_id = first["kbplatform"]["conversation_id"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {chat.raw_key}")
    asked = client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": "How do I get a refund?"}, format="json"
    )
    assert asked.status_code == 200, asked.content
    kept = [*user(QUESTION), {"role": "assistant", "content": first["choices"][0]["message"]["content"]}]
    again = post(chat, {"model": model, "messages": [*kept, *user(PARAPHRASE)]}).json()
    assert again["kbplatform"]["conversation_id"] != conversation_id


def test_the_chat_turn_is_the_messages_endpoints_turn(tenant, chat, kb):
    """A question asked here is a stored answer the platform's own messages endpoint serves, and the other way round:
    one pipeline, one dedup decision, one audit trail."""
    first = post(chat, {"model": f"kb-{kb.pk}", "messages": user(QUESTION)}).json()
    conversation_id = first["kbplatform"]["conversation_id"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {chat.raw_key}")
    message = client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": PARAPHRASE}, format="json"
    ).json()
    assert message["dedup"]["action"] == "served_cached"
    assert message["dedup"]["matched_turn_id"] == first["kbplatform"]["turn_id"]
    assert message["answer"] == first["choices"][0]["message"]["content"]
    events = DedupEvent.objects.for_tenant(tenant).order_by("pk")
    assert [event.action for event in events] == ["answered", "served_cached"]


def chunks_of(response) -> list:
    assert response.status_code == 200 and response.streaming, response.content
    assert response["Content-Type"].startswith("text/event-stream")
    text = b"".join(response.streaming_content).decode()
    blocks = [block for block in text.split("\n\n") if block.strip()]
    assert all(block.startswith("data: ") for block in blocks)
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(block.removeprefix("data: ")) for block in blocks[:-1]]


def test_a_streamed_turn_sends_role_then_content_then_the_final_chunk_then_done(tenant, chat, kb):
    body = {"model": f"kb-{kb.pk}", "messages": user(QUESTION), "stream": True}
    chunks = chunks_of(post(chat, body))
    assert {(c["object"], c["model"]) for c in chunks} == {("chat.completion.chunk", f"kb-{kb.pk}")}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[-1] == {}
    pieces = [delta["content"] for delta in deltas[1:-1]]
    assert len(pieces) >= 2  # the extractive answer, sentence by sentence
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]
    first, last = chunks[0]["kbplatform"], chunks[-1]["kbplatform"]
    turn = Turn.objects.for_tenant(tenant).get()
    assert "".join(pieces) == turn.answer
    assert first["turn_id"] is None and last["turn_id"] == turn.pk
    assert first["conversation_id"] == last["conversation_id"] == turn.conversation_id
    assert first["dedup"] == last["dedup"] and last["dedup"]["action"] == "answered"
    assert last["sources"][0]["document_external_id"] == "password"
    assert all("kbplatform" not in c for c in chunks[1:-1])


def test_a_streamed_repeat_is_the_stored_answer_in_one_chunk_with_usage_when_asked(tenant, chat, kb):
    first = post(chat, {"model": f"kb-{kb.pk}", "messages": user(QUESTION)}).json()
    body = {
        "model": f"kb-{kb.pk}",
        "messages": user(PARAPHRASE),
        "stream": True,
        "stream_options": {"include_usage": True},
        "conversation_id": first["kbplatform"]["conversation_id"],
    }
    chunks = chunks_of(post(chat, body))
    assert [c["choices"][0]["delta"] if c["choices"] else None for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": first["choices"][0]["message"]["content"]},
        {},
        None,
    ]
    assert chunks[0]["kbplatform"]["dedup"]["action"] == "served_cached"
    assert chunks[2]["kbplatform"]["dedup"]["matched_turn_id"] == first["kbplatform"]["turn_id"]
    assert chunks[-1]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert [c["usage"] for c in chunks[:-1]] == [None, None, None]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_question_the_knowledge_base_does_not_cover_is_told_so_with_no_source(tenant, chat, kb, stream):
    """The extractive answerer quoted the nearest passages of any question, sharing a word with it or not."""
    body = {"model": f"kb-{kb.pk}", "messages": user("What's the weather like in Paris tomorrow?"), "stream": stream}
    if stream:
        chunks = chunks_of(post(chat, body))
        content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        platform = chunks[-1]["kbplatform"]
    else:
        reply = post(chat, body).json()
        content, platform = reply["choices"][0]["message"]["content"], reply["kbplatform"]
    assert content == NOTHING_FOUND and platform["sources"] == []
    assert platform["dedup"]["action"] == "answered" and Turn.objects.for_tenant(tenant).get().answer == NOTHING_FOUND


def test_an_answer_service_failing_mid_answer_is_an_error_chunk_and_a_failed_turn(tenant, chat, kb, llm):  # noqa: F811
    llm.replies = [Reply(pieces=["Half an ", "answer"], break_after=1)]
    chunks = chunks_of(post(chat, {"model": f"kb-{kb.pk}", "messages": user(QUESTION), "stream": True}))
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [
        {"role": "assistant", "content": ""},
        {"content": "Half an "},
    ]
    error = chunks[-1]
    assert set(error) == {"error", "kbplatform"} and set(error["error"]) == ERROR_FIELDS
    assert (error["error"]["type"], error["error"]["code"]) == ("server_error", "upstream_error")
    turn = Turn.objects.for_tenant(tenant).get()
    assert error["kbplatform"]["turn_id"] == turn.pk and turn.answer_state == AnswerState.FAILED


def test_a_streamed_turn_the_database_cannot_record_is_a_503_error_chunk_with_no_turn(
    tenant,
    chat,
    kb,
    llm,  # noqa: F811
    monkeypatch,
):
    llm.replies = [Reply(pieces=["A whole ", "answer."])]

    def broken(record):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(turns, "turn_persist", broken)
    chunks = chunks_of(post(chat, {"model": f"kb-{kb.pk}", "messages": user(QUESTION), "stream": True}))
    error = chunks[-1]
    assert set(error) == {"error", "kbplatform"} and set(error["error"]) == ERROR_FIELDS
    assert error["error"]["code"] == "service_unavailable" and error["kbplatform"]["turn_id"] is None
    assert "could not be recorded" in error["error"]["message"]
    assert records(tenant)[1:] == (0, 0)


def test_an_answer_service_failing_without_streaming_is_a_502_leaving_no_conversation(tenant, chat, kb, llm):  # noqa: F811
    llm.replies = [Reply(status=500), Reply(status=500), Reply(status=500)]
    error = openai_error(post(chat, {"model": f"kb-{kb.pk}", "messages": user(QUESTION)}), 502)
    assert (error["type"], error["code"]) == ("server_error", "upstream_error")
    assert records(tenant) == (0, 0, 0)


# --- the model list ---------------------------------------------------------------------------------------------


def test_the_model_list_names_each_knowledge_base_the_key_reaches_as_its_chat_model(tenant, other_tenant, chat):
    second = KnowledgeBase.objects.create(tenant=tenant, name="billing", embedding_model="use-multilingual-v3")
    first = KnowledgeBase.objects.create(tenant=tenant, name="account")
    KnowledgeBase.objects.create(tenant=other_tenant, name="theirs")
    response = chat.get("/api/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert [model["id"] for model in body["data"]] == [f"kb-{first.pk}", f"kb-{second.pk}"]
    listed = body["data"][1]
    assert listed["object"] == "model" and listed["owned_by"] == tenant.slug
    assert listed["created"] == int(second.created_at.timestamp())
    assert listed["kbplatform"] == {
        "knowledge_base_id": second.pk,
        "name": "billing",
        "embedding_model": "use-multilingual-v3",
    }
    # A key limited to one knowledge base lists that one only.
    limited = bearer_client(tenant, knowledge_base=second)
    assert [model["id"] for model in limited.get("/api/v1/models").json()["data"]] == [f"kb-{second.pk}"]


def test_the_model_list_refuses_in_openais_shape(tenant, bare_kb):
    assert openai_error(APIClient().get("/api/v1/models"), 401)["code"] == "missing_api_key"
    ingest_only = bearer_client(tenant, scopes=(Scope.INGEST,))
    assert openai_error(ingest_only.get("/api/v1/models"), 403)["code"] == "insufficient_scope"


# --- the official openai client against a live server ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_openai_client_streams_a_turn_and_reads_its_decision(live_server, tenant, kb):
    _, raw_key = api_key_create(tenant=tenant, name="openai-client", scopes=[Scope.CHAT])
    client = openai.OpenAI(base_url=f"{live_server.url}/api/v1", api_key=raw_key, max_retries=0, timeout=60)
    model = f"kb-{kb.pk}"

    first = client.chat.completions.create(model=model, messages=user(QUESTION), user="alice")
    assert first.object == "chat.completion" and first.choices[0].message.content
    assert first.kbplatform["dedup"]["action"] == "answered"
    conversation_id = first.kbplatform["conversation_id"]

    stream = client.chat.completions.create(
        model=model,
        messages=user(PARAPHRASE),
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"conversation_id": conversation_id},
    )
    chunks = list(stream)
    answer = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert answer == first.choices[0].message.content
    final = next(chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason == "stop")
    decision = final.kbplatform["dedup"]
    assert decision["action"] == "served_cached" and decision["matched_turn_id"] == first.kbplatform["turn_id"]
    assert decision["similarity"] > 0.9 and final.kbplatform["conversation_id"] == conversation_id
    assert chunks[-1].usage.total_tokens == 0
    assert records(tenant) == (1, 2, 2)

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=model, messages=user(QUESTION), extra_body={"temprature": 0})
    assert refused.value.code == "unknown_parameter" and refused.value.param == "temprature"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=user(QUESTION))
    assert missing.value.code == "model_not_found"
    wrong = openai.OpenAI(base_url=f"{live_server.url}/api/v1", api_key="kb_wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused_key:
        wrong.chat.completions.create(model=model, messages=user(QUESTION))
    assert refused_key.value.code == "invalid_api_key"
    assert records(tenant) == (1, 2, 2)
    # The model list offers the knowledge base under the name the completion took.
    assert [listed.id for listed in client.models.list()] == [model]


@pytest.mark.django_db(transaction=True)
def test_the_openai_client_in_a_plain_message_loop_keeps_one_conversation(live_server, tenant, kb):
    """The loop every chat front end and tutorial writes: append the reply, append the next question, send it all."""
    _, raw_key = api_key_create(tenant=tenant, name="openai-loop", scopes=[Scope.CHAT])
    client = openai.OpenAI(base_url=f"{live_server.url}/api/v1", api_key=raw_key, max_retries=0, timeout=60)
    messages = [{"role": "system", "content": "You answer from the help centre."}]
    decisions = []
    for question in (QUESTION, "How do I get a refund?", PARAPHRASE):
        messages.append({"role": "user", "content": question})
        stream = client.chat.completions.create(model=f"kb-{kb.pk}", messages=messages, stream=True)
        chunks = list(stream)
        messages.append(
            {"role": "assistant", "content": "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)}
        )
        decisions.append(chunks[-1].kbplatform["dedup"]["action"])
    assert decisions == ["answered", "answered", "served_cached"]
    assert records(tenant) == (1, 3, 3)
