"""Turns answered as Server-Sent Events, history and follow-up rewrites, through the REST API on real Redis and
`milvus-lite server` (PostgreSQL under CI), with a local fake OpenAI-compatible answer service that streams."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
from django.core.signals import request_finished
from django.db import OperationalError, close_old_connections
from django.utils import timezone

from conversations.models import AnswerState, ConsumedItem, Conversation, DedupEvent, Turn
from conversations.services import dedup_policy_update
from conversations.turn import turns
from conversations.turn.state import vector_from_bytes
from retrieval.embeddings import embed_query
from tests.conftest import _client_for
from tests.conversations.fake_llm import FakeLLM, Reply
from tests.conversations.helpers import indexed_kb
from tests.conversations.test_api import ask, start
from tests.services import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb(redis_available, milvus_server, tenant):
    return indexed_kb(tenant)


@pytest.fixture
def llm(settings):
    fake = FakeLLM()
    settings.LLM_BASE_URL, settings.LLM_MODEL, settings.LLM_TIMEOUT = fake.url, "fake", 10
    yield fake
    fake.close()


def events_of(chunks) -> list[tuple[str, dict]]:
    text = b"".join(chunks).decode()
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def ask_streamed(client, conversation_id: int, question: str, *, via: str = "accept", **extra):
    body = {"question": question, **extra}
    headers = {"HTTP_ACCEPT": "text/event-stream"} if via == "accept" else {}
    if via == "body":
        body["stream"] = True
    return client.post(f"/api/v1/conversations/{conversation_id}/messages/", body, format="json", **headers)


def client_disconnects(response) -> None:
    """What the WSGI server does when the client has gone: close the response. As the test client does, without the
    request_finished signal closing the test's own database connection. A stream already started is closed through
    the test client's wrapper of it (which closes the response so), one not started directly."""
    response._iterator.close()
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)


def records(tenant) -> tuple[int, int]:
    return Turn.objects.for_tenant(tenant).count(), DedupEvent.objects.for_tenant(tenant).count()


@pytest.mark.parametrize("via", ["accept", "body"])
def test_a_streamed_miss_sends_decision_sources_deltas_then_done(api_client, tenant, kb, llm, via):
    llm.replies = [Reply(pieces=["To reset it, ", "open Settings ", "[1]."])]
    conversation_id = start(api_client, kb)
    response = ask_streamed(api_client, conversation_id, "How do I reset my password?", via=via)
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache" and response["X-Accel-Buffering"] == "no"
    events = events_of(response.streaming_content)
    assert [name for name, _ in events] == ["decision", "sources", "delta", "delta", "delta", "done"]
    decision, sources, done = events[0][1], events[1][1], events[-1][1]
    assert decision["dedup"]["action"] == "answered" and decision["answer"] is None
    assert sources["sources"][0]["document_external_id"] == "password" and sources["index"]["status"]
    assert [data["text"] for name, data in events if name == "delta"] == ["To reset it, ", "open Settings ", "[1]."]
    assert done["answer"] == "To reset it, open Settings [1]."
    assert (done["answer_tokens"], done["context_tokens"]) == (9, 91)  # the fake's reported usage
    turn = Turn.objects.for_tenant(tenant).get()
    assert done["turn_id"] == turn.pk and turn.answer == done["answer"] and turn.answer_state == AnswerState.COMPLETE
    assert sorted(turn.source_chunk_ids) == sorted(s["chunk_id"] for s in sources["sources"])
    assert DedupEvent.objects.for_tenant(tenant).get().turn_id == turn.pk


def test_a_streamed_hit_sends_the_stored_answer_in_the_decision_event(api_client, tenant, kb, llm):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    events = events_of(ask_streamed(api_client, conversation_id, "How can I reset my password?").streaming_content)
    assert [name for name, _ in events] == ["decision", "sources", "done"]
    decision, sources, done = (data for _, data in events)
    assert decision["dedup"]["action"] == "served_cached" and decision["dedup"]["matched_turn_id"] == first["turn_id"]
    assert decision["answer"] == first["answer"] == done["answer"]
    assert [s["chunk_id"] for s in sources["sources"]] == [s["chunk_id"] for s in first["sources"]]
    assert sources["index"] is None
    assert len(llm.requests) == 1  # the hit asked the answer service nothing
    assert records(tenant) == (2, 2)


def test_the_extractive_answer_streams_sentence_by_sentence(api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    events = events_of(ask_streamed(api_client, conversation_id, "Who may delete a workspace?").streaming_content)
    deltas = [data["text"] for name, data in events if name == "delta"]
    assert len(deltas) >= 2 and events[-1][0] == "done"
    assert "".join(deltas) == events[-1][1]["answer"] == Turn.objects.for_tenant(tenant).get().answer


def test_a_client_that_disconnects_mid_stream_leaves_exactly_one_turn_event_and_its_consumed_items(
    api_client, tenant, kb, llm
):
    llm.replies = [Reply(pieces=["First piece. ", "Second piece. ", "Third."], piece_delay=0.3)]
    conversation_id = start(api_client, kb)
    response = ask_streamed(api_client, conversation_id, "How do I reset my password?")
    received = iter(response.streaming_content)
    seen = events_of([next(received), next(received), next(received)])
    assert [name for name, _ in seen] == ["decision", "sources", "delta"]
    client_disconnects(response)
    turn = Turn.objects.for_tenant(tenant).get()
    assert turn.answer_state == AnswerState.INTERRUPTED
    assert turn.answer == "" and turn.answer_partial == "First piece. "
    assert DedupEvent.objects.for_tenant(tenant).filter(turn=turn).count() == 1
    shown = {s["chunk_id"] for s in seen[1][1]["sources"]}
    consumed = set(ConsumedItem.objects.for_tenant(tenant).filter(kind="chunk").values_list("item_id", flat=True))
    assert consumed == shown == set(turn.source_chunk_ids)
    client_disconnects(response)
    assert records(tenant) == (1, 1)
    # The cut answer is never served to a repeat of the question.
    again = ask(api_client, conversation_id, "How do I reset my password?")
    assert again["dedup"]["action"] != "served_cached"


def test_a_stream_closed_before_its_first_event_still_records_the_turn_once(api_client, tenant, kb, llm):
    conversation_id = start(api_client, kb)
    response = ask_streamed(api_client, conversation_id, "How do I reset my password?")
    client_disconnects(response)
    client_disconnects(response)
    turn = Turn.objects.for_tenant(tenant).get()
    assert turn.answer_state == AnswerState.INTERRUPTED and turn.answer_partial == ""
    assert records(tenant) == (1, 1) and ConsumedItem.objects.for_tenant(tenant).filter(kind="chunk").exists()


def test_an_upstream_failure_mid_stream_is_an_error_event_and_a_failed_turn(api_client, tenant, kb, llm):
    llm.replies = [Reply(pieces=["Half an ", "answer"], break_after=1)]
    conversation_id = start(api_client, kb)
    events = events_of(ask_streamed(api_client, conversation_id, "How do I reset my password?").streaming_content)
    assert [name for name, _ in events] == ["decision", "sources", "delta", "error"]
    error = events[-1][1]
    assert error["status"] == 502 and "broke off mid-answer" in error["message"]
    turn = Turn.objects.for_tenant(tenant).get()
    assert error["turn_id"] == turn.pk
    assert turn.answer_state == AnswerState.FAILED and turn.answer == "" and turn.answer_partial == "Half an "
    assert "broke off" in turn.answer_error
    assert records(tenant) == (1, 1)
    assert ConsumedItem.objects.for_tenant(tenant).filter(kind="chunk").count() == len(turn.source_chunk_ids) > 0


def persist_fails(monkeypatch) -> list[int]:
    """Recording a turn fails as a dropped database connection does; returns the list of attempts made."""
    attempts = []

    def broken(record):
        attempts.append(1)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(turns, "turn_persist", broken)
    return attempts


def test_a_turn_the_database_cannot_record_ends_its_stream_with_a_503_error_event(
    api_client, tenant, kb, llm, monkeypatch
):
    llm.replies = [Reply(pieces=["A whole ", "answer."])]
    conversation_id = start(api_client, kb)
    attempts = persist_fails(monkeypatch)
    response = ask_streamed(api_client, conversation_id, "How do I reset my password?")
    events = events_of(response.streaming_content)
    assert [name for name, _ in events] == ["decision", "sources", "delta", "delta", "error"]
    error = events[-1][1]
    assert (error["status"], error["turn_id"]) == (503, None) and "could not be recorded" in error["message"]
    assert len(attempts) == 1
    # The client was told nothing was saved: closing the stream, the database back, records nothing either.
    monkeypatch.undo()
    client_disconnects(response)
    assert records(tenant) == (0, 0) and not ConsumedItem.objects.for_tenant(tenant).exists()


def test_an_upstream_failure_the_database_cannot_record_is_one_503_error_event(
    api_client, tenant, kb, llm, monkeypatch
):
    llm.replies = [Reply(pieces=["Half an ", "answer"], break_after=1)]
    conversation_id = start(api_client, kb)
    attempts = persist_fails(monkeypatch)
    response = ask_streamed(api_client, conversation_id, "How do I reset my password?")
    events = events_of(response.streaming_content)
    assert [name for name, _ in events] == ["decision", "sources", "delta", "error"]
    assert (events[-1][1]["status"], events[-1][1]["turn_id"]) == (503, None)
    monkeypatch.undo()
    client_disconnects(response)
    assert len(attempts) == 1 and records(tenant) == (0, 0)


def test_a_disconnect_the_database_cannot_record_is_logged_not_raised(api_client, tenant, kb, llm, monkeypatch, caplog):
    llm.replies = [Reply(pieces=["First piece. ", "Second piece."], piece_delay=0.3)]
    conversation_id = start(api_client, kb)
    response = ask_streamed(api_client, conversation_id, "How do I reset my password?")
    received = iter(response.streaming_content)
    events_of([next(received), next(received)])
    attempts = persist_fails(monkeypatch)
    client_disconnects(response)
    client_disconnects(response)
    assert len(attempts) == 1 and records(tenant) == (0, 0)
    assert "could not be recorded" in caplog.text


def test_an_upstream_failure_without_streaming_is_still_a_502_with_nothing_written(api_client, tenant, kb, llm):
    llm.replies = [Reply(status=500), Reply(status=500), Reply(status=500)]
    conversation_id = start(api_client, kb)
    response = api_client.post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"question": "How do I reset my password?"}, format="json"
    )
    assert response.status_code == 502 and "HTTP 500" in response.json()["message"]
    assert records(tenant) == (0, 0)


def test_refusals_before_the_first_event_are_json(api_client, other_api_client, tenant, kb):
    conversation_id = start(api_client, kb)
    refused = [
        (other_api_client, conversation_id, {"question": "hello there"}, 404),
        (api_client, conversation_id, {"question": ""}, 400),
        (api_client, conversation_id, {"question": "hi", "unknown": 1}, 400),
        (api_client, 999_999_999, {"question": "hello there"}, 404),
    ]
    for client, target, body, status in refused:
        for extra in ({"stream": True}, {}):
            response = client.post(
                f"/api/v1/conversations/{target}/messages/",
                {**body, **extra},
                format="json",
                HTTP_ACCEPT="text/event-stream",
            )
            assert response.status_code == status, response.content
            assert response["Content-Type"] == "application/json" and "message" in response.json()
    Conversation.objects.for_tenant(tenant).filter(pk=conversation_id).update(expires_at=timezone.now())
    response = ask_streamed(api_client, conversation_id, "How do I reset my password?")
    assert response.status_code == 410 and response.json()["extra"]["conversation"] == conversation_id
    assert records(tenant) == (0, 0)


def test_the_model_is_shown_the_recent_turns_within_the_history_settings(api_client, kb, llm, settings):
    conversation_id = start(api_client, kb)
    questions = ["How do I reset my password?", "How much does the Team plan cost?", "Who can delete a workspace?"]
    answers = [ask(api_client, conversation_id, q)["answer"] for q in questions]
    messages = llm.requests[-1][2]["messages"]
    assert [(m["role"], m["content"]) for m in messages[1:5]] == [
        ("user", questions[0]),
        ("assistant", answers[0]),
        ("user", questions[1]),
        ("assistant", answers[1]),
    ]
    assert messages[-1]["content"].endswith(f"Question: {questions[2]}")

    settings.LLM_HISTORY_TURNS = 1
    ask_streamed(api_client, conversation_id, "How are API keys revoked?").getvalue()
    messages = llm.requests[-1][2]["messages"]
    assert [m["content"] for m in messages[1:3]] == [questions[2], answers[2]] and len(messages) == 4

    settings.LLM_HISTORY_TURNS, settings.LLM_HISTORY_TOKENS = 4, 5  # no exchange fits in 5 tokens
    ask(api_client, conversation_id, "Which formats can reports be exported as?")
    assert [m["role"] for m in llm.requests[-1][2]["messages"]] == ["system", "user"]


REWRITES = {
    "And how long are the deleted ones kept?": "How long are deleted files kept in the trash?",
    "What about doing that from the start?": "How do I reset my password?",
}


def _rewriting(body: dict) -> Reply:
    if body["messages"][0]["content"].startswith("Rewrite"):
        return Reply(pieces=[REWRITES[body["messages"][-1]["content"]]], usage=None)
    return Reply()


def test_a_followup_is_rewritten_for_the_search_and_the_duplicate_check_and_recorded(api_client, tenant, kb, llm):
    llm.respond = _rewriting
    # Exclusion off: the search's first source is then the rewrite's own best passage, whatever turn 1 showed.
    dedup_policy_update(tenant=tenant, rewrite_followups=True, exclusion_enabled=False)
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    assert first["dedup"]["action"] == "answered" and len(llm.requests) == 1  # a standalone question: no rewrite

    events = events_of(
        ask_streamed(api_client, conversation_id, "And how long are the deleted ones kept?").streaming_content
    )
    decision, sources = events[0][1], events[1][1]
    rewrite = "How long are deleted files kept in the trash?"
    assert decision["rewritten_question"] == rewrite == events[-1][1]["rewritten_question"]
    assert sources["sources"][0]["document_external_id"] == "retention"
    assert llm.requests[1][2]["messages"][1:3] == [
        {"role": "user", "content": "How do I reset my password?"},
        {"role": "assistant", "content": first["answer"]},
    ]
    assert llm.requests[2][2]["messages"][-1]["content"].endswith(f"Question: {rewrite}")  # answered as rewritten
    turn = Turn.objects.for_tenant(tenant).get(pk=events[-1][1]["turn_id"])
    assert turn.question == "And how long are the deleted ones kept?" and turn.rewritten_question == rewrite
    assert DedupEvent.objects.for_tenant(tenant).get(turn=turn).rewritten_question == rewrite
    assert np.allclose(vector_from_bytes(turn.question_vector), embed_query(rewrite), atol=1e-5)

    # A follow-up whose rewrite repeats an earlier question is served that question's stored answer.
    third = ask(api_client, conversation_id, "What about doing that from the start?")
    assert third["dedup"]["action"] == "served_cached" and third["dedup"]["matched_turn_id"] == first["turn_id"]
    assert third["answer"] == first["answer"]


def test_without_the_policy_switch_a_followup_is_taken_as_asked(api_client, tenant, kb, llm):
    llm.respond = _rewriting
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    ask(api_client, conversation_id, "And how long are the deleted ones kept?")
    assert not any(body["messages"][0]["content"].startswith("Rewrite") for _, _, body in llm.requests)
    assert not Turn.objects.for_tenant(tenant).exclude(rewritten_question="").exists()


def test_a_failing_rewrite_takes_the_question_as_asked(api_client, tenant, kb, llm):
    llm.respond = lambda body: Reply(status=400) if body["messages"][0]["content"].startswith("Rewrite") else Reply()
    dedup_policy_update(tenant=tenant, rewrite_followups=True)
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    body = ask(api_client, conversation_id, "And how long are the deleted ones kept?")
    assert body["dedup"]["action"] == "answered"
    assert Turn.objects.for_tenant(tenant).get(pk=body["turn_id"]).rewritten_question == ""


def test_the_policy_api_reads_and_changes_the_rewrite_switch(api_client, tenant):
    assert api_client.get("/api/v1/dedup-policy/").json()["rewrite_followups"] is False
    response = api_client.put("/api/v1/dedup-policy/", {"rewrite_followups": True}, format="json")
    assert response.status_code == 200 and response.json()["rewrite_followups"] is True


@pytest.mark.django_db(transaction=True)
def test_a_real_client_hanging_up_mid_stream_leaves_one_interrupted_turn(live_server, tenant, kb, llm):
    """Over a real socket to a WSGI server (the live server; gunicorn's sync workers keep the same contract: on a
    write to a gone client they stop iterating and close the response)."""
    llm.replies = [Reply(pieces=["First. ", "Second. ", "Third."], piece_delay=1.0)]
    client = _client_for(tenant)
    conversation_id = start(client, kb)
    host, port = live_server.url.removeprefix("http://").split(":")
    body = json.dumps({"question": "How do I reset my password?"}).encode()
    request = (
        f"POST /api/v1/conversations/{conversation_id}/messages/ HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Api-Key {client.raw_key}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(request)
        received = b""
        while received.count(b"\n\n") < 3:  # decision, sources, the first delta (headers end in \r\n\r\n)
            received += connection.recv(65536)
        head, _, events = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
        assert [name for name, _ in events_of([events])] == ["decision", "sources", "delta"]
        connection.shutdown(socket.SHUT_RDWR)
    turn = wait_for(
        lambda: Turn.objects.for_tenant(tenant).filter(answer_state=AnswerState.INTERRUPTED).first(),
        timeout=30,
        what="the interrupted turn recorded",
    )
    assert turn.answer == "" and turn.answer_partial.startswith("First. ")
    assert records(tenant) == (1, 1)
    assert ConsumedItem.objects.for_tenant(tenant).filter(kind="chunk").count() == len(turn.source_chunk_ids) > 0


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_an_answer_with_a_nul_and_a_huge_usage_is_stored_and_served_again(api_client, tenant, kb, llm, streamed):
    """On PostgreSQL a NUL in the answer service's reply, or its usage past a 32-bit column, ended the turn in a 500
    (streamed: the stream broke off with no event and no turn). The sum of two storable counts, a served turn's
    tokens saved, overflowed the same way."""
    llm.replies = [
        Reply(pieces=["Open Settings\x00 ", "[1]."], usage={"prompt_tokens": 2**30, "completion_tokens": 2**30})
    ]
    conversation_id = start(api_client, kb)
    if streamed:
        events = events_of(ask_streamed(api_client, conversation_id, "How do I reset my password?").streaming_content)
        assert [name for name, _ in events][-1] == "done", events
    else:
        assert ask(api_client, conversation_id, "How do I reset my password?")["answer"] == "Open Settings [1]."
    turn = Turn.objects.for_tenant(tenant).get()
    assert turn.answer == "Open Settings [1]." and (turn.context_tokens, turn.answer_tokens) == (2**30, 2**30)
    again = ask(api_client, conversation_id, "How do I reset my password?")
    assert again["dedup"]["action"] == "served_cached" and again["answer"] == "Open Settings [1]."
    assert DedupEvent.objects.for_tenant(tenant).latest("id").tokens_saved == 2**31 - 1


# An answer the model made citing none of its passages (what it is told to write when they do not hold the answer).
UNCITED_QUESTION = "How much does the Enterprise plan cost?"
UNCITED_ANSWER = "The passages do not say what the Enterprise plan costs."


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
def test_an_answer_citing_no_passage_is_never_served_to_a_repeat(api_client, tenant, kb, llm, streamed):
    """Served, it would say "the passages do not say" again from memory, whatever the knowledge base holds by then,
    to a user who asked again because it did not answer. Its passages were shown, so they are consumed all the same:
    the repeat searches past them. A cited answer to the repeat is served to the next one."""
    llm.replies = [Reply(pieces=[UNCITED_ANSWER])]
    conversation_id = start(api_client, kb)
    if streamed:
        b"".join(ask_streamed(api_client, conversation_id, UNCITED_QUESTION).streaming_content)
    else:
        first = ask(api_client, conversation_id, UNCITED_QUESTION)
        assert first["answer"] == UNCITED_ANSWER and first["sources"], first
    turn = Turn.objects.for_tenant(tenant).get()
    assert turn.answer == UNCITED_ANSWER and turn.source_chunk_ids == [] and turn.source_chunks == {}
    assert ConsumedItem.objects.for_tenant(tenant).filter(turn_number=1).exists()
    again = ask(api_client, conversation_id, UNCITED_QUESTION)
    assert again["dedup"]["action"] != "served_cached" and again["answer"] == "It costs 12 dollars [1].", again
    assert again["dedup"]["reason"] == "answer cites no source", again["dedup"]
    third = ask(api_client, conversation_id, UNCITED_QUESTION)
    assert third["dedup"]["action"] == "served_cached" and third["answer"] == again["answer"], third["dedup"]
