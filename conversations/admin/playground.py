"""The admin's playground: a tenant admin chats with one of the tenant's knowledge bases and tests its retrieval.

Every turn goes through `services.turn_ask` on a real Conversation (user id `playground:<username>`), and every search
through the selector the search endpoint calls, so the page shows what a customer app gets: the answer, its sources
and the dedup decision, written to the audit log like any other turn. Only tenant admins may use it; the tenant is
resolved as on the settings page (`admin_tenant_resolve`), another tenant's knowledge base or conversation is a 404,
and a conversation the playground did not start for this admin is a 404 too, so the page never adds turns to a
customer's conversation.

The page is HTML; its chat and search are endpoints behind the admin's session and CSRF checks, whose errors are the
API's `{"message", "extra"}` with the same status, so the page shows the service's own message. The chat's turn
answers as Server-Sent Events when the page asks for them (`Accept: text/event-stream`), through `services.turn_stream`
as the API's messages endpoint does, with the same events in the same order (`decision`, `sources`, `delta`..., then
`done` or `error`) and the same guarantee: the turn is recorded exactly once, whether the page reads to the end or
goes away. Their data is what the page draws (`turn_event_display`): the API's, with each source's document title and,
at the end, the turn's number and audit event. Refusals come before the first event and are JSON, as without
streaming.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from functools import wraps
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from conversations import services
from conversations.admin.views import admin_tenant_resolve, tenants_for
from conversations.models import Conversation, DedupEvent
from conversations.services import TurnEvent, TurnOutcome, TurnStream
from kbplatform.errors import ApplicationError, NotFoundError
from retrieval import embeddings
from retrieval.models import Document, KnowledgeBase
from retrieval.selectors import ChunkHit, IndexState, chunk_search, index_state, knowledge_base_list
from tenants.models import Role, Tenant

logger = logging.getLogger(__name__)

PLAYGROUND_ROLES = (Role.ADMIN,)
PLAYGROUND_USER_PREFIX = "playground:"
# The search endpoint's bounds and default (retrieval.apis.KnowledgeBaseSearchApi), so a test here is one there.
SEARCH_QUERY_MAX_CHARS = 4000
SEARCH_LIMIT_MAX = 100
SEARCH_LIMIT_DEFAULT = 10


def playground_user_id(*, user: AbstractBaseUser) -> str:
    """The conversation user id of an admin's playground turns: they are told apart from customers' in the audit log,
    and the same admin's turns share one `user` dedup scope."""
    return f"{PLAYGROUND_USER_PREFIX}{user.get_username()}"


# --- forms: what the page posts ------------------------------------------------------------------------------------
class PlaygroundConversationForm(forms.Form):
    knowledge_base = forms.IntegerField(min_value=1)


class PlaygroundTurnForm(forms.Form):
    question = forms.CharField(max_length=services.QUESTION_MAX_CHARS)
    force_refresh = forms.BooleanField(required=False)


class PlaygroundSearchForm(forms.Form):
    knowledge_base = forms.IntegerField(min_value=1)
    query = forms.CharField(max_length=SEARCH_QUERY_MAX_CHARS)
    top_k = forms.IntegerField(min_value=1, max_value=SEARCH_LIMIT_MAX, initial=SEARCH_LIMIT_DEFAULT, required=False)
    group_by_document = forms.BooleanField(required=False, initial=True)

    def clean_top_k(self) -> int:
        """Left empty, the search endpoint's default."""
        top_k = self.cleaned_data["top_k"]
        return SEARCH_LIMIT_DEFAULT if top_k is None else top_k


# --- what the page shows (pure) ------------------------------------------------------------------------------------
def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def index_state_display(state: IndexState | None) -> dict[str, Any] | None:
    if state is None:
        return None
    return {"status": str(state.status), "reindex_progress": state.reindex_progress}


def turn_display(
    *, outcome: TurnOutcome, question: str, document_titles: dict[int, str], audit_url: str | None
) -> dict[str, Any]:
    """One turn as the page draws it: the API's answer, sources and decision, with each source's document title and
    the turn's audit event. Pure."""
    return {
        "turn_id": outcome.turn.pk,
        "number": outcome.turn.number,
        "question": question,
        "answer": outcome.answer,
        "sources": [
            {
                "chunk_id": int(source.chunk_id),
                "document_id": int(source.document_id),
                "document_title": document_titles.get(int(source.document_id), ""),
                "document_external_id": source.document_external_id,
                "external_id": source.external_id,
                "score": _float_or_none(source.score),
                "similarity": _float_or_none(source.similarity),
                "text": source.text,
            }
            for source in outcome.sources
        ],
        "index": index_state_display(outcome.index),
        "dedup": {
            "action": outcome.action,
            "intent": outcome.intent,
            "similarity": _float_or_none(outcome.similarity),
            "matched_turn_id": outcome.matched_turn_id,
            "excluded_count": int(outcome.excluded_count),
            "relaxed": bool(outcome.relaxed),
            "shadow_action": outcome.shadow_action,
            "reason": outcome.reason,
        },
        "audit_url": audit_url,
    }


def turn_event_display(
    *,
    event: TurnEvent,
    question: str,
    document_titles: dict[int, str],
    number: int | None = None,
    audit_url: str | None = None,
) -> dict[str, Any]:
    """A streamed turn's event as the page draws it: the API's event data (`decision`, `delta`, `done`, `error`), the
    `sources` event's with each source's document title and its index state shown as `turn_display` shows it; `done`
    and `error` also carry the turn's `number`, `question` and `audit_url` (the turn is recorded by then). Pure."""
    data = dict(event.data)
    if event.name == "sources":
        data["sources"] = [
            {**source, "document_title": document_titles.get(int(source["document_id"]), "")}
            for source in data["sources"]
        ]
        data["index"] = index_state_display(data["index"])
    elif event.name in ("done", "error"):
        data.update({"number": number, "question": question, "audit_url": audit_url})
    return data


def event_bytes(*, name: str, data: dict[str, Any]) -> bytes:
    """One Server-Sent Event: its type and one line of JSON (which escapes every line break)."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def search_display(*, hits: Iterable[ChunkHit], state: IndexState, took_ms: float) -> dict[str, Any]:
    """The search endpoint's body (results best first, the index state, the time taken). Pure."""
    return {
        "results": [
            {
                "chunk_id": hit.chunk_id,
                "document_id": hit.document_id,
                "document_title": hit.document_title,
                "document_external_id": hit.document_external_id,
                "external_id": hit.external_id,
                "position": hit.position,
                "score": float(hit.score),
                "similarity": hit.similarity,
                "text": hit.text,
            }
            for hit in hits
        ],
        "index": index_state_display(state),
        "took_ms": round(took_ms, 1),
    }


def form_errors_message(form: forms.Form) -> tuple[str, dict[str, list[str]]]:
    """A form's errors as the API words a 400: one line naming each field at fault, and the fields' messages."""
    fields = {name: [str(message) for message in messages] for name, messages in form.errors.items()}
    summary = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in fields.items())
    return f"The request is not valid: {summary}", fields


# --- reads ---------------------------------------------------------------------------------------------------------
def _document_titles(*, tenant: Tenant, document_ids: Iterable[int]) -> dict[int, str]:
    ids = set(document_ids)
    if not ids:
        return {}
    return dict(Document.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", "title"))


def _audit_url(*, tenant: Tenant, turn_id: int) -> str | None:
    event_id = DedupEvent.objects.for_tenant(tenant).filter(turn_id=turn_id).values_list("pk", flat=True).first()
    return reverse("admin:conversations_dedupevent_change", args=[event_id]) if event_id is not None else None


def _playground_conversation(*, tenant: Tenant, conversation_id: int, user: AbstractBaseUser) -> Conversation:
    """The tenant's conversation that this admin's playground started, or 404: the playground never adds a turn to a
    customer's conversation or to another admin's."""
    conversation = (
        Conversation.objects.for_tenant(tenant)
        .filter(pk=conversation_id, user_id=playground_user_id(user=user))
        .first()
    )
    if conversation is None:
        raise NotFoundError("Conversation not found.")
    return conversation


# --- views ---------------------------------------------------------------------------------------------------------
def _json_errors(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A refusal as JSON the page can show: the service's ApplicationError with its status, and the tenant
    resolver's 404 and 403, never an HTML error page inside the chat."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except ApplicationError as error:
            return JsonResponse({"message": error.message, "extra": error.extra}, status=error.status_code)
        except Http404:
            return JsonResponse({"message": "Not found.", "extra": {}}, status=404)
        except PermissionDenied as error:
            message = str(error) or "You are not allowed to do this."
            return JsonResponse({"message": message, "extra": {}}, status=403)

    return wrapped


def _invalid(form: forms.Form) -> JsonResponse:
    message, fields = form_errors_message(form)
    return JsonResponse({"message": message, "extra": {"fields": fields}}, status=400)


def playground_view(request: HttpRequest, model_admin: admin.ModelAdmin) -> HttpResponse:
    """The page: the tenant's knowledge bases to pick from, the chat and the retrieval test."""
    tenant = admin_tenant_resolve(request, roles=PLAYGROUND_ROLES)
    knowledge_bases = knowledge_base_list(tenant=tenant)
    knowledge_base: KnowledgeBase | None = knowledge_bases[0] if knowledge_bases else None
    raw = request.GET.get("knowledge_base")
    if raw:
        try:
            knowledge_base_id = int(raw)
        except ValueError:
            raise Http404("No such knowledge base.") from None
        knowledge_base = next((kb for kb in knowledge_bases if kb.pk == knowledge_base_id), None)
        if knowledge_base is None:
            raise Http404("No such knowledge base.")
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Playground of {tenant.name}",
        "subtitle": None,
        "tenant": tenant,
        "tenants": tenants_for(request, roles=PLAYGROUND_ROLES),
        "knowledge_bases": knowledge_bases,
        "knowledge_base": knowledge_base,
        "playground_user_id": playground_user_id(user=request.user),
        "turn_form": PlaygroundTurnForm(),
        "search_form": PlaygroundSearchForm(),
        "question_max_chars": services.QUESTION_MAX_CHARS,
        "urls": {
            "conversation_create": reverse("admin:conversations_conversation_playground_start"),
            # The JS puts the conversation's id in place of 0.
            "turn": reverse("admin:conversations_conversation_playground_turn", args=[0]),
            "search": reverse("admin:conversations_conversation_playground_search"),
        },
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/conversations/playground.html", context)


@require_POST
@_json_errors
def playground_conversation_create_view(request: HttpRequest) -> JsonResponse:
    """A new conversation with the chosen knowledge base, through the service the API's create calls."""
    tenant = admin_tenant_resolve(request, roles=PLAYGROUND_ROLES)
    form = PlaygroundConversationForm(request.POST)
    if not form.is_valid():
        return _invalid(form)
    conversation = services.conversation_create(
        tenant=tenant,
        knowledge_base_id=form.cleaned_data["knowledge_base"],
        user_id=playground_user_id(user=request.user),
    )
    return JsonResponse(
        {
            "conversation": conversation.pk,
            "knowledge_base": conversation.knowledge_base_id,
            "user_id": conversation.user_id,
            "expires_at": conversation.expires_at.isoformat(),
        },
        status=201,
    )


class _PlaygroundEvents:
    """The SSE bytes of a streamed playground turn; closing it (the WSGI server does, the page gone or not) closes
    the turn's stream, which records the turn if it was not recorded yet."""

    def __init__(self, *, tenant: Tenant, turn_stream: TurnStream, question: str) -> None:
        self.tenant = tenant
        self.turn_stream = turn_stream
        self.question = question

    def __iter__(self) -> Iterator[bytes]:
        for event in self.turn_stream:
            titles, number, audit_url = {}, None, None
            if event.name == "sources":
                ids = (source["document_id"] for source in event.data["sources"])
                titles = _document_titles(tenant=self.tenant, document_ids=ids)
            elif event.name in ("done", "error") and self.turn_stream.outcome is not None:
                # (No outcome: the turn could not be recorded, and the error event says so.)
                number = self.turn_stream.outcome.turn.number
                audit_url = _audit_url(tenant=self.tenant, turn_id=self.turn_stream.outcome.turn.pk)
            data = turn_event_display(
                event=event, question=self.question, document_titles=titles, number=number, audit_url=audit_url
            )
            yield event_bytes(name=event.name, data=data)

    def close(self) -> None:
        self.turn_stream.close()


@require_POST
@_json_errors
def playground_turn_view(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """One turn as the API's messages endpoint takes it (answer mode): streamed through `services.turn_stream` when
    the page accepts `text/event-stream`, else one JSON body through `services.turn_ask`."""
    tenant = admin_tenant_resolve(request, roles=PLAYGROUND_ROLES)
    form = PlaygroundTurnForm(request.POST)
    if not form.is_valid():
        return _invalid(form)
    _playground_conversation(tenant=tenant, conversation_id=conversation_id, user=request.user)
    question = form.cleaned_data["question"]
    if "text/event-stream" in request.headers.get("Accept", ""):
        # Refusals raise here, before the response starts: JSON, as without streaming.
        turn_stream = services.turn_stream(
            prepared=services.turn_prepare(
                tenant=tenant,
                conversation_id=conversation_id,
                question=question,
                force_refresh=form.cleaned_data["force_refresh"],
            )
        )
        response = StreamingHttpResponse(
            _PlaygroundEvents(tenant=tenant, turn_stream=turn_stream, question=question),
            content_type="text/event-stream; charset=utf-8",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    outcome = services.turn_ask(
        tenant=tenant,
        conversation_id=conversation_id,
        question=question,
        force_refresh=form.cleaned_data["force_refresh"],
    )
    body = turn_display(
        outcome=outcome,
        question=question,
        document_titles=_document_titles(tenant=tenant, document_ids=(s.document_id for s in outcome.sources)),
        audit_url=_audit_url(tenant=tenant, turn_id=outcome.turn.pk),
    )
    return JsonResponse(body)


@require_POST
@_json_errors
def playground_search_view(request: HttpRequest) -> JsonResponse:
    """The search endpoint's search (`chunk_search` with the query embedded once): no conversation, no exclusions."""
    tenant = admin_tenant_resolve(request, roles=PLAYGROUND_ROLES)
    form = PlaygroundSearchForm(request.POST)
    if not form.is_valid():
        return _invalid(form)
    knowledge_base = services.knowledge_base_for(tenant=tenant, knowledge_base_id=form.cleaned_data["knowledge_base"])
    started = time.perf_counter()
    model = embeddings.knowledge_base_model(knowledge_base.embedding_model)
    query_model_identity = embeddings.model_identity(model)
    hits = chunk_search(
        tenant=tenant,
        knowledge_base=knowledge_base,
        query_vector=embeddings.embed_query(form.cleaned_data["query"], model),
        query_text=form.cleaned_data["query"],
        query_model_identity=query_model_identity,
        limit=form.cleaned_data["top_k"],
        group_by_document=form.cleaned_data["group_by_document"],
        hit_similarity=True,
    )
    took_ms = (time.perf_counter() - started) * 1000
    # Logged as the search endpoint logs its queries, with the admin in place of the API key.
    logger.info(
        "playground search tenant=%s kb=%s user=%s limit=%s hits=%s ms=%.1f query=%r",
        tenant.slug,
        knowledge_base.pk,
        request.user.get_username(),
        form.cleaned_data["top_k"],
        len(hits),
        took_ms,
        form.cleaned_data["query"][:200],
    )
    state = index_state(knowledge_base=knowledge_base, query_model_identity=query_model_identity)
    return JsonResponse(search_display(hits=hits, state=state, took_ms=took_ms))
