"""OpenAI's Chat Completions shapes as plain functions (conversations/turn/openai_chat.py): no database, no services."""

from __future__ import annotations

import pytest

from conversations.turn.openai_chat import (
    ChunkWriter,
    chat_question,
    error_body,
    error_body_of,
    knowledge_base_id_of_model,
    model_name,
    validation_error_body,
)
from kbplatform.errors import ApplicationError

DEDUP = {"action": "served_cached", "similarity": 0.97, "matched_turn_id": 7}
SOURCES = [{"chunk_id": 3, "document_id": 2, "text": "Reset it under Settings."}]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("kb-1", 1),
        ("kb-42", 42),
        (" kb-42 ", 42),
        ("kb-0", None),
        ("kb-01", None),
        ("kb-", None),
        ("gpt-4o", None),
        ("KB-1", None),
        ("kb-1x", None),
        ("kb-" + "9" * 19, None),
        ("handbook", None),
    ],
)
def test_a_model_names_a_knowledge_base_by_id(model, expected):
    assert knowledge_base_id_of_model(model) == expected


def test_model_name_reads_back():
    assert knowledge_base_id_of_model(model_name(5)) == 5


def test_the_question_is_the_last_message_which_is_the_users():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "How do I reset my password?"},
        {"role": "assistant", "content": "Open Settings."},
        {"role": "user", "content": "And on mobile?"},
    ]
    assert chat_question(messages) == "And on mobile?"


def test_text_parts_are_joined():
    content = [{"type": "text", "text": "How do I"}, {"type": "text", "text": "reset it?"}]
    assert chat_question([{"role": "user", "content": content}]) == "How do I\nreset it?"


@pytest.mark.parametrize(
    ("messages", "param", "code"),
    [
        ([{"role": "system", "content": "Be brief."}], "messages", "invalid_value"),
        (
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
            "messages[1].role",
            "invalid_value",
        ),
        ([{"role": "user", "content": None}], "messages[0].content", "invalid_type"),
        ([{"role": "user", "content": []}], "messages[0].content", "invalid_type"),
        ([{"role": "user", "content": 5}], "messages[0].content", "invalid_type"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "messages[0].content[0]",
            "unsupported_value",
        ),
        ([{"role": "user", "content": [{"type": "text", "text": 3}]}], "messages[0].content[0]", "unsupported_value"),
    ],
)
def test_messages_that_hold_no_question_are_refused_naming_the_message(messages, param, code):
    with pytest.raises(ApplicationError) as refused:
        chat_question(messages)
    assert refused.value.status_code == 400
    assert (refused.value.extra["param"], refused.value.extra["code"]) == (param, code)


@pytest.mark.parametrize(
    ("status", "type_", "code"),
    [
        (400, "invalid_request_error", None),
        (401, "authentication_error", "invalid_api_key"),
        (403, "permission_error", "insufficient_scope"),
        (404, "invalid_request_error", "not_found"),
        (429, "rate_limit_error", "rate_limit_exceeded"),
        (500, "server_error", None),
        (502, "server_error", "upstream_error"),
        (504, "server_error", "upstream_timeout"),
    ],
)
def test_an_error_has_openais_four_fields(status, type_, code):
    assert error_body(message="No.", status=status) == {
        "error": {"message": "No.", "type": type_, "param": None, "code": code}
    }


def test_the_platforms_error_keeps_its_param_and_code_or_names_its_first_field():
    named = error_body_of(status=404, message="Gone.", extra={"param": "model", "code": "model_not_found"})
    assert named["error"] == {
        "message": "Gone.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    fields = error_body_of(status=400, message="Bad.", extra={"fields": {"question": ["Empty."]}})
    assert (fields["error"]["param"], fields["error"]["code"]) == ("messages", "invalid_value")
    conflict = error_body_of(status=409, message="Re-index.", extra={"code": "embedding_model_mismatch", "x": 1})
    assert conflict["error"]["code"] == "embedding_model_mismatch" and set(conflict["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }


def _detail(message: str, code: str) -> dict:
    return {"message": message, "code": code}


def test_a_refused_body_names_its_unknown_parameter_first():
    details = {
        "messages": [_detail("This field is required.", "required")],
        "mesages": [_detail("Unknown field. Did you mean messages?", "unknown")],
    }
    body = validation_error_body(details)["error"]
    assert (body["param"], body["code"], body["type"]) == ("mesages", "unknown_parameter", "invalid_request_error")
    assert body["message"].startswith("Unknown parameter: 'mesages'.") and "messages" in body["message"]


def test_a_refused_body_names_the_path_of_a_nested_error():
    details = {"messages": [{}, {"role": [_detail('"robot" is not a valid choice.', "invalid_choice")]}]}
    body = validation_error_body(details)["error"]
    assert (body["param"], body["code"]) == ("messages[1].role", "invalid_value")
    assert body["message"] == 'messages[1].role: "robot" is not a valid choice.'
    missing = validation_error_body({"model": [_detail("This field is required.", "required")]})["error"]
    assert (missing["param"], missing["code"]) == ("model", "missing_required_parameter")
    empty = validation_error_body({"messages": {"non_field_errors": [_detail("Empty.", "empty")]}})["error"]
    assert empty["param"] == "messages"


def _writer(include_usage: bool = False) -> ChunkWriter:
    return ChunkWriter(
        completion_id="chatcmpl-1", created=10, model="kb-3", conversation_id=9, include_usage=include_usage
    )


def test_a_generated_answer_streams_role_pieces_then_the_final_chunk():
    writer = _writer()
    chunks = []
    chunks += writer.chunks_of(
        "decision", {"dedup": {"action": "answered"}, "answer": None, "rewritten_question": None}
    )
    assert chunks == []  # the decision waits for the sources: both go out in the role chunk
    chunks += writer.chunks_of("sources", {"sources": SOURCES, "index": {"status": "ready"}})
    chunks += writer.chunks_of("delta", {"text": "Open "})
    chunks += writer.chunks_of("delta", {"text": "Settings."})
    chunks += writer.chunks_of(
        "done",
        {
            "turn_id": 4,
            "answer": "Open Settings.",
            "answer_tokens": 3,
            "context_tokens": 50,
            "rewritten_question": None,
        },
    )
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Open "},
        {"content": "Settings."},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "stop"]
    assert {(c["id"], c["object"], c["created"], c["model"]) for c in chunks} == {
        ("chatcmpl-1", "chat.completion.chunk", 10, "kb-3")
    }
    first, last = chunks[0]["kbplatform"], chunks[-1]["kbplatform"]
    assert first == {
        "conversation_id": 9,
        "turn_id": None,
        "dedup": {"action": "answered"},
        "sources": SOURCES,
        "index": {"status": "ready"},
        "rewritten_question": None,
    }
    assert last == {**first, "turn_id": 4}
    assert all("kbplatform" not in c for c in chunks[1:-1]) and all("usage" not in c for c in chunks)


def test_a_served_answer_comes_in_one_chunk_and_costs_no_tokens():
    writer = _writer(include_usage=True)
    chunks = writer.chunks_of("decision", {"dedup": DEDUP, "answer": "Stored answer.", "rewritten_question": None})
    chunks += writer.chunks_of("sources", {"sources": SOURCES, "index": None})
    chunks += writer.chunks_of(
        "done",
        {"turn_id": 8, "answer": "Stored answer.", "answer_tokens": 3, "context_tokens": 0, "rewritten_question": None},
    )
    assert [c["choices"][0]["delta"] if c["choices"] else None for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Stored answer."},
        {},
        None,
    ]
    assert chunks[0]["kbplatform"]["dedup"] == DEDUP and chunks[2]["kbplatform"]["turn_id"] == 8
    assert [c["usage"] for c in chunks] == [
        None,
        None,
        None,
        {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    ]


def test_usage_of_a_generated_answer_counts_context_and_answer():
    writer = _writer(include_usage=True)
    writer.chunks_of("decision", {"dedup": {"action": "answered"}, "answer": None})
    writer.chunks_of("sources", {"sources": [], "index": None})
    *_, usage = writer.chunks_of("done", {"turn_id": 1, "answer": "x", "answer_tokens": 3, "context_tokens": 50})
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 50,
        "completion_tokens": 3,
        "total_tokens": 53,
    }


def test_a_failed_answer_is_one_error_chunk_naming_the_recorded_turn():
    writer = _writer()
    writer.chunks_of("decision", {"dedup": {"action": "answered"}, "answer": None})
    writer.chunks_of("sources", {"sources": [], "index": None})
    writer.chunks_of("delta", {"text": "Open "})
    [chunk] = writer.chunks_of(
        "error", {"message": "The answer service failed.", "extra": {}, "status": 502, "turn_id": 6}
    )
    assert chunk["error"] == {
        "message": "The answer service failed.",
        "type": "server_error",
        "param": None,
        "code": "upstream_error",
    }
    assert chunk["kbplatform"]["turn_id"] == 6 and "choices" not in chunk


def test_a_transcript_is_the_users_and_assistants_texts_as_a_client_may_send_them_back():
    from conversations.turn.transcripts import transcript_digest

    plain = [{"role": "user", "content": "How do I reset it?"}, {"role": "assistant", "content": "Open Settings. [1]"}]
    sent_back = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "text", "text": "How do I reset it?"}]},
        {"role": "assistant", "content": "Open Settings. [1]\r\n", "tool_calls": None},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1"}]},
        {"role": "tool", "content": "42", "tool_call_id": "call_1"},
    ]
    assert transcript_digest(plain) == transcript_digest(sent_back)
    assert transcript_digest([{"role": "user", "content": "Cafe\u0301?"}]) == transcript_digest(
        [{"role": "user", "content": "Caf\u00e9?"}]
    )
    assert transcript_digest(plain) != transcript_digest(list(reversed(plain)))
    assert transcript_digest(plain) != transcript_digest([{**plain[0]}, {"role": "assistant", "content": "Open it."}])
    assert transcript_digest([{"role": "system", "content": "Be brief."}]) is None
    assert transcript_digest([]) is None
