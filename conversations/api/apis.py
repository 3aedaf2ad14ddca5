"""REST endpoints of conversations: thin views over services and selectors. Another tenant's conversation, turn or
knowledge base is a 404; a key bound to one knowledge base reaches only that one's conversations."""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.http import StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers, status
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import selectors, services
from conversations.models import (
    Conversation,
    DedupAction,
)
from kbplatform.serializers import MAX_OFFSET, StrictInputSerializer, id_field
from kbplatform.text import control_character_problem
from retrieval.api_fields import (
    EMBEDDING_MODEL_MISMATCH_RESPONSE,
    IndexStateOutputSerializer,
    MetadataFilterField,
    index_state_body,
)
from tenants.api import TenantApi
from tenants.scopes import Scope


class TurnSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    number = serializers.IntegerField()
    question = serializers.CharField()
    intent = serializers.CharField()
    mode = serializers.CharField()
    answer = serializers.CharField()
    decision = serializers.CharField()
    similarity = serializers.FloatField(allow_null=True)
    matched_turn_id = serializers.IntegerField(allow_null=True)
    source_chunk_ids = serializers.ListField(child=serializers.IntegerField())
    context_tokens = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class ConversationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    knowledge_base = serializers.IntegerField(source="knowledge_base_id")
    user_id = serializers.CharField()
    title = serializers.SerializerMethodField(
        help_text="The title the client gave (PATCH), else the start of the first question asked (small talk is no "
        "question), else empty."
    )
    title_is_default = serializers.SerializerMethodField(
        help_text="True when `title` was made from the first question (the client gave none)."
    )
    turn_count = serializers.IntegerField()
    metadata_filter = serializers.JSONField(allow_null=True)
    created_at = serializers.DateTimeField()
    last_active_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()

    def get_title(self, conversation: Conversation) -> str:
        return selectors.conversation_title(conversation)

    def get_title_is_default(self, conversation: Conversation) -> bool:
        return not conversation.title


class ConversationListCreateApi(TenantApi):
    """GET lists the conversations the key reaches; POST starts one."""

    required_scope = Scope.CHAT

    class FilterSerializer(StrictInputSerializer):
        user_id = serializers.CharField(
            max_length=255,
            required=False,
            allow_blank=True,
            trim_whitespace=False,
            help_text="Only this end user's conversations (exact match; empty reads as absent).",
        )
        knowledge_base = id_field(required=False, help_text="Only conversations over this knowledge base.")
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=100)
        offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET, default=0)

        def validate_user_id(self, value: str) -> str:
            problem = control_character_problem(value)
            if problem is not None:
                raise serializers.ValidationError(problem)
            return value

    # Named as it was when the view only started conversations (ConversationCreateApi), so clients generated from the
    # schema keep the request type.
    @extend_schema_serializer(component_name="ConversationCreateInput")
    class InputSerializer(StrictInputSerializer):
        knowledge_base = serializers.IntegerField(min_value=1)
        user_id = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
        metadata_filter = MetadataFilterField(
            required=False, default=None, help_text="Applied to every turn's search of the conversation."
        )

    @extend_schema(
        parameters=[FilterSerializer],
        responses=inline_serializer(
            "ConversationPage",
            {
                "count": serializers.IntegerField(help_text="The conversations that match the filters, on every page."),
                "results": ConversationSerializer(many=True, help_text="Most recently active first."),
            },
        ),
        summary="The conversations, most recently active first, one page (limit/offset)",
        operation_id="v1_conversations_list",
    )
    def get(self, request: Request) -> Response:
        """Conversations are listed until purged (expired ones too: `expires_at` says which). A key limited to one
        knowledge base lists that one's only."""
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = dict(filters.validated_data)
        limit, offset = params.pop("limit"), params.pop("offset")
        conversations = selectors.conversation_list(
            tenant=self.tenant,
            user_id=params.get("user_id") or None,
            knowledge_base_id=params.get("knowledge_base"),
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
        )
        page = list(conversations[offset : offset + limit])
        return Response({"count": conversations.count(), "results": ConversationSerializer(page, many=True).data})

    @extend_schema(request=InputSerializer, responses={201: ConversationSerializer}, summary="Start a conversation")
    def post(self, request: Request) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        conversation = services.conversation_create(
            tenant=self.tenant,
            knowledge_base_id=data.validated_data["knowledge_base"],
            user_id=data.validated_data["user_id"],
            metadata_filter=data.validated_data["metadata_filter"],
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
        )
        return Response(ConversationSerializer(conversation).data, status=status.HTTP_201_CREATED)


class ConversationDetailApi(TenantApi):
    """GET reads a conversation with its latest turns; PATCH renames it; DELETE deletes it with everything held for
    it. Any key that reaches the conversation may do all three."""

    required_scope = Scope.CHAT

    # The turns a conversation's detail holds: the latest ones. Older turns: GET .../turns/?offset=.
    DETAIL_TURNS = 20

    class InputSerializer(StrictInputSerializer):
        title = serializers.CharField(
            max_length=services.TITLE_MAX_CHARS,
            allow_blank=True,
            help_text="The conversation's title; empty removes it (the title is then made from the first question).",
        )

    class OutputSerializer(ConversationSerializer):
        turns = TurnSerializer(
            many=True,
            help_text="The latest stored turns (at most 20), oldest of them first; all of them: GET "
            "/api/v1/conversations/{id}/turns/.",
        )
        turns_total = serializers.IntegerField(
            help_text="How many turns the conversation holds (`turns` has the latest of them); less than "
            "`turn_count` when turns were deleted."
        )

    def _conversation(self, conversation_id: int) -> Conversation:
        return selectors.conversation_get(
            tenant=self.tenant,
            conversation_id=conversation_id,
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
        )

    @extend_schema(responses=OutputSerializer, summary="A conversation with its latest turns")
    def get(self, request: Request, conversation_id: int) -> Response:
        conversation = self._conversation(conversation_id)
        turns = selectors.conversation_latest_turns(
            tenant=self.tenant, conversation=conversation, limit=self.DETAIL_TURNS
        )
        data = ConversationSerializer(conversation).data
        data["turns"] = TurnSerializer(turns, many=True).data
        data["turns_total"] = (
            len(turns)
            if len(turns) < self.DETAIL_TURNS
            else selectors.conversation_turns(tenant=self.tenant, conversation=conversation).count()
        )
        return Response(data)

    @extend_schema(request=InputSerializer, responses=ConversationSerializer, summary="Rename a conversation")
    def patch(self, request: Request, conversation_id: int) -> Response:
        conversation = self._conversation(conversation_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        conversation = services.conversation_rename(
            tenant=self.tenant, conversation=conversation, title=data.validated_data["title"]
        )
        return Response(ConversationSerializer(conversation).data)

    @extend_schema(
        responses={204: None},
        summary="Delete a conversation: its turns, what they showed, feedback, hot state and question vectors "
        "(audit events stay)",
    )
    def delete(self, request: Request, conversation_id: int) -> Response:
        services.conversation_delete(tenant=self.tenant, conversation=self._conversation(conversation_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConversationTurnListApi(TenantApi):
    required_scope = Scope.CHAT

    class FilterSerializer(StrictInputSerializer):
        limit = serializers.IntegerField(required=False, min_value=1, max_value=100, default=20)
        offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET, default=0)

    @extend_schema(
        parameters=[FilterSerializer],
        responses=inline_serializer(
            "TurnPage",
            {
                "count": serializers.IntegerField(help_text="The conversation's stored turns, on every page."),
                "results": TurnSerializer(many=True, help_text="In the order they were taken (turn number)."),
            },
        ),
        summary="A conversation's turns, oldest first, one page (limit/offset)",
        operation_id="v1_conversations_turns_list",
    )
    def get(self, request: Request, conversation_id: int) -> Response:
        conversation = selectors.conversation_get(
            tenant=self.tenant,
            conversation_id=conversation_id,
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
        )
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        limit, offset = filters.validated_data["limit"], filters.validated_data["offset"]
        turns = selectors.conversation_turns(tenant=self.tenant, conversation=conversation)
        page = list(turns[offset : offset + limit])
        return Response({"count": turns.count(), "results": TurnSerializer(page, many=True).data})


class EventStreamRenderer(BaseRenderer):
    """Lets a client that accepts only `text/event-stream` through content negotiation; the events themselves are
    written by the view (a StreamingHttpResponse), and a JSON error is rendered as JSON (`finalize_response`)."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(
        self, data: object, accepted_media_type: str | None = None, renderer_context: dict | None = None
    ) -> bytes:
        return json.dumps(data).encode()


class JsonErrorsWhileStreamingMixin:
    """For a view that may answer with Server-Sent Events: a JSON body (an error before the first event) is rendered
    as JSON whatever the client accepted."""

    def finalize_response(
        self, request: Request, response: HttpResponseBase, *args: object, **kwargs: object
    ) -> HttpResponseBase:
        if isinstance(response, Response) and isinstance(
            getattr(request, "accepted_renderer", None), EventStreamRenderer
        ):
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


def _wants_events(request: Request, stream: bool) -> bool:
    return stream or "text/event-stream" in request.headers.get("Accept", "")


def _sse(event: services.TurnEvent) -> bytes:
    data = event.data
    if event.name == "sources":
        index = data["index"]
        data = {**data, "index": index_state_body(index) if index is not None else None}
    return f"event: {event.name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


# One event of the stream, as an SSE client reads it: its type and its data line (a JSON object, per type below).
STREAM_EVENT = inline_serializer(
    "ConversationMessageEvent",
    {
        "event": serializers.ChoiceField(choices=services.EVENT_TYPES),
        "data": serializers.CharField(help_text="A JSON object: its fields per event type are in the description."),
    },
)


class _EventStream:
    """The SSE bytes of a TurnStream; closing it (the WSGI server does, the client gone or not) closes the turn's
    stream, which records the turn if it was not recorded yet."""

    def __init__(self, turn_stream: services.TurnStream) -> None:
        self.turn_stream = turn_stream

    def __iter__(self) -> Iterator[bytes]:
        for event in self.turn_stream:
            yield _sse(event)

    def close(self) -> None:
        self.turn_stream.close()


STREAM_DESCRIPTION = (
    "The turn as JSON; or as Server-Sent Events (text/event-stream), sent when the request has "
    '`Accept: text/event-stream` or `"stream": true`. Each event is '
    "`event: <type>` and `data: <JSON>`, in this order: `decision` (`dedup` as in the JSON response; `answer` is the "
    "whole answer of a served stored answer or small talk, else null; `rewritten_question`), `sources` (`sources`, "
    "`index`), zero or more `delta` (`text`: the next piece of a generated answer), then `done` (`turn_id`, "
    "`answer`, `answer_tokens`, `context_tokens`, `rewritten_question`) or `error` (`message`, `extra`, `status` "
    "502/504/500, `turn_id`: the answer service failed mid-stream and the turn is recorded as failed; or `status` 503 "
    "and `turn_id` null: the turn could not be recorded, nothing was saved, ask again). A client that "
    "disconnects leaves exactly one turn, recorded `interrupted` with no answer to serve again. Refusals before the "
    "first event (400, 404, 410, 409) are JSON errors."
)


class ConversationMessageApi(JsonErrorsWhileStreamingMixin, TenantApi):
    required_scope = Scope.CHAT

    renderer_classes = [JSONRenderer, EventStreamRenderer]

    class InputSerializer(StrictInputSerializer):
        question = serializers.CharField(max_length=services.QUESTION_MAX_CHARS, trim_whitespace=True)
        force_refresh = serializers.BooleanField(required=False, default=False)
        mode = serializers.ChoiceField(choices=["answer", "retrieve"], required=False, default="answer")
        stream = serializers.BooleanField(
            required=False,
            default=False,
            help_text="Answer as Server-Sent Events (as `Accept: text/event-stream` does); see the 200 "
            "text/event-stream response.",
        )

    class OutputSerializer(serializers.Serializer):
        class SourceSerializer(serializers.Serializer):
            chunk_id = serializers.IntegerField()
            document_id = serializers.IntegerField()
            external_id = serializers.CharField(allow_null=True)
            document_external_id = serializers.CharField(allow_null=True)
            score = serializers.FloatField(allow_null=True)
            similarity = serializers.FloatField(
                allow_null=True,
                help_text="The question's cosine to the chunk under the knowledge base's embedding model: how near it "
                "is in meaning, where `score` is what ranked it. Always in semantic mode; in the others only where the "
                "answer reads a similarity floor (the extractive answer on a model with one), else null.",
            )
            text = serializers.CharField()

        class DedupSerializer(serializers.Serializer):
            action = serializers.ChoiceField(choices=DedupAction.choices)
            intent = serializers.CharField()
            similarity = serializers.FloatField(allow_null=True)
            matched_turn_id = serializers.IntegerField(allow_null=True)
            excluded_count = serializers.IntegerField()
            relaxed = serializers.BooleanField()
            shadow_action = serializers.CharField(allow_null=True)
            reason = serializers.CharField(allow_blank=True)
            curated_answer_id = serializers.IntegerField(
                allow_null=True,
                help_text="The curated answer served (GET /api/v1/curated-answers/{id}/): matched by one of its "
                "phrasings (`matched_turn_id` null), or an earlier turn's copy of it; null when none was served.",
            )

        turn_id = serializers.IntegerField()
        answer = serializers.CharField(allow_null=True)
        sources = SourceSerializer(many=True)
        index = IndexStateOutputSerializer(
            allow_null=True,
            help_text=(
                "How the knowledge base's vectors stood when this turn searched them (see the search endpoint); null "
                "when the turn searched nothing (a stored answer served, small talk)."
            ),
        )
        dedup = DedupSerializer()

    @extend_schema(
        request=InputSerializer,
        responses={
            (200, "application/json"): OpenApiResponse(response=OutputSerializer, description=STREAM_DESCRIPTION),
            (200, "text/event-stream"): OpenApiResponse(response=STREAM_EVENT, description=STREAM_DESCRIPTION),
            409: EMBEDDING_MODEL_MISMATCH_RESPONSE,
            410: OpenApiResponse(
                description="The conversation has expired (the policy's TTL passed since its last turn): start a new "
                "one. `extra.conversation` is its id."
            ),
            502: OpenApiResponse(
                description="The answer service (LLM_BASE_URL) failed or sent a reply that is not an answer; nothing "
                "was written. Retry, or ask in `retrieve` mode. (Streamed, this is an `error` event.)"
            ),
            504: OpenApiResponse(
                description="The answer service did not reply within LLM_TIMEOUT; nothing was written. Retry later. "
                "(Streamed, this is an `error` event.)"
            ),
        },
        summary="Ask a question in a conversation",
    )
    def post(self, request: Request, conversation_id: int) -> Response | StreamingHttpResponse:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        turn = {
            "tenant": self.tenant,
            "conversation_id": conversation_id,
            "question": data.validated_data["question"],
            "force_refresh": data.validated_data["force_refresh"],
            "mode": data.validated_data["mode"],
            "allowed_knowledge_base_id": self.api_key.knowledge_base_id,
        }
        if _wants_events(request, data.validated_data["stream"]):
            # Refusals raise here, before the response starts: they are JSON errors like any other.
            events = _EventStream(services.turn_stream(prepared=services.turn_prepare(**turn)))
            response = StreamingHttpResponse(events, content_type="text/event-stream; charset=utf-8")
            # Proxies (nginx) must pass each event on as it comes, and nothing may cache a turn.
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"
            return response
        outcome = services.turn_ask(**turn)
        # Built with plain types rather than through OutputSerializer (which documents it, and which a test holds it
        # to): serializing the turn's few fields through DRF took about 0.6 ms of CPU, on a cache hit's budget of
        # a few milliseconds.
        body = {
            "turn_id": outcome.turn.pk,
            "answer": outcome.answer,
            "sources": services.turn_sources_body(outcome.sources),
            "index": index_state_body(outcome.index) if outcome.index is not None else None,
            "dedup": services.turn_dedup_body(
                action=outcome.action,
                intent=outcome.intent,
                similarity=outcome.similarity,
                matched_turn_id=outcome.matched_turn_id,
                excluded_count=outcome.excluded_count,
                relaxed=outcome.relaxed,
                shadow_action=outcome.shadow_action,
                reason=outcome.reason,
                curated_answer_id=outcome.curated_answer_id,
            ),
        }
        return Response(body)


class TurnAnswerApi(TenantApi):
    required_scope = Scope.CHAT

    class InputSerializer(StrictInputSerializer):
        answer = serializers.CharField(max_length=services.ANSWER_MAX_CHARS)

    @extend_schema(
        request=InputSerializer,
        responses={
            200: TurnSerializer,
            409: OpenApiResponse(description="The turn was asked in answer mode, or is small talk: no answer."),
            410: OpenApiResponse(
                description="The turn's conversation has expired: it takes no answer. `extra.conversation` is its id."
            ),
        },
        summary="Store the client's answer to a turn",
    )
    def put(self, request: Request, turn_id: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        turn = services.turn_answer_set(
            tenant=self.tenant,
            turn_id=turn_id,
            answer=data.validated_data["answer"],
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
        )
        return Response(TurnSerializer(turn).data)
