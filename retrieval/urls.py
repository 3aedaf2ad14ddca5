from django.urls import path

from retrieval.apis import (
    ChunkDetailApi,
    DocumentBulkCreateApi,
    DocumentChunkListApi,
    DocumentDetailApi,
    DocumentListCreateApi,
    DocumentReindexApi,
    KnowledgeBaseListCreateApi,
    KnowledgeBaseReindexApi,
    KnowledgeBaseSearchApi,
)

urlpatterns = [
    path("knowledge-bases/", KnowledgeBaseListCreateApi.as_view(), name="knowledge-base-list"),
    path(
        "knowledge-bases/<int:knowledge_base_id>/documents/",
        DocumentListCreateApi.as_view(),
        name="knowledge-base-documents",
    ),
    path(
        "knowledge-bases/<int:knowledge_base_id>/documents/bulk/",
        DocumentBulkCreateApi.as_view(),
        name="knowledge-base-documents-bulk",
    ),
    path(
        "knowledge-bases/<int:knowledge_base_id>/search/",
        KnowledgeBaseSearchApi.as_view(),
        name="knowledge-base-search",
    ),
    path(
        "knowledge-bases/<int:knowledge_base_id>/reindex/",
        KnowledgeBaseReindexApi.as_view(),
        name="knowledge-base-reindex",
    ),
    path("documents/<int:document_id>/", DocumentDetailApi.as_view(), name="document-detail"),
    path("documents/<int:document_id>/reindex/", DocumentReindexApi.as_view(), name="document-reindex"),
    path("documents/<int:document_id>/chunks/", DocumentChunkListApi.as_view(), name="document-chunks"),
    path("chunks/<int:chunk_id>/", ChunkDetailApi.as_view(), name="chunk-detail"),
]
