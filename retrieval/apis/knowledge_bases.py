"""Knowledge bases: list, create, read, change how one ranks, re-index onto a model."""

from __future__ import annotations

from drf_spectacular.utils import (
    extend_schema,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from kbplatform.errors import ApplicationError
from kbplatform.serializers import StrictInputSerializer
from kbplatform.stems import LATIN_LANGUAGES
from retrieval import selectors, services
from retrieval.apis.common import (
    FULL_TEXT_UNAVAILABLE_RESPONSE,
    KeyScopedApi,
    KnowledgeBaseOutputSerializer,
)
from retrieval.models import RetrievalMode, TextAnalyzer
from tenants.scopes import KNOWLEDGE_BASE_READ, Scope


class KnowledgeBaseListCreateApi(KeyScopedApi):
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
            choices=TextAnalyzer.choices,
            required=False,
            help_text=(
                "What BM25 reads as words; changed later by a re-index (`POST .../reindex/`). `english` (the "
                "default): words cut at spaces and punctuation, English ones stemmed, Cyrillic, Arabic, Devanagari "
                "and Greek ones as their Russian, Arabic, Hindi and Greek stems, a word written with vowel signs kept"
                " whole, and Han, kana, Hangul and Thai as overlapping pairs of letters (Japanese, Korean, Thai, "
                "Russian, Arabic, Hindi, Greek, any other language). "
                + ", ".join(f"`{language}`" for language in LATIN_LANGUAGES)
                + ": as `english`, but words in Latin letters are stemmed in that language, its function words left "
                "out and accents ignored (Serbian's Cyrillic words written in Latin letters first). `chinese`: "
                "jieba's words, in Simplified characters."
            ),
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


class KnowledgeBaseDetailApi(KeyScopedApi):
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


class KnowledgeBaseReindexApi(KeyScopedApi):
    """Rebuild a knowledge base's vectors; with `embedding_model`, onto that model, with `text_analyzer`, its BM25 text
    onto that analyser (the knowledge base alone)."""

    required_scope = Scope.ADMIN

    class InputSerializer(StrictInputSerializer):
        embedding_model = serializers.CharField(
            required=False,
            allow_blank=True,
            max_length=200,
            help_text="Move the knowledge base to this offered embedding model; omitted: rebuild with its own.",
        )
        text_analyzer = serializers.ChoiceField(
            choices=TextAnalyzer.choices,
            required=False,
            help_text="Move its BM25 text to this analyser (e.g. `spanish` for a Spanish knowledge base made with "
            "`english`); omitted: keep its own.",
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
            text_analyzer=serializer.validated_data.get("text_analyzer"),
        )
        return Response(KnowledgeBaseOutputSerializer(knowledge_base).data, status=status.HTTP_202_ACCEPTED)
