"""Writes of the conversations app, one concern a module; this package names the app's public write API.

- `policy`: a tenant's set-up here, its dedup policy and intents, the settings a turn reads;
- `turns`: the turn pipeline (`turn_ask`; `turn_prepare` then `turn_stream`: the same turn as events), `candidates` (the
  stored questions a question is compared with), `sources` (what a turn shows of a passage) and `turn_write` (the
  turn's one transaction);
- `chat_completions`: a turn asked through the OpenAI-compatible endpoint, in a named or a new conversation;
- `transcripts`: the chat client's transcript, by which such a turn goes on in its conversation unnamed;
- `conversations`: starting a conversation, reading one for a turn, renaming and deleting one;
- `client_answers`: a client's own answer to its retrieve-mode turn;
- `feedback`: the end user's rating of an answer, and the suspected false hit it marks;
- `question_index`: the tenant-scope question index in Milvus;
- `retention`: deleting conversation records by hand and the purge of expired conversations;
- `rollups`: the dashboard's daily figures.
"""

from conversations.review.feedback import COMMENT_MAX_CHARS, FeedbackOutcome, feedback_set
from conversations.review.rollups import dedup_figures_rollup
from conversations.turn.chat_completions import ChatTurn, chat_turn_take
from conversations.turn.client_answers import ANSWER_MAX_CHARS, turn_answer_set
from conversations.turn.conversations import (
    TITLE_MAX_CHARS,
    conversation_create,
    conversation_delete,
    conversation_for,
    conversation_rename,
    knowledge_base_for,
)
from conversations.turn.policy import (
    POLICY_FIELDS,
    TurnSettings,
    dedup_policy_get,
    dedup_policy_update,
    intent_set,
    intents_load,
    policy_view,
    tenant_conversations_setup,
    turn_settings_load,
)
from conversations.turn.question_index import question_index_backfill
from conversations.turn.retention import conversation_records_delete, conversations_purge_expired
from conversations.turn.sources import SourceView
from conversations.turn.transcripts import transcript_digest, transcript_record
from conversations.turn.turn_stream import (
    EVENT_TYPES,
    TurnEvent,
    TurnStream,
    turn_dedup_body,
    turn_sources_body,
    turn_stream,
)
from conversations.turn.turns import (
    QUESTION_MAX_CHARS,
    TOP_K,
    TurnOutcome,
    turn_ask,
    turn_prepare,
)

__all__ = [
    "ANSWER_MAX_CHARS",
    "COMMENT_MAX_CHARS",
    "EVENT_TYPES",
    "POLICY_FIELDS",
    "QUESTION_MAX_CHARS",
    "TITLE_MAX_CHARS",
    "TOP_K",
    "ChatTurn",
    "FeedbackOutcome",
    "SourceView",
    "TurnEvent",
    "TurnOutcome",
    "TurnSettings",
    "TurnStream",
    "chat_turn_take",
    "conversation_create",
    "conversation_delete",
    "conversation_for",
    "conversation_records_delete",
    "conversation_rename",
    "conversations_purge_expired",
    "dedup_figures_rollup",
    "dedup_policy_get",
    "dedup_policy_update",
    "feedback_set",
    "intent_set",
    "intents_load",
    "knowledge_base_for",
    "policy_view",
    "question_index_backfill",
    "tenant_conversations_setup",
    "transcript_digest",
    "transcript_record",
    "turn_answer_set",
    "turn_ask",
    "turn_dedup_body",
    "turn_settings_load",
    "turn_sources_body",
    "turn_prepare",
    "turn_stream",
]
