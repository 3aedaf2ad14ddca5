"""A knowledge base's documents: list (with status counts), add one, read, change, delete, index again."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.utils import (
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kbplatform.serializers import MAX_OFFSET, StrictInputSerializer
from retrieval import selectors, services
from retrieval.api_fields import MetadataField
from retrieval.apis.common import DocumentOutputSerializer, KeyScopedApi
from retrieval.models import DocumentStatus
from tenants.scopes import Scope

MAX_CHUNKS_PER_DOCUMENT = 20000


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


class DocumentListCreateApi(KeyScopedApi):
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


class DocumentDetailApi(KeyScopedApi):
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


class DocumentReindexApi(KeyScopedApi):
    required_scope = Scope.INGEST

    @extend_schema(request=None, responses={202: DocumentOutputSerializer}, summary="Index a document again")
    def post(self, request: Request, document_id: int) -> Response:
        document = services.document_reindex(tenant=self.tenant, document=self.document_or_404(document_id))
        return Response(DocumentOutputSerializer(document).data, status=status.HTTP_202_ACCEPTED)
