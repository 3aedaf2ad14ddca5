"""A chat client's transcript as the key to its conversation, for the OpenAI-compatible endpoint.

Chat front ends and SDK loops (Open WebUI, LibreChat, LangChain, a `messages.append` loop) send the whole conversation
with every request and know nothing of `conversation_id`. Each such request would start a conversation of its own, and
lose what the platform does across turns: a question asked again in other words served its stored answer, passages
already shown left out of the next search, a follow-up read against its conversation.

After each chat-completions turn the conversation records the digest of the transcript as the client now holds it
(its user and assistant messages, this turn's answer last). A request without `conversation_id` whose messages before
the question have that digest goes on in that conversation: the same tenant, knowledge base and end user (`user`, or
none), not expired, and only while that turn is its last (a client that edits an earlier message or answers from
another branch starts a new conversation, as before). The history is never read into the turn: it only names a
conversation whose turns are word for word what the client sent, so the dedup decision still sees only what the
platform itself answered.
"""

from __future__ import annotations

import hashlib
import json
import logging
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from conversations.models import Conversation
from kbplatform.text import user_id_canonical
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# The messages a transcript is made of: what was asked and what was answered. A system or developer prompt is the
# front end's own (and often changes between releases); tool messages are no turn of the platform's.
TRANSCRIPT_ROLES = ("user", "assistant")


def _text(content: Any) -> str:
    """A message's text: a string, or its text parts joined by a line break (as the question is read); anything else
    (an assistant's tool call, an image part) reads as no text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def transcript_digest(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The SHA-256 (hex) of `messages`' user and assistant texts in order, each in Unicode NFC with every run of
    whitespace read as one space and none at its ends (what a client may change when it stores, renders and sends back
    a reply: line endings, a trailing newline), an empty one left out; None when there is none."""
    entries = []
    for message in messages:
        role = message.get("role")
        if role not in TRANSCRIPT_ROLES:
            continue
        text = " ".join(unicodedata.normalize("NFC", _text(message.get("content"))).split())
        if text:
            entries.append((role, text))
    if not entries:
        return None
    return hashlib.sha256(json.dumps(entries, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


def conversation_of_transcript(
    *, tenant: Tenant, knowledge_base_id: int, user_id: str | None, digest: str
) -> int | None:
    """The id of the tenant's unexpired conversation over `knowledge_base_id`, of end user `user_id` (none: a
    conversation with no user), whose last chat-completions turn left the transcript `digest`; the most recently
    active when two do (two clients that asked the same questions and were told the same answers); None when none."""
    return (
        Conversation.objects.for_tenant(tenant)
        .filter(
            transcript_digest=digest,
            knowledge_base_id=knowledge_base_id,
            user_id=user_id_canonical(user_id or ""),
            expires_at__gt=timezone.now(),
        )
        .order_by("-last_active_at")
        .values_list("pk", flat=True)
        .first()
    )


def transcript_record(
    *, tenant: Tenant, conversation_id: int, messages: Sequence[Mapping[str, Any]], answer: str
) -> None:
    """Record on the conversation the transcript the client holds once it has `answer` to the last of `messages`.
    Called once the turn is recorded and its answer sent: a database that fails here is logged, not raised, since the
    turn stands (a client told it failed would ask again and take it twice) and all that is lost is that the client's
    next request, unnamed, starts a new conversation."""
    digest = transcript_digest([*messages, {"role": "assistant", "content": answer}]) or ""
    try:
        Conversation.objects.for_tenant(tenant).filter(pk=conversation_id).update(transcript_digest=digest)
    except DatabaseError:
        logger.warning("conversation %s: its chat transcript could not be recorded", conversation_id, exc_info=True)
