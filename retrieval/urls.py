from django.urls import path

from retrieval.apis import (
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
]
