"""REST endpoints of ingestion and the retrieval test. A key limited to one knowledge base reaches nothing
else: another knowledge base, like another tenant's, is a 404."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kbplatform.errors import ApplicationError, NotFoundError
from kbplatform.serializers import MAX_OFFSET, StrictInputSerializer
from retrieval import embeddings, selectors, services
from retrieval.metadata import MetadataError, metadata_filter_validate, metadata_validate
from retrieval.models import Chunk, Document, DocumentStatus, KnowledgeBase, RetrievalMode, TextAnalyzer
from tenants.api import TenantApi
from tenants.scopes import KNOWLEDGE_BASE_READ, Scope

logger = logging.getLogger(__name__)

MAX_CHUNKS_PER_DOCUMENT = 20000


@extend_schema_field(OpenApiTypes.OBJECT)
class MetadataField(serializers.Field):
    """A document's metadata: a JSON object, or (in a multipart form) a string holding one (`retrieval.metadata`)."""

    validate_metadata = staticmethod(metadata_validate)

    def to_internal_value(self, data: Any) -> dict:
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise serializers.ValidationError(f"Not JSON: {exc}.") from exc
        try:
            return self.validate_metadata(data)
        except MetadataError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {
            "oneOf": [
                {"type": "string"},
                {"type": "integer"},
                {"type": "boolean"},
                {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]}},
            ]
        },
        "description": 'Only chunks of documents whose metadata matches: `{"lang": "en"}` (equal), `{"product": ["a", '
        '"b"]}` (any of), every key at once.',
    }
)
class MetadataFilterField(MetadataField):
    validate_metadata = staticmethod(metadata_filter_validate)


class KnowledgeBaseOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = KnowledgeBase
        fields = (
            "id",
            "name",
            "description",
            "embedding_model",
            "embedding_dimension",
            "chunk_max_tokens",
            "chunk_overlap_tokens",
            "reindex_status",
            "reindex_progress",
            "reindex_error",
            "retrieval_mode",
            "effective_retrieval_mode",
            "hybrid_dense_weight",
            "text_analyzer",
            "text_index",
            "text_index_progress",
            "text_index_error",
            "created_at",
            "updated_at",
        )

    effective_retrieval_mode = serializers.SerializerMethodField(
        help_text=(
            'The mode searches and turns run in: retrieval_mode, or "semantic" while the knowledge base\'s chunks '
            'carry no text in the search index (text_index not "ready": made before full-text search, until an '
            "operator moves it over with `manage.py text_index`)."
        )
    )

    def get_effective_retrieval_mode(self, obj: KnowledgeBase) -> str:
        return selectors.retrieval_mode_resolve(knowledge_base=obj)


class DocumentOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Document
        fields = (
            "id",
            "knowledge_base",
            "title",
            "external_id",
            "metadata",
            "split_oversize_chunks",
            "source_kind",
            "source_filename",
            "content_hash",
            "size_bytes",
            "status",
            "progress",
            "chunk_count",
            "error_message",
            "attempts",
            "created_at",
            "updated_at",
            "parsing_started_at",
            "chunking_started_at",
            "embedding_started_at",
            "indexing_started_at",
            "indexed_at",
            "failed_at",
        )


class ChunkHitOutputSerializer(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    document_external_id = serializers.CharField(allow_null=True)
    document_title = serializers.CharField()
    external_id = serializers.CharField(allow_null=True)
    position = serializers.IntegerField()
    score = serializers.FloatField()
    text = serializers.CharField()


class IndexStateOutputSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=[choice.value for choice in selectors.IndexStatus],
        help_text=(
            '"current": every vector is of the model that embedded the query. "reindexing": a re-index to that model '
            "is running; chunks it has not reached yet may still carry the previous model's vectors, which cannot "
            'rank well, so results may be incomplete until it finishes. "reindex_failed" (a re-index onto that model '
            'stopped part way, leaving the old model\'s vectors among the new ones) and "other_model": only for a '
            "knowledge base that holds no chunk (no results; its first document moves it onto the model); one that "
            'holds chunks is a 409 with extra.code "embedding_model_mismatch".'
        ),
    )
    reindex_progress = serializers.FloatField(
        allow_null=True, help_text="While re-indexing: the share of chunks rebuilt so far (0 to 1); null otherwise."
    )


# A search's 409 (kbplatform.schema adds the error body): the code that tells "wait for the re-index" from other
# conflicts, in the schema clients read.
EMBEDDING_MODEL_MISMATCH_RESPONSE = OpenApiResponse(
    description=(
        'The request conflicts with the current state. `extra.code` `"embedding_model_mismatch"`: the knowledge '
        "base's vectors were made by another embedding model than the one this server embeds queries with (all of "
        "them, or those a re-index onto this model did not reach before it stopped part way), so the search was "
        'refused and nothing was written; it is served again (with `index.status` `"reindexing"`) once a worker has '
        "taken up the knowledge base's re-index. `extra` also holds `knowledge_base`, `knowledge_base_model`, "
        "`query_model`, `reindex_status` and `reindex_progress`, and after a re-index that stopped part way "
        "`reindex_from_model` (the model whose vectors are left)."
    )
)


FULL_TEXT_UNAVAILABLE_RESPONSE = OpenApiResponse(
    description=(
        '`extra.code` `"full_text_unavailable"`: a `full_text` or `hybrid` search (or setting) on a knowledge base '
        "whose chunks carry no text in the search index yet (made before full-text search): only `semantic` is "
        "available until an operator moves it over (`manage.py text_index`); `extra` holds `text_index` and "
        "`text_index_progress`."
    )
)


def index_state_body(state: selectors.IndexState) -> dict:
    return {"status": str(state.status), "reindex_progress": state.reindex_progress}


class _KeyScopedApi(TenantApi):
    @property
    def only_knowledge_base_id(self) -> int | None:
        return self.api_key.knowledge_base_id

    def knowledge_base_or_404(self, knowledge_base_id: int) -> KnowledgeBase:
        knowledge_base = selectors.knowledge_base_get(
            tenant=self.tenant, knowledge_base_id=knowledge_base_id, only_id=self.only_knowledge_base_id
        )
        if knowledge_base is None:
            raise NotFoundError("Knowledge base not found.")
        return knowledge_base

    def document_or_404(self, document_id: int) -> Document:
        document = selectors.document_get(
            tenant=self.tenant, document_id=document_id, only_knowledge_base_id=self.only_knowledge_base_id
        )
        if document is None:
            raise NotFoundError("Document not found.")
        return document


class KnowledgeBaseListCreateApi(_KeyScopedApi):
    """GET lists the knowledge bases the key reaches; POST creates one (the admin scope, a key of the whole tenant)."""

    required_scope = {"GET": KNOWLEDGE_BASE_READ, "POST": Scope.ADMIN}

    class InputSerializer(StrictInputSerializer):
        name = serializers.CharField(max_length=200)
        description = serializers.CharField(required=False, allow_blank=True, default="")
        chunk_max_tokens = serializers.IntegerField(required=False, min_value=16, max_value=256)
        chunk_overlap_tokens = serializers.IntegerField(required=False, min_value=0, max_value=128)
        retrieval_mode = serializers.ChoiceField(choices=RetrievalMode.choices, required=False)
        hybrid_dense_weight = serializers.FloatField(required=False, allow_null=True, min_value=0.0, max_value=1.0)
        text_analyzer = serializers.ChoiceField(
            choices=TextAnalyzer.choices, required=False, help_text="Fixed once the knowledge base is created."
        )
        embedding_model = serializers.CharField(
            required=False,
            allow_blank=True,
            max_length=200,
            help_text=(
                "One of the embedding models the deployment offers (`GET /api/health/` lists them; by default "
                '"all-MiniLM-L6-v2", English, and "use-multilingual-v3", Chinese and 15 other languages). Omitted: '
                "the deployment's default. Changed later by a re-index (`POST .../reindex/`)."
            ),
        )

    @extend_schema(responses=KnowledgeBaseOutputSerializer(many=True), summary="List knowledge bases")
    def get(self, request: Request) -> Response:
        knowledge_bases = selectors.knowledge_base_list(tenant=self.tenant, only_id=self.only_knowledge_base_id)
        return Response(KnowledgeBaseOutputSerializer(knowledge_bases, many=True).data)

    @extend_schema(
        request=InputSerializer, responses={201: KnowledgeBaseOutputSerializer}, summary="Create a knowledge base"
    )
    def post(self, request: Request) -> Response:
        if self.only_knowledge_base_id is not None:
            raise ApplicationError(
                "This API key is limited to one knowledge base and cannot create others.", status_code=403
            )
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        knowledge_base = services.knowledge_base_create(tenant=self.tenant, **serializer.validated_data)
        return Response(KnowledgeBaseOutputSerializer(knowledge_base).data, status=status.HTTP_201_CREATED)


class KnowledgeBaseDetailApi(_KeyScopedApi):
    """GET one knowledge base the key reaches; PATCH its retrieval settings (the admin scope). Deleting one reaches
    every app: `lifecycle.apis` adds DELETE."""

    required_scope = {"GET": KNOWLEDGE_BASE_READ, "PATCH": Scope.ADMIN}

    class RetrievalInputSerializer(StrictInputSerializer):
        retrieval_mode = serializers.ChoiceField(choices=RetrievalMode.choices, required=False)
        hybrid_dense_weight = serializers.FloatField(
            required=False,
            allow_null=True,
            min_value=0.0,
            max_value=1.0,
            help_text="Hybrid only: null fuses by rank (RRF); 0 to 1 weighs the vector side's scores.",
        )

    @extend_schema(responses=KnowledgeBaseOutputSerializer, summary="A knowledge base")
    def get(self, request: Request, knowledge_base_id: int) -> Response:
        return Response(KnowledgeBaseOutputSerializer(self.knowledge_base_or_404(knowledge_base_id)).data)

    @extend_schema(
        request=RetrievalInputSerializer,
        responses={200: KnowledgeBaseOutputSerializer, 409: FULL_TEXT_UNAVAILABLE_RESPONSE},
        summary="Change how a knowledge base is searched",
    )
    def patch(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        serializer = self.RetrievalInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        knowledge_base = services.knowledge_base_retrieval_set(
            tenant=self.tenant, knowledge_base=knowledge_base, **serializer.validated_data
        )
        return Response(KnowledgeBaseOutputSerializer(knowledge_base).data)


class KnowledgeBaseReindexApi(_KeyScopedApi):
    """Rebuild a knowledge base's vectors; with `embedding_model`, onto that model (the knowledge base alone)."""

    required_scope = Scope.ADMIN

    class InputSerializer(StrictInputSerializer):
        embedding_model = serializers.CharField(
            required=False,
            allow_blank=True,
            max_length=200,
            help_text="Move the knowledge base to this offered embedding model; omitted: rebuild with its own.",
        )

    @extend_schema(
        request=InputSerializer, responses={202: KnowledgeBaseOutputSerializer}, summary="Rebuild the vectors of a KB"
    )
    def post(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        knowledge_base = services.knowledge_base_reindex_start(
            tenant=self.tenant,
            knowledge_base=knowledge_base,
            embedding_model=serializer.validated_data.get("embedding_model") or None,
        )
        return Response(KnowledgeBaseOutputSerializer(knowledge_base).data, status=status.HTTP_202_ACCEPTED)


class DocumentStatusesField(serializers.MultipleChoiceField):
    """Document statuses from a query string: the parameter given once per status (`?status=queued&status=failed`,
    OpenAPI's default for an array in a query and what generated clients send). An empty value reads as absent, as
    every optional filter of the API does."""

    def get_value(self, dictionary: Mapping[str, object]) -> object:
        value = super().get_value(dictionary)
        if isinstance(value, list):
            return [item for item in value if item != ""]
        return value


_STATUS_NAMES = ", ".join(DocumentStatus.values)


class DocumentListCreateApi(_KeyScopedApi):
    """GET lists a knowledge base's documents; POST adds one. Any key with the ingest scope that reaches the knowledge
    base may do both."""

    required_scope = Scope.INGEST

    class FilterSerializer(StrictInputSerializer):
        status = DocumentStatusesField(
            choices=DocumentStatus.choices,
            required=False,
            help_text="Only documents in these statuses: give the parameter once per status "
            "(`?status=queued&status=failed`).",
            error_messages={
                "invalid_choice": f'"{{input}}" is not a document status: give one of {_STATUS_NAMES}, and the '
                "parameter once per status for several (?status=queued&status=failed)."
            },
        )
        # Not trimmed: the ingest command keeps an id as its source names it (a BEIR `_id`, a file's relative path).
        external_id = serializers.CharField(
            max_length=255,
            required=False,
            trim_whitespace=False,
            help_text="Only the document with this external id (exact match).",
        )
        created_from = serializers.DateTimeField(required=False, help_text="Documents created at or after this time.")
        created_to = serializers.DateTimeField(required=False, help_text="Documents created before this time.")
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=100)
        offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET, default=0)

        def validate(self, attrs: dict) -> dict:
            """A range that no document can fall in is the client's mistake (the two ends swapped), not an empty
            knowledge base."""
            created_from, created_to = attrs.get("created_from"), attrs.get("created_to")
            if created_from is not None and created_to is not None and created_to <= created_from:
                raise serializers.ValidationError(
                    {"created_to": ["Must be later than created_from (created_to is exclusive)."]}
                )
            return attrs

    class ChunkInputSerializer(serializers.Serializer):
        text = serializers.CharField(trim_whitespace=False)
        external_id = serializers.CharField(max_length=255, required=False, allow_null=True, allow_blank=True)

        def validate_text(self, value: str) -> str:
            if not value.strip():
                raise serializers.ValidationError("A chunk needs some text.")
            return value

    # Named as it was when the view only uploaded (DocumentCreateApi), so clients generated from the schema keep the
    # upload's request type.
    @extend_schema_serializer(component_name="DocumentCreateInput")
    class InputSerializer(StrictInputSerializer):
        title = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
        external_id = serializers.CharField(max_length=255, required=False, allow_null=True, default=None)
        file = serializers.FileField(required=False, allow_empty_file=True)
        text = serializers.CharField(required=False, trim_whitespace=False, allow_blank=True)
        chunks = serializers.ListField(required=False, max_length=MAX_CHUNKS_PER_DOCUMENT, min_length=1)
        metadata = MetadataField(
            required=False,
            help_text="A JSON object describing the document (in a multipart form: a string holding one); search "
            "and conversations filter by it (metadata_filter).",
        )
        split_oversize_chunks = serializers.BooleanField(
            required=False,
            default=False,
            help_text='With "chunks": split a chunk longer than the knowledge base\'s chunk size at sentence '
            'boundaries (its external_id gets "#1", "#2", ...) instead of refusing the document.',
        )

        sources = ("file", "text", "chunks")

        def validate(self, attrs: dict) -> dict:
            given = [name for name in self.sources if attrs.get(name) is not None]
            if len(given) != 1:
                wanted = (
                    '"file" (multipart), "text" or "chunks" (JSON)' if "file" in self.sources else '"text" or "chunks"'
                )
                raise serializers.ValidationError(
                    f"Send exactly one of {wanted}." + (f" Got: {', '.join(given)}." if given else "")
                )
            if attrs.get("text") is not None and not attrs["text"].strip():
                raise serializers.ValidationError({"text": "The text is empty."})
            if attrs.get("chunks") is not None:
                chunk_serializer = DocumentListCreateApi.ChunkInputSerializer(data=attrs["chunks"], many=True)
                chunk_serializer.is_valid(raise_exception=True)
                attrs["chunks"] = chunk_serializer.validated_data
            if attrs.get("external_id") == "":
                attrs["external_id"] = None
            return attrs

    @extend_schema(
        parameters=[FilterSerializer],
        responses=inline_serializer(
            "DocumentPage",
            {
                "count": serializers.IntegerField(help_text="The documents that match the filters, on every page."),
                "status_counts": inline_serializer(
                    "DocumentStatusCounts",
                    {status: serializers.IntegerField(min_value=0) for status in DocumentStatus.values},
                    help_text="The whole knowledge base's documents in each status, whatever the filters and page: "
                    "every status named, 0 when none is in it.",
                ),
                "results": DocumentOutputSerializer(many=True, help_text="Newest first."),
            },
        ),
        summary="A knowledge base's documents, newest first, one page (limit/offset), with its count per status",
    )
    def get(self, request: Request, knowledge_base_id: int) -> Response:
        """Follow a bulk upload in one call: `status_counts` counts every document of the knowledge base by status,
        and the page lists the documents that match the filters, each as `GET /api/v1/documents/{id}/` returns it.
        Unknown or repeated parameters (other than `status`) and a reversed time range are a 400."""
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = dict(filters.validated_data)
        limit, offset = params.pop("limit"), params.pop("offset")
        documents = selectors.document_list(
            tenant=self.tenant, knowledge_base=knowledge_base, statuses=params.pop("status", None), **params
        )
        page = list(documents[offset : offset + limit])
        return Response(
            {
                "count": documents.count(),
                "status_counts": selectors.document_status_counts(tenant=self.tenant, knowledge_base=knowledge_base),
                "results": DocumentOutputSerializer(page, many=True).data,
            }
        )

    @extend_schema(
        request={"application/json": InputSerializer, "multipart/form-data": InputSerializer},
        responses={202: DocumentOutputSerializer},
        summary="Add a document (file, text or pre-chunked) to a knowledge base",
    )
    def post(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        document = services.document_create(
            tenant=self.tenant, knowledge_base=knowledge_base, **serializer.validated_data
        )
        return Response(DocumentOutputSerializer(document).data, status=status.HTTP_202_ACCEPTED)


def _error_body(error: ApplicationError) -> dict:
    return {"message": error.message, "extra": error.extra}


class DocumentBulkCreateApi(_KeyScopedApi):
    """Many documents in one request, answered per document; one rate-limit charge and one indexing task for all.
    Any key with the ingest scope that reaches the knowledge base may use it."""

    required_scope = Scope.INGEST

    @extend_schema_serializer(component_name="DocumentBulkItemInput")
    class ItemSerializer(DocumentListCreateApi.InputSerializer):
        file = None
        sources = ("text", "chunks")

    class InputSerializer(StrictInputSerializer):
        documents = serializers.ListField(
            child=serializers.DictField(),
            help_text="Each as POST .../documents/ takes it in JSON (text or chunks; title, external_id, metadata, "
            "split_oversize_chunks). At most KB_BULK_DOCUMENTS_MAX (500 by default). Or send a multipart form whose "
            '"file" is JSON Lines: one such object a line.',
        )

    class ResultSerializer(serializers.Serializer):
        index = serializers.IntegerField(help_text="The document's place in the request (its line, from 0, in JSONL).")
        status = serializers.IntegerField(
            help_text="202 queued for indexing; otherwise what POST .../documents/ "
            "would have answered for it alone (400, 409)."
        )
        document = DocumentOutputSerializer(allow_null=True)
        error = inline_serializer(
            "DocumentBulkItemError",
            {"message": serializers.CharField(), "extra": serializers.DictField()},
            allow_null=True,
        )

    @staticmethod
    def _too_large(message: str, **extra: int) -> ApplicationError:
        return ApplicationError(message, status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, extra=extra)

    def _items_read(self, request: Request) -> list[Any]:
        """The request's documents, unvalidated: from `documents` (JSON) or a JSONL `file` (a line that is not JSON
        is that line's error, not the request's). Past a bound: 413 naming it."""
        max_bytes, max_documents = settings.BULK_BODY_MAX_BYTES, settings.BULK_DOCUMENTS_MAX
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if length > max_bytes:
            raise self._too_large(
                f"The request is {length} bytes; a bulk request is at most {max_bytes} bytes (KB_BULK_BODY_MAX_BYTES). "
                "Send the documents in several requests.",
                max_bytes=max_bytes,
            )
        upload = request.FILES.get("file") if hasattr(request, "FILES") else None
        if upload is not None:
            unknown = sorted(set(request.data) - {"file"})
            if unknown:
                raise ApplicationError(
                    f'Unknown field: {", ".join(unknown)}. A JSONL bulk upload sends only "file".',
                    extra={"fields": {name: ["Unknown field."] for name in unknown}},
                )
            items: list[Any] = []
            for number, line in enumerate(upload.read().decode("utf-8", "replace").splitlines()):
                if not line.strip():
                    continue
                try:
                    items.append(json.loads(line))
                except ValueError as exc:
                    items.append(ApplicationError(f"Line {number + 1} is not JSON: {exc}."))
        else:
            body = self.InputSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            items = list(body.validated_data["documents"])
        if not items:
            raise ApplicationError("Send at least one document.")
        if len(items) > max_documents:
            raise self._too_large(
                f"The request holds {len(items)} documents; a bulk request holds at most {max_documents} "
                "(KB_BULK_DOCUMENTS_MAX). Send them in several requests.",
                max_documents=max_documents,
            )
        return items

    @extend_schema(
        request={
            "application/json": InputSerializer,
            "multipart/form-data": inline_serializer(
                "DocumentBulkUpload", {"file": serializers.FileField(help_text="JSON Lines: one document a line.")}
            ),
        },
        responses={
            202: inline_serializer(
                "DocumentBulkResult",
                {
                    "created": serializers.IntegerField(help_text="Documents queued for indexing."),
                    "failed": serializers.IntegerField(help_text="Documents refused (see their results)."),
                    "results": ResultSerializer(many=True, help_text="One per document, in the request's order."),
                },
            ),
            413: OpenApiResponse(
                description="More documents or bytes than one bulk request takes; the message names the bound."
            ),
        },
        summary="Add many documents (JSON array or JSONL file) to a knowledge base",
    )
    def post(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        items = self._items_read(request)
        inputs: list[services.DocumentInput] = []
        places: list[int] = []
        results: list[dict | None] = [None] * len(items)
        for index, item in enumerate(items):
            if isinstance(item, ApplicationError):
                results[index] = {"index": index, "status": 400, "document": None, "error": _error_body(item)}
                continue
            serializer = self.ItemSerializer(data=item)
            if not serializer.is_valid():
                error = ApplicationError("Validation error", extra={"fields": serializer.errors})
                results[index] = {"index": index, "status": 400, "document": None, "error": _error_body(error)}
                continue
            inputs.append(services.DocumentInput(**serializer.validated_data))
            places.append(index)
        outcomes = services.documents_create_each(tenant=self.tenant, knowledge_base=knowledge_base, documents=inputs)
        for index, outcome in zip(places, outcomes, strict=True):
            if isinstance(outcome, ApplicationError):
                results[index] = {
                    "index": index,
                    "status": outcome.status_code,
                    "document": None,
                    "error": _error_body(outcome),
                }
            else:
                results[index] = {
                    "index": index,
                    "status": 202,
                    "document": DocumentOutputSerializer(outcome).data,
                    "error": None,
                }
        created = sum(1 for result in results if result["status"] == 202)
        return Response(
            {"created": created, "failed": len(results) - created, "results": results},
            status=status.HTTP_202_ACCEPTED,
        )


class DocumentDetailApi(_KeyScopedApi):
    required_scope = Scope.INGEST

    class InputSerializer(StrictInputSerializer):
        title = serializers.CharField(max_length=500, required=False)
        metadata = MetadataField(
            required=False, help_text="Replaces the document's metadata; its vectors take it on when it is re-indexed."
        )

        def validate(self, attrs: dict) -> dict:
            if not attrs:
                raise serializers.ValidationError('Send "title" or "metadata" (or both).')
            return attrs

    @extend_schema(responses=DocumentOutputSerializer, summary="A document's status, progress, chunk count, error")
    def get(self, request: Request, document_id: int) -> Response:
        return Response(DocumentOutputSerializer(self.document_or_404(document_id)).data)

    @extend_schema(
        request=InputSerializer,
        responses={200: DocumentOutputSerializer},
        summary="Change a document's title or metadata (new metadata re-indexes it)",
    )
    def patch(self, request: Request, document_id: int) -> Response:
        """New metadata is stored at once and reaches the document's vectors by indexing it again (unchanged chunks
        are not re-embedded): until then searches filter by the old metadata. A 409 while it is being indexed."""
        document = self.document_or_404(document_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        document = services.document_update(tenant=self.tenant, document=document, **serializer.validated_data)
        return Response(DocumentOutputSerializer(document).data)

    @extend_schema(responses={204: None}, summary="Delete a document, its chunks and its vectors")
    def delete(self, request: Request, document_id: int) -> Response:
        document = self.document_or_404(document_id)
        services.document_delete(tenant=self.tenant, document=document)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DocumentReindexApi(_KeyScopedApi):
    required_scope = Scope.INGEST

    @extend_schema(request=None, responses={202: DocumentOutputSerializer}, summary="Index a document again")
    def post(self, request: Request, document_id: int) -> Response:
        document = services.document_reindex(tenant=self.tenant, document=self.document_or_404(document_id))
        return Response(DocumentOutputSerializer(document).data, status=status.HTTP_202_ACCEPTED)


class ChunkOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Chunk
        fields = (
            "id",
            "document",
            "knowledge_base",
            "position",
            "external_id",
            "text",
            "token_count",
            "content_hash",
            "enabled",
            "created_at",
        )


class DocumentChunkListApi(_KeyScopedApi):
    required_scope = Scope.INGEST

    class FilterSerializer(StrictInputSerializer):
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=100)
        offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET, default=0)

    @extend_schema(
        parameters=[FilterSerializer],
        responses=inline_serializer(
            "ChunkPage",
            {
                "count": serializers.IntegerField(help_text="The document's chunks, disabled ones included."),
                "results": ChunkOutputSerializer(many=True, help_text="In reading order."),
            },
        ),
        summary="A document's chunks in reading order, one page (limit/offset)",
    )
    def get(self, request: Request, document_id: int) -> Response:
        document = self.document_or_404(document_id)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        limit, offset = filters.validated_data["limit"], filters.validated_data["offset"]
        chunks = selectors.chunk_list(tenant=self.tenant, document=document)
        return Response(
            {"count": chunks.count(), "results": ChunkOutputSerializer(chunks[offset : offset + limit], many=True).data}
        )


class ChunkDetailApi(_KeyScopedApi):
    required_scope = Scope.INGEST

    class InputSerializer(StrictInputSerializer):
        text = serializers.CharField(
            required=False, trim_whitespace=False, help_text="The chunk's new text: re-embedded at once."
        )
        enabled = serializers.BooleanField(
            required=False, help_text="false: left out of search and never a source; true: searchable again."
        )

        def validate(self, attrs: dict) -> dict:
            if not attrs:
                raise serializers.ValidationError('Send "text" or "enabled" (or both).')
            return attrs

    def chunk_or_404(self, chunk_id: int) -> Chunk:
        chunk = selectors.chunk_get(
            tenant=self.tenant, chunk_id=chunk_id, only_knowledge_base_id=self.only_knowledge_base_id
        )
        if chunk is None:
            raise NotFoundError("Chunk not found.")
        return chunk

    @extend_schema(responses=ChunkOutputSerializer, summary="A chunk")
    def get(self, request: Request, chunk_id: int) -> Response:
        return Response(ChunkOutputSerializer(self.chunk_or_404(chunk_id)).data)

    @extend_schema(
        request=InputSerializer,
        responses={200: ChunkOutputSerializer},
        summary="Edit a chunk's text, or disable / enable it",
    )
    def patch(self, request: Request, chunk_id: int) -> Response:
        """An edited text is re-embedded and searchable at once; a stored answer citing the chunk as it was is never
        served again. A disabled chunk is left out of search and of stored answers' sources until it is enabled. A
        409 while its document is queued or being indexed."""
        chunk = self.chunk_or_404(chunk_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        chunk = services.chunk_update(tenant=self.tenant, chunk=chunk, **serializer.validated_data)
        return Response(ChunkOutputSerializer(chunk).data)


class KnowledgeBaseSearchApi(_KeyScopedApi):
    """A stateless retrieval test: no conversation, no exclusions. Each query is logged."""

    required_scope = Scope.CHAT

    class InputSerializer(StrictInputSerializer):
        query = serializers.CharField(max_length=4000)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=100, default=10)
        group_by_document = serializers.BooleanField(required=False, default=True)
        retrieval_mode = serializers.ChoiceField(
            choices=RetrievalMode.choices,
            required=False,
            help_text="This search only; the knowledge base's retrieval_mode when left out.",
        )
        metadata_filter = MetadataFilterField(required=False, default=None)

    class OutputSerializer(serializers.Serializer):
        results = ChunkHitOutputSerializer(many=True, help_text="Best first.")
        index = IndexStateOutputSerializer()
        retrieval_mode = serializers.ChoiceField(
            choices=RetrievalMode.choices,
            help_text="The mode the search ran in; scores are cosines, BM25 scores or fused scores accordingly.",
        )
        took_ms = serializers.FloatField()

    @extend_schema(
        request=InputSerializer,
        responses={
            200: OutputSerializer,
            409: OpenApiResponse(
                description=" ".join(
                    (EMBEDDING_MODEL_MISMATCH_RESPONSE.description, FULL_TEXT_UNAVAILABLE_RESPONSE.description)
                )
            ),
        },
        summary="Search a knowledge base",
    )
    def post(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        started = time.perf_counter()
        model = embeddings.knowledge_base_model(knowledge_base.embedding_model)
        query_model_identity = embeddings.model_identity(model)
        mode = selectors.retrieval_mode_resolve(knowledge_base=knowledge_base, requested=data.get("retrieval_mode"))
        hits = selectors.chunk_search(
            tenant=self.tenant,
            knowledge_base=knowledge_base,
            query_vector=embeddings.embed_query(data["query"], model),
            query_text=data["query"],
            query_model_identity=query_model_identity,
            limit=data["limit"],
            group_by_document=data["group_by_document"],
            retrieval_mode=mode,
            metadata_filter=data["metadata_filter"],
        )
        elapsed_ms = (time.perf_counter() - started) * 1000
        logger.info(
            "retrieval search tenant=%s kb=%s key=%s limit=%s hits=%s top_score=%.4f ms=%.1f query=%r",
            self.tenant.slug,
            knowledge_base.pk,
            self.api_key.prefix,
            data["limit"],
            len(hits),
            hits[0].score if hits else 0.0,
            elapsed_ms,
            data["query"][:200],
        )
        state = selectors.index_state(knowledge_base=knowledge_base, query_model_identity=query_model_identity)
        return Response(
            {
                "results": ChunkHitOutputSerializer(hits, many=True).data,
                "index": index_state_body(state),
                "retrieval_mode": mode,
                "took_ms": round(elapsed_ms, 1),
            }
        )
