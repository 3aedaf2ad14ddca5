"""Retrieval's API vocabulary that other apps' endpoints repeat: the metadata filter field, a knowledge base's index
state (body and schema) and the 409 of an embedding model mismatch. Other apps import these from here, never from
`retrieval.apis` (an import-linter contract in pyproject.toml): an app's endpoints and serializers are its own.
"""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema_field,
)
from rest_framework import serializers

from retrieval import selectors
from retrieval.metadata import MetadataError, metadata_filter_validate, metadata_validate


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


def index_state_body(state: selectors.IndexState) -> dict:
    return {"status": str(state.status), "reindex_progress": state.reindex_progress}
