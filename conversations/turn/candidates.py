"""The stored questions a turn's question is compared with, within the policy's scope, and their answers."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np
from django.db.models import Q
from django.utils import timezone

from conversations.dedup import decisions
from conversations.models import (
    Conversation,
    DedupScope,
    Turn,
)
from conversations.turn.state import (
    TURN_FIELDS_KEPT,
    ConversationState,
    StoredAnswer,
    vector_from_bytes,
)
from retrieval import question_index
from retrieval.embeddings import knowledge_base_model, text_readable
from retrieval.metadata import metadata_filter_key
from tenants.models import Tenant

logger = logging.getLogger(__name__)

USER_SCOPE_MAX_PAIRS = 200
TENANT_SCOPE_CANDIDATES = 10


def epoch_seconds(moment: datetime) -> int:
    return int(moment.timestamp())


# What `_stored_from_rows` reads of each candidate turn.
STORED_QUESTION_FIELDS = (
    "pk",
    "question",
    "question_vector",
    "question_vector_model",
    "conversation_id",
    "number",
    "answer",
    "partial_index",
    "rewritten_question",
    "source_chunk_ids",
    "curated_answer_id",
)


def _previous_questions(
    *, tenant: Tenant, turns: list[tuple[int, int]]
) -> dict[tuple[int, int], tuple[np.ndarray, str, str]]:
    """(conversation id, number) -> question vector of the turn before it, the model that made it and the question
    as asked (which `decisions.names_topic` reads), for the turns that have one."""
    wanted = [(conversation_id, number - 1) for conversation_id, number in turns if number > 1]
    if not wanted:
        return {}
    query = Q()
    for conversation_id, number in wanted:
        query |= Q(conversation_id=conversation_id, number=number)
    rows = (
        Turn.objects.for_tenant(tenant)
        .filter(query)
        .values_list("conversation_id", "number", "question_vector", "question_vector_model", "question")
    )
    return {(c, n + 1): (vector_from_bytes(v), model, question) for c, n, v, model, question in rows}


def _stored_from_rows(
    *,
    tenant: Tenant,
    rows: list[tuple],
    intents: list[decisions.IntentExamples],
    model: str,
    just_before: tuple[int, int] | None,
    embedding: str | None = None,
) -> list[decisions.StoredQuestion]:
    """The QA pairs of `rows` (STORED_QUESTION_FIELDS) with the context each was asked in; `model` is the embedding
    model in use (the previous questions of another model are an unknown context); `just_before` is (conversation
    id, number) of the question asked just before the new one, if any."""
    previous = _previous_questions(
        tenant=tenant, turns=[(conversation_id, number) for _, _, _, _, conversation_id, number, *_ in rows]
    )
    comparable = {
        key: decisions.vectors_comparable(stored_model=vector_model, current_model=model)
        for key, (_, vector_model, _) in previous.items()
    }
    topics = dict(
        zip(
            previous,
            decisions.names_topic(
                vectors=[vector for vector, _, _ in previous.values()],
                intents=intents,
                comparable=list(comparable.values()),
                questions=[question for _, _, question in previous.values()],
            ),
            strict=True,
        )
    )
    stored = []
    for row in rows:
        pk, question, vector, vector_model, conversation_id, number, answer, partial_index, rewritten = row[:9]
        chunk_ids, curated_answer_id = row[9:]
        key = (conversation_id, number)
        stored.append(
            decisions.StoredQuestion(
                turn_id=pk,
                # The question its vector embeds (a follow-up's standalone rewrite): the checks read that one.
                question=rewritten or question,
                vector=vector_from_bytes(vector),
                conversation_id=conversation_id,
                previous_vector=decisions.followup_context(
                    previous_vector=previous[key][0] if key in previous else None,
                    previous_names_topic=topics.get(key, True),
                    previous_comparable=comparable.get(key, True),
                ),
                answerable=bool(answer),
                cites=bool(chunk_ids) or curated_answer_id is not None,
                vector_model=vector_model,
                partial_index=partial_index,
                asked_just_before=key == just_before,
                readable=text_readable(rewritten or question, embedding),
            )
        )
    return stored


def duplicate_candidates(
    *,
    tenant: Tenant,
    conversation: Conversation,
    state: ConversationState,
    policy: decisions.PolicyView,
    question_vector: np.ndarray,
    intents: list[decisions.IntentExamples],
    recent_topics: list[bool],
    model: str,
) -> list[decisions.StoredQuestion]:
    """The QA pairs in the policy's scope that could answer the question, each with the context it was asked in
    (`decisions.followup_context`) and the embedding model that made its vector (`duplicate_decide` compares only
    those of `model`, the one in use; tenant scope searches that model's questions only). `recent_topics`:
    `decisions.names_topic` of the state's recent turns.

    Only pairs asked under a metadata filter equal to the conversation's (`metadata_filter_key`) are candidates: an
    answer found among other documents may rest on passages this question's filter leaves out. The pairs of the
    conversation's own hot copy all are: its filter is set when it starts and never changes."""
    embedding = knowledge_base_model(conversation.knowledge_base.embedding_model)
    if policy.scope == DedupScope.SESSION or (policy.scope == DedupScope.USER and not conversation.user_id):
        recent = state.recent_turns[-policy.question_window :]
        offset = len(state.recent_turns) - len(recent)
        stored = []
        for index, turn in enumerate(recent):
            before = offset + index - 1
            # None when the turn before lies outside the cached history: the follow-up guard then refuses.
            previous = (
                decisions.followup_context(
                    previous_vector=state.recent_turns[before].vector,
                    previous_names_topic=recent_topics[before],
                    previous_comparable=decisions.vectors_comparable(
                        stored_model=state.recent_turns[before].vector_model, current_model=model
                    ),
                )
                if before >= 0
                else None
            )
            stored.append(
                decisions.StoredQuestion(
                    turn_id=turn.turn_id,
                    question=turn.question,
                    vector=turn.vector,
                    conversation_id=conversation.pk,
                    previous_vector=previous,
                    answerable=turn.answerable,
                    cites=turn.cites,
                    vector_model=turn.vector_model,
                    partial_index=turn.partial_index,
                    asked_just_before=offset + index == len(state.recent_turns) - 1,
                    readable=text_readable(turn.question, embedding),
                )
            )
        return stored
    since = timezone.now() - timedelta(seconds=policy.ttl_seconds)
    fields = STORED_QUESTION_FIELDS
    filter_key = metadata_filter_key(conversation.metadata_filter)
    just_before = (conversation.pk, state.turn_count) if state.turn_count else None
    if policy.scope == DedupScope.USER:
        # The newest pairs of this model only: another model's would take places among the newest and never match.
        rows = list(
            Turn.objects.for_tenant(tenant)
            .filter(
                knowledge_base_id=conversation.knowledge_base_id,
                user_id=conversation.user_id,
                created_at__gte=since,
                question_vector_model=model,
                metadata_filter_key=filter_key,
            )
            .order_by("-created_at")
            .values_list(*fields)[:USER_SCOPE_MAX_PAIRS]
        )
        return _stored_from_rows(
            tenant=tenant, rows=rows, intents=intents, model=model, just_before=just_before, embedding=embedding
        )
    hits = question_index.question_vectors_search(
        tenant_id=tenant.pk,
        knowledge_base_id=conversation.knowledge_base_id,
        query_vector=question_vector,
        limit=TENANT_SCOPE_CANDIDATES,
        model=model,
        metadata_filter_key=filter_key,
        created_after=epoch_seconds(since),
    )
    if not hits:
        return []
    # The filter key again from the rows: a collection made before it was stored returns the questions of every
    # filter.
    rows = list(
        Turn.objects.for_tenant(tenant)
        .filter(pk__in=[hit.turn_id for hit in hits], created_at__gte=since, metadata_filter_key=filter_key)
        .values_list(*fields)
    )
    return _stored_from_rows(
        tenant=tenant, rows=rows, intents=intents, model=model, just_before=just_before, embedding=embedding
    )


def stored_answer_of(*, tenant: Tenant, state: ConversationState, turn_id: int) -> StoredAnswer | None:
    """The stored answer of QA pair `turn_id`: from the hot copy when it keeps it, else from the row; None when the
    pair has no answer (or is gone)."""
    for recent in reversed(state.recent_turns):
        if recent.turn_id == turn_id and recent.stored is not None:
            return recent.stored
    turn = Turn.objects.for_tenant(tenant).filter(pk=turn_id).only(*TURN_FIELDS_KEPT).first()
    return StoredAnswer.of_turn(turn) if turn is not None and turn.answer else None


def stored_answer_at_origin(*, tenant: Tenant, state: ConversationState, copy: StoredAnswer) -> StoredAnswer:
    """The answer a served turn gave, as the pair it came from holds it now: a client may have corrected that pair's
    answer since (`turn_answer_set`), and every copy then serves the correction. The copy itself, as its own origin,
    when that pair is gone (its conversation expired)."""
    origin = stored_answer_of(tenant=tenant, state=state, turn_id=copy.origin_turn_id)
    return origin if origin is not None else replace(copy, origin_turn_id=None)
