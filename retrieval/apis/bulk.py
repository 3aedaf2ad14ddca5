"""Bulk upload: many documents in one request (JSON or JSONL), each accepted or refused on its own."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kbplatform.errors import ApplicationError
from kbplatform.serializers import StrictInputSerializer
from retrieval import services
from retrieval.apis.common import DocumentOutputSerializer, KeyScopedApi
from retrieval.apis.documents import DocumentListCreateApi
from tenants.scopes import Scope


def _error_body(error: ApplicationError) -> dict:
    return {"message": error.message, "extra": error.extra}


class DocumentBulkCreateApi(KeyScopedApi):
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
                except RecursionError:
                    items.append(ApplicationError(f"Line {number + 1} nests too deeply to read as JSON."))
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
