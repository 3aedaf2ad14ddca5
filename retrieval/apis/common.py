"""What retrieval's endpoints share: the base that resolves what the key reaches (another knowledge base, like another
tenant's, is a 404) and the output serializers of knowledge bases and documents.
"""

from __future__ import annotations

from drf_spectacular.utils import (
    OpenApiResponse,
)
from rest_framework import serializers

from kbplatform.errors import NotFoundError
from retrieval import selectors
from retrieval.models import Document, KnowledgeBase
from tenants.api import TenantApi


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


FULL_TEXT_UNAVAILABLE_RESPONSE = OpenApiResponse(
    description=(
        '`extra.code` `"full_text_unavailable"`: a `full_text` or `hybrid` search (or setting) on a knowledge base '
        "whose chunks carry no text in the search index yet (made before full-text search): only `semantic` is "
        "available until an operator moves it over (`manage.py text_index`); `extra` holds `text_index` and "
        "`text_index_progress`."
    )
)


class KeyScopedApi(TenantApi):
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
