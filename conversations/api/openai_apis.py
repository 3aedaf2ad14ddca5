"""The OpenAI-compatible endpoints: `GET /api/v1/models` (the knowledge bases a key reaches, as the models a chat
completion names) and `POST /api/v1/chat/completions`: OpenAI's Chat Completions request and response (streamed as
`chat.completion.chunk` Server-Sent Events ending in `data: [DONE]`), over a knowledge base (`model: "kb-<id>"`) or an
existing conversation (`conversation_id`), authenticated by a `chat` key sent as `Authorization: Bearer <key>`, every
error in OpenAI's shape. Thin views: the shapes are `openai_chat`'s, the turn is `services.chat_turn_take`'s, which
takes the very turn the messages endpoint takes."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import services
from conversations.api.apis import ConversationMessageApi, EventStreamRenderer, JsonErrorsWhileStreamingMixin
from conversations.turn.openai_chat import (
    ROLES,
    ChunkWriter,
    chat_question,
    completion_body,
    error_body,
    error_body_of,
    knowledge_base_id_of_model,
    model_list_body,
    usage_body,
    validation_error_body,
)
from kbplatform.errors import NotFoundError
from kbplatform.exception_handler import api_exception_handler
from kbplatform.parsers import SafeJSONParser
from kbplatform.serializers import StrictInputSerializer
from retrieval.api_fields import IndexStateOutputSerializer, index_state_body
from retrieval.selectors import knowledge_base_list
from tenants.api import TenantApi
from tenants.authentication import BearerApiKeyAuthentication
from tenants.scopes import Scope

logger = logging.getLogger(__name__)

_IGNORED = "Accepted and ignored: the platform's answer service has its own settings."


def _ignored_number(kind: type[serializers.Field]) -> serializers.Field:
    return kind(required=False, allow_null=True, help_text=_IGNORED)


def _ignored_json() -> serializers.JSONField:
    return serializers.JSONField(required=False, allow_null=True, help_text=_IGNORED)


def _refused_unless(value: Any, allowed: tuple[Any, ...], message: str, code: str = "unsupported") -> Any:
    """`value` when it asks for nothing the platform cannot do (`allowed`, or null), else a 400 with `message`."""
    if value is None or value in allowed:
        return value
    raise serializers.ValidationError(message, code=code)


def chat_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """The API's error handler (statuses, Retry-After, the refusal log), answered in OpenAI's error shape; an
    unexpected failure is an OpenAI-shaped 500, so an OpenAI client reads every error the same way."""
    response = api_exception_handler(exc, context)
    if response is None:
        logger.error("chat completion failed", exc_info=exc)
        return Response(error_body(message="Internal error; it has been logged.", status=500), status=500)
    if isinstance(exc, exceptions.ValidationError):
        response.data = validation_error_body(exc.get_full_details())
    elif isinstance(exc, exceptions.NotAuthenticated):
        response.data = error_body(
            message='Missing API key: send the header "Authorization: Bearer <key>".',
            status=response.status_code,
            code="missing_api_key",
        )
    else:
        data = response.data
        response.data = error_body_of(status=response.status_code, message=data["message"], extra=data["extra"])
    return response


class _ChunkStream:
    """The SSE bytes of a streamed chat turn: each `chat.completion.chunk` as `data: <json>`, then `data: [DONE]`.
    Closing it (the WSGI server does, the client gone or not) closes the turn's stream, which records the turn if it
    was not recorded yet."""

    def __init__(
        self, *, turn_stream: services.TurnStream, writer: ChunkWriter, on_finished: Callable[[str], None]
    ) -> None:
        self.turn_stream = turn_stream
        self.writer = writer
        self.on_finished = on_finished

    def __iter__(self) -> Iterator[bytes]:
        for event in self.turn_stream:
            data = event.data
            if event.name == "sources" and data["index"] is not None:
                data = {**data, "index": index_state_body(data["index"])}
            for chunk in self.writer.chunks_of(event.name, data):
                yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()
        if self.writer.finished:
            self.on_finished(self.writer.answer_sent)
        yield b"data: [DONE]\n\n"

    def close(self) -> None:
        self.turn_stream.close()


_PLATFORM_HELP = (
    "What the platform adds to OpenAI's shape: the conversation (send its id as `conversation_id` to continue it), "
    "the turn, the dedup decision (served from a stored answer or not, why, the similarity, the earlier turn matched) "
    "and the sources, as the messages endpoint gives them."
)

STREAM_DESCRIPTION = (
    'The turn as a `chat.completion`; or, with `"stream": true`, as Server-Sent Events, each `data: <JSON>` a '
    '`chat.completion.chunk`, then `data: [DONE]`. The chunks: first the role (`delta: {"role": "assistant", '
    '"content": ""}`) with `kbplatform` (conversation, dedup decision, sources); then the answer (each generated '
    'piece, or a stored answer or small-talk reply in one chunk); then the last chunk (`finish_reason: "stop"`) with '
    "the whole `kbplatform` field, `turn_id` included; with `stream_options.include_usage`, a chunk with no choices "
    'and `usage`. An answer service that fails mid-answer is a `data: {"error": {...}}` chunk (the turn is recorded '
    "as failed, `kbplatform.turn_id` names it); a turn that could not be recorded at all is such a chunk with code "
    "`service_unavailable` and `turn_id` null. Refusals before the first chunk are JSON errors in OpenAI's shape."
)


class ChatMessageSerializer(StrictInputSerializer):
    role = serializers.ChoiceField(choices=ROLES)
    content = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='A string, or a list of text parts (`{"type": "text", "text": ...}`); the last '
        "message's is the question.",
    )
    name = serializers.CharField(required=False, allow_blank=True, help_text="Not read.")
    tool_calls = serializers.JSONField(required=False, allow_null=True, help_text="Not read.")
    tool_call_id = serializers.CharField(required=False, allow_blank=True, help_text="Not read.")
    function_call = serializers.JSONField(required=False, allow_null=True, help_text="Not read.")
    refusal = serializers.JSONField(required=False, allow_null=True, help_text="Not read.")
    audio = serializers.JSONField(required=False, allow_null=True, help_text="Not read.")


class ChatStreamOptionsSerializer(StrictInputSerializer):
    include_usage = serializers.BooleanField(
        required=False, default=False, help_text="Send a last chunk with `usage` (and no choices)."
    )
    include_obfuscation = serializers.BooleanField(required=False, help_text="Accepted and ignored.")


class ChatCompletionPlatformSerializer(serializers.Serializer):
    conversation_id = serializers.IntegerField()
    turn_id = serializers.IntegerField(
        allow_null=True, help_text="Null in the stream's first chunk, before the turn is recorded."
    )
    dedup = ConversationMessageApi.OutputSerializer.DedupSerializer()
    sources = ConversationMessageApi.OutputSerializer.SourceSerializer(many=True)
    index = IndexStateOutputSerializer(allow_null=True)
    rewritten_question = serializers.CharField(allow_null=True)


class ChatCompletionUsageSerializer(serializers.Serializer):
    prompt_tokens = serializers.IntegerField(help_text="The passages and history the answer service was shown.")
    completion_tokens = serializers.IntegerField(help_text="The answer generated; 0 for a served answer.")
    total_tokens = serializers.IntegerField()


class ChatCompletionCreateApi(JsonErrorsWhileStreamingMixin, TenantApi):
    """OpenAI's Chat Completions over this platform's knowledge bases: any OpenAI client library (base URL
    `.../api/v1`, the `chat` key as its API key), LangChain or chat front end takes turns unchanged.

    - `model` names the knowledge base: `kb-<id>` (`GET /api/v1/knowledge-bases/` lists the ids).
    - The last message is the turn's question and must be the user's; earlier messages are not read into the turn
      (the conversation keeps its own history). The turn is taken in the conversation `conversation_id` names; else,
      when the messages before the question are word for word a conversation's user and assistant messages after its
      last turn taken here (a client sending its whole transcript back, as chat front ends do), in that one (same
      knowledge base and `user`); else in a new conversation. The response's `kbplatform.conversation_id` says which.
    - The dedup decision runs as on the messages endpoint: the answer may be a stored one (`kbplatform.dedup`).
    - Accepted and ignored: `temperature`, `top_p`, `max_tokens`, `max_completion_tokens`, `frequency_penalty`,
      `presence_penalty`, `stop`, `seed`, `logit_bias`, `metadata`, `store`, `service_tier`, `parallel_tool_calls`,
      `reasoning_effort`, `verbosity`, `prompt_cache_key`, `prompt_cache_retention`, `safety_identifier`,
      `stream_options.include_obfuscation`. Honoured: `user` (the end user of a new conversation),
      `stream`, `stream_options.include_usage`. Refused with a 400 unless off: `n` other than 1, `tools`, `functions`,
      `tool_choice`/`function_call` other than none/auto, `response_format` other than text, `logprobs`,
      `top_logprobs`, `modalities` other than text, `audio`, `prediction`, `web_search_options`, `moderation`.
      Any other field is a 400 (`code: unknown_parameter`).
    - Errors: `{"error": {"message", "type", "param", "code"}}`.
    """

    required_scope = Scope.CHAT
    authentication_classes = [BearerApiKeyAuthentication]
    parser_classes = [SafeJSONParser]
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    class InputSerializer(StrictInputSerializer):
        model = serializers.CharField(max_length=100, help_text="The knowledge base: `kb-<id>`.")
        messages = ChatMessageSerializer(
            many=True,
            allow_empty=False,
            max_length=1000,
            help_text="The last message is the turn's question and must be the user's; earlier ones are not read.",
        )
        stream = serializers.BooleanField(required=False, default=False)
        stream_options = ChatStreamOptionsSerializer(required=False, allow_null=True)
        user = serializers.CharField(
            max_length=255,
            required=False,
            allow_blank=True,
            trim_whitespace=False,
            help_text="The end user: a new conversation's `user_id`; with `conversation_id`, the conversation's user "
            "or left out.",
        )
        n = serializers.IntegerField(
            required=False,
            allow_null=True,
            min_value=1,
            max_value=1,
            error_messages={"max_value": "The platform answers with one choice: n must be 1."},
        )
        conversation_id = serializers.IntegerField(
            required=False,
            allow_null=True,
            min_value=1,
            help_text="Platform extension: take the turn in this conversation (over the knowledge base `model` "
            "names); left out, in the conversation whose transcript the earlier messages are, or a new one.",
        )
        force_refresh = serializers.BooleanField(
            required=False, default=False, help_text="Platform extension: never serve a stored answer this turn."
        )
        temperature = _ignored_number(serializers.FloatField)
        top_p = _ignored_number(serializers.FloatField)
        frequency_penalty = _ignored_number(serializers.FloatField)
        presence_penalty = _ignored_number(serializers.FloatField)
        max_tokens = _ignored_number(serializers.IntegerField)
        max_completion_tokens = _ignored_number(serializers.IntegerField)
        seed = _ignored_number(serializers.IntegerField)
        stop = _ignored_json()
        logit_bias = _ignored_json()
        metadata = _ignored_json()
        store = _ignored_json()
        service_tier = _ignored_json()
        parallel_tool_calls = _ignored_json()
        reasoning_effort = _ignored_json()
        verbosity = _ignored_json()
        prompt_cache_key = _ignored_json()
        prompt_cache_retention = _ignored_json()
        safety_identifier = _ignored_json()
        tools = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless empty.")
        functions = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless empty.")
        tool_choice = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless none or auto.")
        function_call = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless none or auto.")
        response_format = serializers.JSONField(
            required=False, allow_null=True, help_text='Refused unless {"type": "text"}.'
        )
        logprobs = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless false.")
        top_logprobs = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless 0.")
        modalities = serializers.JSONField(required=False, allow_null=True, help_text='Refused unless ["text"].')
        audio = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless null.")
        prediction = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless null.")
        web_search_options = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless null.")
        moderation = serializers.JSONField(required=False, allow_null=True, help_text="Refused unless null.")

        def validate_tools(self, value: Any) -> Any:
            return _refused_unless(value, ([],), "The platform calls no tools: leave tools out.")

        def validate_functions(self, value: Any) -> Any:
            return _refused_unless(value, ([],), "The platform calls no functions: leave functions out.")

        def validate_tool_choice(self, value: Any) -> Any:
            return _refused_unless(value, ("none", "auto"), "The platform calls no tools: leave tool_choice out.")

        def validate_function_call(self, value: Any) -> Any:
            return _refused_unless(value, ("none", "auto"), "The platform calls no functions: leave function_call out.")

        def validate_response_format(self, value: Any) -> Any:
            return _refused_unless(
                value,
                ({"type": "text"},),
                'The answer is text: response_format may only be {"type": "text"}.',
                code="unsupported_value",
            )

        def validate_logprobs(self, value: Any) -> Any:
            return _refused_unless(value, (False,), "The platform gives no log probabilities: leave logprobs out.")

        def validate_top_logprobs(self, value: Any) -> Any:
            return _refused_unless(value, (0,), "The platform gives no log probabilities: leave top_logprobs out.")

        def validate_modalities(self, value: Any) -> Any:
            return _refused_unless(
                value, (["text"],), 'The answer is text: modalities may only be ["text"].', code="unsupported_value"
            )

        def validate_audio(self, value: Any) -> Any:
            return _refused_unless(value, (), "The answer is text: leave audio out.")

        def validate_prediction(self, value: Any) -> Any:
            return _refused_unless(value, (), "The platform takes no predicted output: leave prediction out.")

        def validate_web_search_options(self, value: Any) -> Any:
            return _refused_unless(value, (), "The platform answers from its knowledge base, not the web.")

        def validate_moderation(self, value: Any) -> Any:
            return _refused_unless(value, (), "The platform runs no moderation: leave moderation out.")

    class OutputSerializer(serializers.Serializer):
        class ChoiceSerializer(serializers.Serializer):
            class MessageSerializer(serializers.Serializer):
                role = serializers.ChoiceField(choices=["assistant"])
                content = serializers.CharField()
                refusal = serializers.CharField(allow_null=True)

            index = serializers.IntegerField()
            message = MessageSerializer()
            logprobs = serializers.JSONField(allow_null=True)
            finish_reason = serializers.ChoiceField(choices=["stop"])

        id = serializers.CharField()
        object = serializers.ChoiceField(choices=["chat.completion"])
        created = serializers.IntegerField()
        model = serializers.CharField()
        choices = ChoiceSerializer(many=True)
        usage = ChatCompletionUsageSerializer()
        system_fingerprint = serializers.CharField(allow_null=True)
        kbplatform = ChatCompletionPlatformSerializer(help_text=_PLATFORM_HELP)

    @extend_schema(
        request=InputSerializer,
        responses={
            (200, "application/json"): OpenApiResponse(response=OutputSerializer, description=STREAM_DESCRIPTION),
            (200, "text/event-stream"): OpenApiResponse(
                response=inline_serializer(
                    "ChatCompletionChunkEvent",
                    {"data": serializers.CharField(help_text="A `chat.completion.chunk` as JSON, or `[DONE]`.")},
                ),
                description=STREAM_DESCRIPTION,
            ),
            404: OpenApiResponse(
                description="The model names no knowledge base this key reaches (`code: model_not_found`), or "
                "`conversation_id` no conversation (`code: conversation_not_found`)."
            ),
            409: OpenApiResponse(
                description="`error.code` `embedding_model_mismatch`: the knowledge base's vectors were made by "
                "another embedding model than the one questions are embedded with; it answers again once a worker "
                "has taken up its re-index. Nothing was written."
            ),
            410: OpenApiResponse(description="The conversation has expired: leave conversation_id out to start anew."),
            502: OpenApiResponse(description="The answer service failed; nothing was written."),
            504: OpenApiResponse(description="The answer service did not reply in time; nothing was written."),
        },
        summary="OpenAI-compatible chat completion: a turn over a knowledge base or a conversation",
        extensions={"x-error-shape": "openai"},
    )
    def post(self, request: Request) -> Response | StreamingHttpResponse:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        model = fields["model"]
        knowledge_base_id = knowledge_base_id_of_model(model)
        if knowledge_base_id is None:
            raise NotFoundError(
                f"The model '{model}' does not exist: name a knowledge base as kb-<id> (GET /api/v1/knowledge-bases/ "
                "lists them).",
                extra={"param": "model", "code": "model_not_found"},
            )
        stream = fields["stream"]
        messages = fields["messages"]
        question = chat_question(messages)
        turn = services.chat_turn_take(
            tenant=self.tenant,
            knowledge_base_id=knowledge_base_id,
            question=question,
            conversation_id=fields.get("conversation_id"),
            user_id=fields.get("user"),
            force_refresh=fields["force_refresh"],
            stream=stream,
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
            transcript=services.transcript_digest(messages[:-1]),
        )

        def transcript_record(answer: str) -> None:
            services.transcript_record(
                tenant=self.tenant, conversation_id=turn.conversation.pk, messages=messages, answer=answer
            )

        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if stream:
            writer = ChunkWriter(
                completion_id=completion_id,
                created=created,
                model=model,
                conversation_id=turn.conversation.pk,
                include_usage=bool((fields.get("stream_options") or {}).get("include_usage")),
            )
            response = StreamingHttpResponse(
                _ChunkStream(turn_stream=turn.events, writer=writer, on_finished=transcript_record),
                content_type="text/event-stream; charset=utf-8",
            )
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"
            return response
        outcome = turn.outcome
        transcript_record(outcome.answer or "")
        usage = usage_body(
            prompt_tokens=0 if outcome.served else outcome.turn.context_tokens,
            completion_tokens=0 if outcome.served else outcome.turn.answer_tokens,
        )
        platform = {
            "conversation_id": turn.conversation.pk,
            "turn_id": outcome.turn.pk,
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
            "sources": services.turn_sources_body(outcome.sources),
            "index": index_state_body(outcome.index) if outcome.index is not None else None,
            "rewritten_question": outcome.rewritten_question or None,
        }
        return Response(
            completion_body(
                completion_id=completion_id,
                created=created,
                model=model,
                answer=outcome.answer or "",
                usage=usage,
                platform=platform,
            )
        )

    def get_exception_handler(self) -> Any:
        return chat_exception_handler


class ModelListApi(TenantApi):
    """OpenAI's model list: the knowledge bases this key reaches (one for a key limited to one), each as the model a
    chat completion names, `kb-<id>`. OpenAI clients (`client.models.list()`) and chat front ends read it to offer a
    choice of model. Errors in OpenAI's shape, as the chat endpoint's."""

    required_scope = Scope.CHAT
    authentication_classes = [BearerApiKeyAuthentication]
    renderer_classes = [JSONRenderer]

    class OutputSerializer(serializers.Serializer):
        class ModelSerializer(serializers.Serializer):
            class PlatformSerializer(serializers.Serializer):
                knowledge_base_id = serializers.IntegerField()
                name = serializers.CharField()
                embedding_model = serializers.CharField()

            id = serializers.CharField(help_text="`kb-<id>`: a chat completion's `model` for this knowledge base.")
            object = serializers.ChoiceField(choices=["model"])
            created = serializers.IntegerField(help_text="When the knowledge base was created (Unix seconds).")
            owned_by = serializers.CharField(help_text="The tenant's slug.")
            kbplatform = PlatformSerializer(help_text="Platform extension: the knowledge base this model is.")

        object = serializers.ChoiceField(choices=["list"])
        data = ModelSerializer(many=True)

    @extend_schema(
        responses={200: OutputSerializer},
        summary="OpenAI-compatible model list: the knowledge bases this key reaches, as kb-<id>",
        extensions={"x-error-shape": "openai"},
    )
    def get(self, request: Request) -> Response:
        knowledge_bases = knowledge_base_list(tenant=self.tenant, only_id=self.api_key.knowledge_base_id)
        return Response(model_list_body(knowledge_bases=knowledge_bases, owned_by=self.tenant.slug))

    def get_exception_handler(self) -> Any:
        return chat_exception_handler
