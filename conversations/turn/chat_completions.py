"""A turn asked through the OpenAI-compatible endpoint (`POST /api/v1/chat/completions`): the conversation it belongs
to (the one named, or a new one over the knowledge base the `model` names), then the very turn the messages endpoint
takes (`turn_ask`, or `turn_prepare` then `turn_stream`), so the dedup decision, its audit event and what the turn
consumes are the same whichever endpoint asked."""

from __future__ import annotations

from dataclasses import dataclass

from conversations.models import Conversation
from conversations.turn.conversations import conversation_create, conversation_delete, conversation_for
from conversations.turn.openai_chat import model_name
from conversations.turn.transcripts import conversation_of_transcript
from conversations.turn.turn_stream import TurnStream, turn_stream
from conversations.turn.turns import TurnOutcome, turn_ask, turn_prepare
from kbplatform.errors import ApplicationError, NotFoundError
from kbplatform.text import user_id_canonical
from tenants.models import Tenant


@dataclass(frozen=True)
class ChatTurn:
    """A turn taken: its conversation (new or named), and either its outcome (`stream` False) or its events."""

    conversation: Conversation
    outcome: TurnOutcome | None = None
    events: TurnStream | None = None


def _conversation_named(
    *,
    tenant: Tenant,
    knowledge_base_id: int,
    conversation_id: int,
    user_id: str | None,
    allowed_knowledge_base_id: int | None,
) -> Conversation:
    """The tenant's conversation `conversation_id` (404 for another tenant's or one the key does not reach, 410 once
    expired, 409 when its stored filter cannot be searched), which must be over the knowledge base the model names
    and, when a user is given, the user's: a turn is never quietly taken somewhere else than the client said."""
    try:
        conversation = conversation_for(
            tenant=tenant, conversation_id=conversation_id, allowed_knowledge_base_id=allowed_knowledge_base_id
        )
    except ApplicationError as exc:
        code = {404: "conversation_not_found", 410: "conversation_expired"}.get(exc.status_code)
        code = code or exc.extra.get("code", "conversation_refused")
        raise ApplicationError(
            f"{exc.message} (conversation_id {conversation_id})",
            status_code=exc.status_code,
            extra={**exc.extra, "param": "conversation_id", "code": code},
        ) from exc
    if conversation.knowledge_base_id != knowledge_base_id:
        raise ApplicationError(
            f"Conversation {conversation_id} is over the knowledge base {model_name(conversation.knowledge_base_id)}; "
            f"send that as the model.",
            extra={"param": "model", "code": "model_mismatch"},
        )
    if user_id is not None and user_id_canonical(user_id) != conversation.user_id:
        raise ApplicationError(
            f"Conversation {conversation_id} is another user's: leave user out, or send the conversation's user.",
            extra={"param": "user", "code": "user_mismatch"},
        )
    return conversation


def chat_turn_take(
    *,
    tenant: Tenant,
    knowledge_base_id: int,
    question: str,
    conversation_id: int | None = None,
    user_id: str | None = None,
    force_refresh: bool = False,
    stream: bool = False,
    allowed_knowledge_base_id: int | None = None,
    transcript: str | None = None,
) -> ChatTurn:
    """Take one turn in answer mode: in conversation `conversation_id`; else in the conversation the client's
    transcript before this question (`transcript`, its `transcripts.transcript_digest`) leads to, if one does; else in
    a new conversation of end user `user_id` over knowledge base `knowledge_base_id`. Every refusal (400, 404, 409,
    410) is raised before anything is streamed, and a refused first turn leaves no new conversation behind: the client
    was told of none to continue. A knowledge base the key does not reach is a 404 whose `param` is `model`. A
    conversation found by its transcript that can no longer take turns (a stored filter no search can run) is left
    for a new one: the client did not name it."""
    conversation = None
    if conversation_id is not None:
        conversation = _conversation_named(
            tenant=tenant,
            knowledge_base_id=knowledge_base_id,
            conversation_id=conversation_id,
            user_id=user_id,
            allowed_knowledge_base_id=allowed_knowledge_base_id,
        )
    elif transcript is not None:
        found = conversation_of_transcript(
            tenant=tenant, knowledge_base_id=knowledge_base_id, user_id=user_id, digest=transcript
        )
        if found is not None:
            try:
                conversation = _conversation_named(
                    tenant=tenant,
                    knowledge_base_id=knowledge_base_id,
                    conversation_id=found,
                    user_id=user_id,
                    allowed_knowledge_base_id=allowed_knowledge_base_id,
                )
            except ApplicationError:
                conversation = None
    created = conversation is None
    if conversation is None:
        try:
            conversation = conversation_create(
                tenant=tenant,
                knowledge_base_id=knowledge_base_id,
                user_id=user_id or "",
                allowed_knowledge_base_id=allowed_knowledge_base_id,
            )
        except NotFoundError as exc:
            raise NotFoundError(
                f"The model '{model_name(knowledge_base_id)}' does not exist: no knowledge base this key reaches has "
                "that id (GET /api/v1/knowledge-bases/ lists them).",
                extra={"param": "model", "code": "model_not_found"},
            ) from exc
    turn = {
        "tenant": tenant,
        "conversation_id": conversation.pk,
        "question": question,
        "force_refresh": force_refresh,
        "mode": "answer",
        "allowed_knowledge_base_id": allowed_knowledge_base_id,
    }
    try:
        if stream:
            return ChatTurn(conversation=conversation, events=turn_stream(prepared=turn_prepare(**turn)))
        return ChatTurn(conversation=conversation, outcome=turn_ask(**turn))
    except Exception:
        if created:
            conversation_delete(tenant=tenant, conversation=conversation)
        raise
