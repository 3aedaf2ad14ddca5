"""A document's chunks: list them, read, edit, disable or enable one."""

from __future__ import annotations

from drf_spectacular.utils import (
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from kbplatform.errors import NotFoundError
from kbplatform.serializers import MAX_OFFSET, StrictInputSerializer
from retrieval import selectors, services
from retrieval.apis.common import KeyScopedApi
from retrieval.models import Chunk
from tenants.scopes import Scope


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


class DocumentChunkListApi(KeyScopedApi):
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


class ChunkDetailApi(KeyScopedApi):
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
