"""The retrieval test: a stateless search of one knowledge base, with the state of its index."""

from __future__ import annotations

import logging
import time

from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from kbplatform.serializers import StrictInputSerializer
from retrieval import embeddings, selectors
from retrieval.api_fields import (
    EMBEDDING_MODEL_MISMATCH_RESPONSE,
    IndexStateOutputSerializer,
    MetadataFilterField,
    index_state_body,
)
from retrieval.apis.common import FULL_TEXT_UNAVAILABLE_RESPONSE, KeyScopedApi
from retrieval.models import RetrievalMode
from tenants.scopes import Scope

logger = logging.getLogger(__name__)


class ChunkHitOutputSerializer(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    document_external_id = serializers.CharField(allow_null=True)
    document_title = serializers.CharField()
    external_id = serializers.CharField(allow_null=True)
    position = serializers.IntegerField()
    score = serializers.FloatField()
    similarity = serializers.FloatField(
        allow_null=True,
        help_text="The query's cosine to the chunk under the knowledge base's embedding model, in every mode: how "
        "near the chunk is in meaning, where `score` is what ranked it.",
    )
    text = serializers.CharField()


class KnowledgeBaseSearchApi(KeyScopedApi):
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
            help_text=(
                "The mode the search ran in; scores are cosines, BM25 scores or fused scores accordingly. A hybrid "
                "search of a query the knowledge base's model cannot read (most of its word pieces unknown) runs in "
                "full_text."
            ),
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
        mode = selectors.query_retrieval_mode(
            knowledge_base=knowledge_base,
            mode=selectors.retrieval_mode_resolve(knowledge_base=knowledge_base, requested=data.get("retrieval_mode")),
            query_text=data["query"],
        )
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
            hit_similarity=True,
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
