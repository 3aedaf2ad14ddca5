from django.urls import path

from conversations.api.apis import (
    ConversationDetailApi,
    ConversationListCreateApi,
    ConversationMessageApi,
    ConversationTurnListApi,
    TurnAnswerApi,
)
from conversations.api.curated_apis import CuratedAnswerDetailApi, CuratedAnswerImportApi, CuratedAnswerListCreateApi
from conversations.api.openai_apis import ChatCompletionCreateApi, ModelListApi
from conversations.api.review_apis import (
    AuditEventListApi,
    AuditEventReviewApi,
    DedupPolicyApi,
    FeedbackListApi,
    TurnFeedbackApi,
)

urlpatterns = [
    path("conversations/", ConversationListCreateApi.as_view(), name="conversation-create"),
    path("conversations/<int:conversation_id>/", ConversationDetailApi.as_view(), name="conversation-detail"),
    path(
        "conversations/<int:conversation_id>/messages/", ConversationMessageApi.as_view(), name="conversation-message"
    ),
    path("conversations/<int:conversation_id>/turns/", ConversationTurnListApi.as_view(), name="conversation-turns"),
    path("turns/<int:turn_id>/answer/", TurnAnswerApi.as_view(), name="turn-answer"),
    path("turns/<int:turn_id>/feedback/", TurnFeedbackApi.as_view(), name="turn-feedback"),
    path("feedback/", FeedbackListApi.as_view(), name="feedback-list"),
    path("dedup-policy/", DedupPolicyApi.as_view(), name="dedup-policy"),
    path(
        "knowledge-bases/<int:knowledge_base_id>/curated-answers/",
        CuratedAnswerListCreateApi.as_view(),
        name="curated-answers",
    ),
    path(
        "knowledge-bases/<int:knowledge_base_id>/curated-answers/import/",
        CuratedAnswerImportApi.as_view(),
        name="curated-answers-import",
    ),
    path("curated-answers/<int:curated_answer_id>/", CuratedAnswerDetailApi.as_view(), name="curated-answer-detail"),
    path("audit-events/", AuditEventListApi.as_view(), name="audit-events"),
    path("audit-events/<int:event_id>/review/", AuditEventReviewApi.as_view(), name="audit-event-review"),
    # OpenAI's path exactly, with no trailing slash: OpenAI clients append `/chat/completions` to their base URL.
    path("chat/completions", ChatCompletionCreateApi.as_view(), name="chat-completions"),
    path("models", ModelListApi.as_view(), name="models"),
]
