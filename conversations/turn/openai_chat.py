"""OpenAI's Chat Completions shapes for a turn of a conversation, as plain functions (no I/O): which knowledge base a
`model` names, which message is the turn's question, the `chat.completion` body, the `chat.completion.chunk`s of a
streamed turn, and errors as `{"error": {"message", "type", "param", "code"}}`.

They let any OpenAI client library, LangChain or chat front end take turns unchanged, while the turn itself is the
platform's own (`services.chat_turn_take`): the same pipeline and dedup decision as the messages endpoint. What the
platform adds to OpenAI's shapes travels in one extra field, `kbplatform`, which OpenAI clients keep as an unknown
field (the `openai` library: `completion.kbplatform`, `chunk.kbplatform`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kbplatform.errors import ApplicationError

# A knowledge base is a model named `kb-<id>`: ids never change, where names may and need not be unique.
MODEL_PREFIX: Final = "kb-"
_MODEL_NAME = re.compile(r"kb-([1-9][0-9]{0,17})")
EXTRA_FIELD: Final = "kbplatform"
ROLES: Final = ("system", "developer", "user", "assistant", "tool", "function")
FINISH_REASON: Final = "stop"

# The error `type` per status: OpenAI's own names where OpenAI answers that status, else one that says whose fault.
_ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    406: "invalid_request_error",
    409: "invalid_request_error",
    410: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}
# The error `code` when the platform's error names none.
_ERROR_CODES: Final = {
    401: "invalid_api_key",
    403: "insufficient_scope",
    404: "not_found",
    410: "conversation_expired",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "rate_limit_exceeded",
    502: "upstream_error",
    503: "service_unavailable",
    504: "upstream_timeout",
}
# DRF validation codes as OpenAI names them; any other is "invalid_value".
_VALIDATION_CODES: Final = {
    "required": "missing_required_parameter",
    "unknown": "unknown_parameter",
    "unsupported": "unsupported_parameter",
    "unsupported_value": "unsupported_value",
}
# A turn's field as the OpenAI request names it, for an error the turn raises about one of its own fields.
_PARAM_OF_TURN_FIELD: Final = {"question": "messages", "user_id": "user", "knowledge_base": "model"}


def model_name(knowledge_base_id: int) -> str:
    """The `model` that names the knowledge base."""
    return f"{MODEL_PREFIX}{knowledge_base_id}"


def model_list_body(*, knowledge_bases: list[Any], owned_by: str) -> dict:
    """OpenAI's model list (`GET /v1/models`): each knowledge base as a model named `model_name(id)`, the name a chat
    completion takes as `model`, with the platform's own description of it under `kbplatform`."""
    return {
        "object": "list",
        "data": [
            {
                "id": model_name(knowledge_base.pk),
                "object": "model",
                "created": int(knowledge_base.created_at.timestamp()),
                "owned_by": owned_by,
                "kbplatform": {
                    "knowledge_base_id": knowledge_base.pk,
                    "name": knowledge_base.name,
                    "embedding_model": knowledge_base.embedding_model,
                },
            }
            for knowledge_base in knowledge_bases
        ],
    }


def knowledge_base_id_of_model(model: str) -> int | None:
    """The id of the knowledge base `model` names (`kb-<id>`), or None when it names none (`gpt-4o`, `kb-0`)."""
    match = _MODEL_NAME.fullmatch(model.strip())
    return int(match.group(1)) if match else None


def _question_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise ApplicationError(
            f"{param} must be a string or a list of text parts.",
            extra={"param": param, "code": "invalid_type"},
        )
    texts = []
    for index, part in enumerate(content):
        part_param = f"{param}[{index}]"
        if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ApplicationError(
                f'{part_param}: only text parts ({{"type": "text", "text": ...}}) are read; a knowledge base '
                "answers text questions.",
                extra={"param": part_param, "code": "unsupported_value"},
            )
        texts.append(part["text"])
    return "\n".join(texts)


def chat_question(messages: list[Mapping[str, Any]]) -> str:
    """The turn's question: the content of the last message, which must be the user's. Earlier messages are not
    read: a conversation keeps its own history (`conversation_id`), and a question answered from a history the client
    could rewrite would be one the dedup decision never saw. A 400 (`param` naming the message) when there is no user
    message, when the last message is not the user's, or when its content holds anything but text."""
    if not any(message.get("role") == "user" for message in messages):
        raise ApplicationError(
            "messages holds no user message: the last message must be the user's question.",
            extra={"param": "messages", "code": "invalid_value"},
        )
    last = len(messages) - 1
    if messages[last].get("role") != "user":
        raise ApplicationError(
            f"The last message is the {messages[last].get('role')}'s: it must be the user's, the question of this "
            "turn.",
            extra={"param": f"messages[{last}].role", "code": "invalid_value"},
        )
    return _question_text(messages[last].get("content"), f"messages[{last}].content")


# --- errors -----------------------------------------------------------------------------------------------------------


def error_body(*, message: str, status: int, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape for a response of `status`."""
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            "param": param,
            "code": code if code is not None else _ERROR_CODES.get(status),
        }
    }


def error_body_of(*, status: int, message: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The platform's error (`{"message", "extra"}`, kbplatform.exception_handler) in OpenAI's shape: `param` and
    `code` from what `extra` says (its own `param` and `code`, the first of its `fields`, the scope a 403 needs)."""
    param = extra.get("param")
    fields = extra.get("fields")
    if param is None and isinstance(fields, Mapping) and fields:
        first = next(iter(fields))
        param = _PARAM_OF_TURN_FIELD.get(str(first), str(first))
    code = extra.get("code")
    if not isinstance(code, str):
        code = "invalid_value" if status == 400 else None
    return error_body(message=message, status=status, param=param, code=code)


def _first_errors(detail: Any, path: str) -> list[tuple[str, str, str]]:
    """(param, message, code) of every error in DRF's full details, depth first, in the order DRF gives them."""
    if isinstance(detail, Mapping) and set(detail) == {"message", "code"}:
        return [(path, str(detail["message"]), str(detail["code"]))]
    if isinstance(detail, Mapping):
        found = []
        for name, inner in detail.items():
            inner_path = name if not path else (f"{path}[{name}]" if isinstance(name, int) else f"{path}.{name}")
            if name == "non_field_errors":
                inner_path = path
            found += _first_errors(inner, inner_path)
        return found
    if isinstance(detail, list):
        found = []
        for index, inner in enumerate(detail):
            # A field's own errors are a list of messages; a list field's are one entry per item (some empty).
            is_item = isinstance(inner, (Mapping, list)) and not (
                isinstance(inner, Mapping) and set(inner) == {"message", "code"}
            )
            found += _first_errors(inner, f"{path}[{index}]" if is_item else path)
        return found
    return []


def validation_error_body(full_details: Any) -> dict[str, Any]:
    """A request body DRF refused (`ValidationError.get_full_details()`) as one OpenAI 400: the first unknown
    parameter when there is one (a misspelt name explains the other errors: `mesages` leaves `messages` missing),
    else the first error; `param` is its path (`messages[0].role`)."""
    errors = _first_errors(full_details, "")
    if not errors:
        return error_body(message="The request is not valid.", status=400, code="invalid_value")
    param, message, code = next((error for error in errors if error[2] == "unknown"), errors[0])
    code = _VALIDATION_CODES.get(code, "invalid_value")
    if code == "unknown_parameter":
        message = f"Unknown parameter: '{param}'. {message}"
    elif param:
        message = f"{param}: {message}"
    return error_body(message=message, status=400, param=param or None, code=code)


# --- responses --------------------------------------------------------------------------------------------------------


def usage_body(*, prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": int(prompt_tokens),
        "completion_tokens": int(completion_tokens),
        "total_tokens": int(prompt_tokens) + int(completion_tokens),
    }


def completion_body(
    *, completion_id: str, created: int, model: str, answer: str, usage: dict[str, int], platform: dict[str, Any]
) -> dict[str, Any]:
    """A `chat.completion`: one choice, the turn's answer; `platform` is the `kbplatform` field."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer, "refusal": None},
                "logprobs": None,
                "finish_reason": FINISH_REASON,
            }
        ],
        "usage": usage,
        "system_fingerprint": None,
        EXTRA_FIELD: platform,
    }


@dataclass
class ChunkWriter:
    """The `chat.completion.chunk`s of one streamed turn, from the turn's events (`turn_stream`: `decision`,
    `sources`, `delta`..., `done` or `error`) in order:

    - once the decision and the sources are known (both before any answer is generated): the role chunk
      (`delta: {"role": "assistant", "content": ""}`) carrying `kbplatform` with the conversation, the dedup decision
      and the sources, so a client can show them first;
    - the answer: each generated piece as a content chunk; a stored answer or a small-talk reply in one;
    - the final chunk, `finish_reason: "stop"`, carrying the whole `kbplatform` field (with `turn_id`); then, when
      the client asked for usage (`stream_options.include_usage`), a chunk with no choices and `usage`, as OpenAI
      sends it.

    An `error` event (the answer service failed mid-answer; the turn is recorded as failed) becomes one
    `{"error": {...}}` chunk, which OpenAI clients raise as an error. The caller ends the stream with `data: [DONE]`.
    """

    completion_id: str
    created: int
    model: str
    conversation_id: int
    include_usage: bool = False
    _platform: dict[str, Any] = field(default_factory=dict)
    # The whole answer of a turn that generates none (a stored answer, small talk, nothing found), from its decision
    # event.
    _served_answer: str | None = None
    # The answer's text as sent so far, and whether the turn ended with its `done` event (not an `error`): what the
    # client holds once the stream ends (`transcripts.transcript_record`).
    _sent: list[str] = field(default_factory=list)
    finished: bool = False

    @property
    def answer_sent(self) -> str:
        return "".join(self._sent)

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
        chunk = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            "system_fingerprint": None,
        }
        if self.include_usage:
            chunk["usage"] = None
        chunk.update(extra)
        return chunk

    def chunks_of(self, name: str, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The chunks one event of the turn's stream becomes (none, for an event whose news waits for the next)."""
        if name == "decision":
            self._platform = {
                "conversation_id": self.conversation_id,
                "turn_id": None,
                "dedup": data["dedup"],
                "sources": [],
                "index": None,
                "rewritten_question": data.get("rewritten_question"),
            }
            self._served_answer = data.get("answer")
            return []
        if name == "sources":
            self._platform.update(sources=data["sources"], index=data.get("index"))
            chunks = [self._chunk({"role": "assistant", "content": ""}, **{EXTRA_FIELD: dict(self._platform)})]
            if self._served_answer is not None:
                self._sent.append(self._served_answer)
                chunks.append(self._chunk({"content": self._served_answer}))
            return chunks
        if name == "delta":
            self._sent.append(data["text"])
            return [self._chunk({"content": data["text"]})]
        if name == "done":
            self.finished = True
            self._platform.update(turn_id=data["turn_id"], rewritten_question=data.get("rewritten_question"))
            chunks = [self._chunk({}, FINISH_REASON, **{EXTRA_FIELD: dict(self._platform)})]
            if self.include_usage:
                usage = (
                    usage_body(prompt_tokens=0, completion_tokens=0)
                    if self._served_answer is not None
                    else usage_body(prompt_tokens=data["context_tokens"], completion_tokens=data["answer_tokens"])
                )
                chunks.append({**self._chunk({}), "choices": [], "usage": usage})
            return chunks
        if name == "error":
            self._platform.update(turn_id=data.get("turn_id"))
            body = error_body_of(status=int(data["status"]), message=data["message"], extra=data.get("extra") or {})
            return [{**body, EXTRA_FIELD: dict(self._platform)}]
        return []
