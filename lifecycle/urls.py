from django.urls import path

from lifecycle.apis import KnowledgeBaseDetailDeleteApi

urlpatterns = [
    path(
        "knowledge-bases/<int:knowledge_base_id>/",
        KnowledgeBaseDetailDeleteApi.as_view(),
        name="knowledge-base-detail",
    ),
]
