"""Writes of the conversations app, and the turn pipeline (`turn_ask`).

A turn: load state (Redis, else the database) -> embed the question once -> intent -> plan -> duplicate check
within the policy's scope -> either the stored answer, or a search that leaves out what the last turns showed
(relaxed when too little is left) and a fresh answer -> one transaction that locks the conversation row, numbers
the turn, writes the QA pair, the consumed items and the audit event -> refresh Redis.

Everything slow (embedding, Milvus, generation) happens before the transaction, so the row lock is held for a
few small writes only; two concurrent turns on one conversation both land, with distinct numbers.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from conversations import decisions
from conversations.answering import AnswerGenerator, SourcePassage, answer_generator, context_tokens_of
from conversations.builtins import BUILTIN_INTENTS
from conversations.dashboard import MAX_PERIOD_DAYS, day_figures_compute
from conversations.models import (
    ConsumedItem,
    Conversation,
    DedupAction,
    DedupDayFigures,
    DedupEvent,
    DedupPolicy,
    DedupScope,
    Granularity,
    Intent,
    IntentBehaviour,
    Turn,
)
from conversations.state import (
    TURN_FIELDS_KEPT,
    ConversationState,
    RecentTurn,
    StoredAnswer,
    state_after_turn,
    state_forget,
    state_load,
    state_store,
    vector_from_bytes,
    vector_to_bytes,
)
from kbplatform.errors import ApplicationError, ConflictError, NotFoundError, ServiceUnavailableError
from kbplatform.text import control_character_problem, has_visible_character
from retrieval import vectorstore
from retrieval.embeddings import embed_query, embed_texts, embedding_dimension, token_count
from retrieval.embeddings import model_id as embedding_model_id
from retrieval.embeddings import model_identity as embedding_model_identity
from retrieval.embeddings import model_name as embedding_model_name
from retrieval.models import Chunk, KnowledgeBase
from retrieval.selectors import (
    ChunkHit,
    IndexState,
    chunk_content_hashes,
    chunk_search,
    hits_of_distinct_content,
    index_state,
)
from tenants.models import Tenant
from tenants.services import tenant_settings_changed

logger = logging.getLogger(__name__)

TOP_K = 5
QUESTION_MAX_CHARS = 4000
ANSWER_MAX_CHARS = 100_000
# Largest number of a user's recent QA pairs compared in `user` scope (newest first, within the TTL).
USER_SCOPE_MAX_PAIRS = 200
# Nearest stored questions fetched from Milvus in `tenant` scope before the agreement checks.
TENANT_SCOPE_CANDIDATES = 10
SMALLTALK_REPLIES = {
    "greeting": "Hello! What would you like to know?",
    "thanks": "You're welcome. Anything else?",
}


# --- setup and policy -------------------------------------------------------------------------------------------


def tenant_conversations_setup(*, tenant: Tenant) -> DedupPolicy:
    """Give a tenant its default dedup policy and the built-in intents; safe to call again."""
    policy, created = DedupPolicy.objects.get_or_create(tenant=tenant)
    existing = set(Intent.objects.for_tenant(tenant).values_list("name", flat=True))
    missing = [
        Intent(tenant=tenant, name=name, behaviour=spec["behaviour"], examples=list(spec["examples"]), is_builtin=True)
        for name, spec in BUILTIN_INTENTS.items()
        if name not in existing
    ]
    Intent.objects.bulk_create(missing, ignore_conflicts=True)
    if created or missing:
        tenant_settings_changed(tenant=tenant)
    return policy


def dedup_policy_get(*, tenant: Tenant) -> DedupPolicy:
    policy = DedupPolicy.objects.for_tenant(tenant).first()
    return policy if policy is not None else tenant_conversations_setup(tenant=tenant)


POLICY_FIELDS = (
    "scope",
    "threshold",
    "question_window",
    "exclusion_enabled",
    "exclusion_window",
    "granularity",
    "min_results",
    "ttl_seconds",
    "allowlisted_intents",
    "shadow_mode",
)


def policy_view(policy: DedupPolicy) -> decisions.PolicyView:
    return decisions.PolicyView(
        scope=policy.scope,
        threshold=policy.threshold,
        question_window=policy.question_window,
        exclusion_enabled=policy.exclusion_enabled,
        exclusion_window=policy.exclusion_window,
        granularity=policy.granularity,
        min_results=policy.min_results,
        ttl_seconds=policy.ttl_seconds,
        allowlisted_intents=tuple(policy.allowlisted_intents or ()),
        shadow_mode=policy.shadow_mode,
    )


@transaction.atomic
def dedup_policy_update(*, tenant: Tenant, **changes: Any) -> DedupPolicy:
    """Change the tenant's policy; every field is validated (threshold in (0, 1], windows 1..100, TTL > 0, known
    intents only), and an invalid change leaves the policy as it was."""
    unknown = set(changes) - set(POLICY_FIELDS)
    if unknown:
        raise ApplicationError(f"Unknown policy fields: {', '.join(sorted(unknown))}.")
    policy = DedupPolicy.objects.for_tenant(tenant).select_for_update().first() or tenant_conversations_setup(
        tenant=tenant
    )
    scope_before, ttl_before = policy.scope, policy.ttl_seconds
    for name, value in changes.items():
        setattr(policy, name, value)
    errors: dict[str, list[str]] = {}
    if not 0 < float(policy.threshold) <= 1:
        errors["threshold"] = ["Must be greater than 0 and at most 1."]
    if "allowlisted_intents" in changes:
        allowed = list(policy.allowlisted_intents or [])
        known = set(Intent.objects.for_tenant(tenant).values_list("name", flat=True)) | {decisions.INTENT_OTHER}
        missing = sorted(set(allowed) - known)
        if missing:
            errors["allowlisted_intents"] = [f"Unknown intents: {', '.join(missing)}."]
    try:
        policy.full_clean(exclude=["tenant"])
    except ValidationError as exc:
        for name, messages in exc.message_dict.items():
            errors.setdefault(name, []).extend(messages)
    if errors:
        raise ApplicationError("The policy is not valid: check the fields listed in extra.", extra={"fields": errors})
    policy.save()
    tenant_settings_changed(tenant=tenant)
    if policy.ttl_seconds != ttl_before:
        # A conversation expires the policy's TTL after its last turn: a new TTL moves the expiry of the live ones
        # too, so a shorter one is neither served (its stored answers included) nor kept past it.
        Conversation.objects.for_tenant(tenant).update(
            expires_at=F("last_active_at") + timedelta(seconds=policy.ttl_seconds)
        )
    if policy.scope == DedupScope.TENANT and scope_before != DedupScope.TENANT:
        # Questions asked under another scope were never indexed for tenant-wide search: index those within the
        # TTL, so the new scope covers them too (a worker does it; the change itself does not wait for it).
        from conversations.tasks import question_index_backfill_task

        transaction.on_commit(lambda: question_index_backfill_task.delay(tenant.pk), robust=True)
    return policy


QUESTION_BACKFILL_BATCH = 500


def question_index_backfill(
    *, tenant_id: int, turn_ids: list[int] | None = None, batch_size: int = QUESTION_BACKFILL_BATCH
) -> int:
    """Index the tenant's questions asked within its policy's TTL (only those of `turn_ids`, when given) for
    tenant-scope dedup; returns how many. Only questions the embedding model in use embedded are indexed: no other
    can be compared with a new question; nor are pairs answered from a partial index, which are never served. Safe
    to run twice (an upsert by turn id) and a no-op when the tenant no longer uses tenant scope. Raises
    VectorStoreUnavailable for the task to retry."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return 0
    policy = dedup_policy_get(tenant=tenant)
    if policy.scope != DedupScope.TENANT:
        return 0
    since = timezone.now() - timedelta(seconds=policy.ttl_seconds)
    model = embedding_model_id()
    turns = (
        Turn.objects.for_tenant(tenant)
        .filter(
            created_at__gte=since,
            question_vector_model=model,
            partial_index=False,
            **({"pk__in": turn_ids} if turn_ids is not None else {}),
        )
        .order_by("pk")
        .values_list("pk", "knowledge_base_id", "created_at", "question_vector")
    )
    indexed = 0
    last_pk = 0
    while True:
        batch = list(turns.filter(pk__gt=last_pk)[:batch_size])
        if not batch:
            return indexed
        rows = [
            vectorstore.QuestionVector(
                turn_id=pk,
                tenant_id=tenant.pk,
                knowledge_base_id=knowledge_base_id,
                created_ts=_epoch(created_at),
                vector=vector_from_bytes(vector),
            )
            for pk, knowledge_base_id, created_at, vector in batch
        ]
        indexed += vectorstore.question_vectors_upsert(rows=rows, model=model)
        last_pk = batch[-1][0]


# --- intents --------------------------------------------------------------------------------------------------------

_intent_vectors: dict[tuple[int, str, str], np.ndarray] = {}  # (intent id, its last change, model id) -> vectors


def intents_load(*, tenant: Tenant) -> list[decisions.IntentExamples]:
    """The tenant's intents with their example vectors: embedded once and stored on the row with the id of the
    model that made them, then kept per process keyed by the row's last change and the model, so a turn reads one
    small query and embeds nothing here. Vectors stored by another model (before a model change, or before the model
    was recorded) are embedded again: they cannot be compared with a question, whatever their size."""
    model = embedding_model_id()
    rows = list(
        Intent.objects.for_tenant(tenant).only(
            "pk", "name", "behaviour", "examples", "example_vectors", "example_vectors_model", "updated_at"
        )
    )
    loaded: list[decisions.IntentExamples] = []
    for intent in rows:
        key = (intent.pk, intent.updated_at.isoformat(), model)
        vectors = _intent_vectors.get(key)
        if vectors is None:
            stored_floats = len(intent.example_vectors or b"") // 4
            if (
                stored_floats
                and decisions.vectors_comparable(stored_model=intent.example_vectors_model, current_model=model)
                and stored_floats == len(intent.examples) * embedding_dimension()
            ):
                vectors = vector_from_bytes(intent.example_vectors).reshape(len(intent.examples), -1)
            else:
                vectors = embed_texts([str(e) for e in intent.examples]) if intent.examples else np.zeros((0, 1))
                Intent.objects.for_tenant(tenant).filter(pk=intent.pk).update(
                    example_vectors=vector_to_bytes(vectors) if len(vectors) else None,
                    example_vectors_model=model if len(vectors) else "",
                )
            _intent_vectors[key] = vectors
        loaded.append(decisions.IntentExamples(name=intent.name, behaviour=intent.behaviour, vectors=vectors))
    return loaded


@dataclass(frozen=True)
class TurnSettings:
    """What a turn needs of the tenant's configuration: its policy and its intents with their example vectors."""

    policy: decisions.PolicyView
    intents: list[decisions.IntentExamples]


# tenant id -> (tenant.settings_version, settings), per process. The version comes with the tenant row that every
# request loads with its API key, so a change committed by any process is seen by the next turn of every process.
_turn_settings: dict[int, tuple[tuple, TurnSettings]] = {}


def turn_settings_load(*, tenant: Tenant) -> TurnSettings:
    """The tenant's policy and intents: this process's copy when `tenant.settings_version` says it is current,
    else read from the database (and kept). Loading after the version was read, a copy is never older than the
    version it is kept under; at worst it is newer, and is then read again on the next change."""
    # The creation time is in the key too: a tenant id can come back (a test's rolled-back rows, a restored
    # database), its version count with it. So is the embedding model: the intents' vectors are that model's.
    version = (tenant.created_at, tenant.settings_version, embedding_model_id())
    cached = _turn_settings.get(tenant.pk)
    if cached is not None and cached[0] == version:
        return cached[1]
    loaded = TurnSettings(policy=policy_view(dedup_policy_get(tenant=tenant)), intents=intents_load(tenant=tenant))
    _turn_settings[tenant.pk] = (version, loaded)
    return loaded


@transaction.atomic
def intent_set(*, tenant: Tenant, name: str, examples: list[str], behaviour: str = IntentBehaviour.NORMAL) -> Intent:
    """Create or change a tenant intent; its example vectors are recomputed on next use."""
    intent, _ = Intent.objects.for_tenant(tenant).update_or_create(
        tenant=tenant,
        name=name,
        defaults={"examples": list(examples), "behaviour": behaviour, "example_vectors": None},
    )
    tenant_settings_changed(tenant=tenant)
    return intent


# --- conversations -------------------------------------------------------------------------------------------------


def knowledge_base_for(
    *, tenant: Tenant, knowledge_base_id: int, allowed_knowledge_base_id: int | None = None
) -> KnowledgeBase:
    """The tenant's knowledge base, or 404 (another tenant's, or one the API key does not reach)."""
    if allowed_knowledge_base_id is not None and int(knowledge_base_id) != allowed_knowledge_base_id:
        raise NotFoundError("Knowledge base not found.")
    knowledge_base = KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base_id).first()
    if knowledge_base is None:
        raise NotFoundError("Knowledge base not found.")
    return knowledge_base


def conversation_create(
    *, tenant: Tenant, knowledge_base_id: int, user_id: str = "", allowed_knowledge_base_id: int | None = None
) -> Conversation:
    problem = control_character_problem(user_id or "")
    if problem is not None:
        raise ApplicationError(f"The user id is not valid: {problem}", extra={"fields": {"user_id": [problem]}})
    knowledge_base = knowledge_base_for(
        tenant=tenant, knowledge_base_id=knowledge_base_id, allowed_knowledge_base_id=allowed_knowledge_base_id
    )
    policy = dedup_policy_get(tenant=tenant)
    now = timezone.now()
    return Conversation.objects.create(
        tenant=tenant,
        knowledge_base=knowledge_base,
        user_id=user_id or "",
        last_active_at=now,
        expires_at=now + timedelta(seconds=policy.ttl_seconds),
    )


def conversation_for(
    *, tenant: Tenant, conversation_id: int, allowed_knowledge_base_id: int | None = None
) -> Conversation:
    conversation = (
        Conversation.objects.for_tenant(tenant).filter(pk=conversation_id).select_related("knowledge_base").first()
    )
    if conversation is None or (
        allowed_knowledge_base_id is not None and conversation.knowledge_base_id != allowed_knowledge_base_id
    ):
        raise NotFoundError("Conversation not found.")
    if conversation.expires_at <= timezone.now():
        raise ApplicationError(
            "This conversation has expired; start a new one.", status_code=410, extra={"conversation": conversation.pk}
        )
    return conversation


# --- the turn ---------------------------------------------------------------------------------------------------------


@dataclass
class SourceView:
    chunk_id: int
    document_id: int
    external_id: str | None
    document_external_id: str | None
    score: float | None
    text: str


@dataclass
class TurnOutcome:
    turn: Turn
    answer: str | None
    sources: list[SourceView]
    action: str
    intent: str
    similarity: float | None
    matched_turn_id: int | None
    excluded_count: int
    relaxed: bool
    shadow_action: str | None = None
    reason: str = ""
    # How the knowledge base's vectors stood against the query when the turn searched them (a re-index running, or
    # failed part way, is said here); None for a turn that searched nothing (a stored answer, small talk).
    index: IndexState | None = None
    state_source: str = "database"
    timings_ms: dict[str, float] = field(default_factory=dict)


def _epoch(moment: datetime) -> int:
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
)


def _previous_vectors(*, tenant: Tenant, turns: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[np.ndarray, str]]:
    """(conversation id, number) -> question vector of the turn before it and the model that made it, for the turns
    that have one."""
    wanted = [(conversation_id, number - 1) for conversation_id, number in turns if number > 1]
    if not wanted:
        return {}
    query = Q()
    for conversation_id, number in wanted:
        query |= Q(conversation_id=conversation_id, number=number)
    rows = (
        Turn.objects.for_tenant(tenant)
        .filter(query)
        .values_list("conversation_id", "number", "question_vector", "question_vector_model")
    )
    return {(c, n + 1): (vector_from_bytes(v), model) for c, n, v, model in rows}


def _stored_from_rows(
    *, tenant: Tenant, rows: list[tuple], intents: list[decisions.IntentExamples], model: str
) -> list[decisions.StoredQuestion]:
    """The QA pairs of `rows` (STORED_QUESTION_FIELDS) with the context each was asked in; `model` is the embedding
    model in use (the previous questions of another model are an unknown context)."""
    previous = _previous_vectors(
        tenant=tenant, turns=[(conversation_id, number) for _, _, _, _, conversation_id, number, _, _ in rows]
    )
    comparable = {
        key: decisions.vectors_comparable(stored_model=vector_model, current_model=model)
        for key, (_, vector_model) in previous.items()
    }
    topics = dict(
        zip(
            previous,
            decisions.names_topic(
                vectors=[vector for vector, _ in previous.values()],
                intents=intents,
                comparable=list(comparable.values()),
            ),
            strict=True,
        )
    )
    stored = []
    for pk, question, vector, vector_model, conversation_id, number, answer, partial_index in rows:
        key = (conversation_id, number)
        stored.append(
            decisions.StoredQuestion(
                turn_id=pk,
                question=question,
                vector=vector_from_bytes(vector),
                conversation_id=conversation_id,
                previous_vector=decisions.followup_context(
                    previous_vector=previous[key][0] if key in previous else None,
                    previous_names_topic=topics.get(key, True),
                    previous_comparable=comparable.get(key, True),
                ),
                answerable=bool(answer),
                vector_model=vector_model,
                partial_index=partial_index,
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
    `decisions.names_topic` of the state's recent turns."""
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
                    vector_model=turn.vector_model,
                    partial_index=turn.partial_index,
                )
            )
        return stored
    since = timezone.now() - timedelta(seconds=policy.ttl_seconds)
    fields = STORED_QUESTION_FIELDS
    if policy.scope == DedupScope.USER:
        # The newest pairs of this model only: another model's would take places among the newest and never match.
        rows = list(
            Turn.objects.for_tenant(tenant)
            .filter(
                knowledge_base_id=conversation.knowledge_base_id,
                user_id=conversation.user_id,
                created_at__gte=since,
                question_vector_model=model,
            )
            .order_by("-created_at")
            .values_list(*fields)[:USER_SCOPE_MAX_PAIRS]
        )
        return _stored_from_rows(tenant=tenant, rows=rows, intents=intents, model=model)
    hits = vectorstore.question_vectors_search(
        tenant_id=tenant.pk,
        knowledge_base_id=conversation.knowledge_base_id,
        query_vector=question_vector,
        limit=TENANT_SCOPE_CANDIDATES,
        model=model,
        created_after=_epoch(since),
    )
    if not hits:
        return []
    rows = list(
        Turn.objects.for_tenant(tenant)
        .filter(pk__in=[hit.turn_id for hit in hits], created_at__gte=since)
        .values_list(*fields)
    )
    return _stored_from_rows(tenant=tenant, rows=rows, intents=intents, model=model)


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


def stored_sources(*, tenant: Tenant, stored: StoredAnswer) -> list[SourceView] | None:
    """The sources a stored answer cites, in its order, or None when any of them changed since (deleted, or
    re-indexed with another content hash): such an answer is never served again. One query does both."""
    ids = stored.source_chunk_ids
    rows = {
        row[0]: row
        for row in Chunk.objects.for_tenant(tenant)
        .filter(pk__in=ids)
        .values_list("pk", "document_id", "external_id", "document__external_id", "text", "content_hash")
    }
    views = []
    for chunk_id in ids:
        row = rows.get(chunk_id)
        cited = stored.source_chunks.get(str(chunk_id)) or {}
        if row is None or row[5] != cited.get("hash"):
            return None
        views.append(
            SourceView(
                chunk_id=chunk_id,
                document_id=row[1],
                external_id=row[2],
                document_external_id=row[3],
                score=cited.get("score"),
                text=row[4],
            )
        )
    return views


def _view_of_hit(hit: ChunkHit) -> SourceView:
    return SourceView(
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        external_id=hit.external_id,
        document_external_id=hit.document_external_id,
        score=hit.score,
        text=hit.text,
    )


def _search(
    *,
    tenant: Tenant,
    conversation: Conversation,
    query_vector: np.ndarray,
    query_model_identity: str,
    excluded: list[int],
    excluded_content: Collection[str],
    granularity: str,
    min_results: int,
) -> tuple[list[ChunkHit], bool]:
    """Grouped search leaving out `excluded` and the passages of `excluded_content` (the texts the excluded turns
    showed, whichever document holds them now: empty when `excluded` is); relaxed (novel first, then the best
    already seen) when fewer than `min_results` remain. An empty exclusion list adds no clause. Raises
    EmbeddingModelMismatchError (409) when the knowledge base's vectors are another model's, before anything of the
    turn is written."""
    exclude_docs = excluded if granularity == Granularity.DOC else None
    exclude_chunks = excluded if granularity == Granularity.CHUNK else None
    try:
        hits = chunk_search(
            tenant=tenant,
            knowledge_base=conversation.knowledge_base,
            query_vector=query_vector,
            query_model_identity=query_model_identity,
            limit=TOP_K,
            exclude_document_ids=exclude_docs,
            exclude_chunk_ids=exclude_chunks,
            exclude_content_hashes=excluded_content,
        )
        if not excluded or not decisions.exclusion_relaxes(
            result_count=len(hits), min_results=min_results, wanted=TOP_K
        ):
            return hits, False
        full = chunk_search(
            tenant=tenant,
            knowledge_base=conversation.knowledge_base,
            query_vector=query_vector,
            query_model_identity=query_model_identity,
            limit=TOP_K,
        )
    except vectorstore.VectorStoreUnavailable as exc:
        raise ServiceUnavailableError("The search index is unavailable; retry shortly.") from exc
    # By document at either granularity: both searches group by document, and so does the merged list (a chunk
    # already there keeps its document's one place; another chunk of it shown before does not take a second one).
    # ... and never a passage twice: the full search's copy of a text the novel results hold is no new place either.
    merged = decisions.relaxed_merge(
        excluded_results=hits,
        full_results=hits_of_distinct_content(full, shown_content_hashes={hit.content_hash for hit in hits}),
        key=lambda hit: hit.document_id,
        limit=TOP_K,
    )
    return merged, True


def turn_ask(
    *,
    tenant: Tenant,
    conversation_id: int,
    question: str,
    force_refresh: bool = False,
    mode: str = "answer",
    generator: AnswerGenerator | None = None,
    allowed_knowledge_base_id: int | None = None,
) -> TurnOutcome:
    """Take one turn of a conversation: a stored answer to a repeated question, or a fresh search (minus what the
    last turns showed) and answer. The QA pair, consumed items and audit event are written atomically."""
    started = time.perf_counter()
    question = (question or "").strip()
    if not question:
        raise ApplicationError("The question is empty.", extra={"fields": {"question": ["This field is required."]}})
    if len(question) > QUESTION_MAX_CHARS:
        raise ApplicationError(f"The question is longer than {QUESTION_MAX_CHARS} characters.")
    problem = control_character_problem(question)
    if problem is None and not has_visible_character(question):
        problem = "Has nothing visible (only spaces, control or formatting characters such as zero-width spaces)."
    if problem is not None:
        raise ApplicationError(f"The question is not valid: {problem}", extra={"fields": {"question": [problem]}})
    if mode not in ("answer", "retrieve"):
        raise ApplicationError('mode must be "answer" or "retrieve".')
    conversation = conversation_for(
        tenant=tenant, conversation_id=conversation_id, allowed_knowledge_base_id=allowed_knowledge_base_id
    )
    turn_settings = turn_settings_load(tenant=tenant)
    policy = turn_settings.policy
    state = state_load(conversation=conversation)
    timings: dict[str, float] = {"state": (time.perf_counter() - started) * 1000}

    mark = time.perf_counter()
    model = embedding_model_id()
    question_vector = embed_query(question)
    timings["embed"] = (time.perf_counter() - mark) * 1000
    intent, behaviour, _ = decisions.intent_classify(question_vector=question_vector, intents=turn_settings.intents)
    plan = decisions.turn_plan(policy=policy, intent=intent, behaviour=behaviour, force_refresh=force_refresh)
    # Which recent questions this model embedded: no other vector is compared with this one's.
    recent_comparable = [
        decisions.vectors_comparable(stored_model=t.vector_model, current_model=model) for t in state.recent_turns
    ]
    # Which recent questions name a topic of their own (not small talk, "show me that again"): a follow-up is read in
    # the context of the question before it only when that one does, and a repeat re-asks the last one that does.
    recent_topics = (
        decisions.names_topic(
            vectors=[t.vector for t in state.recent_turns], intents=turn_settings.intents, comparable=recent_comparable
        )
        if plan.check_duplicates or behaviour in (IntentBehaviour.REPEAT, IntentBehaviour.ELABORATE)
        else []
    )

    mark = time.perf_counter()
    decision = decisions.DuplicateDecision(hit=False)
    matched: StoredAnswer | None = None
    matched_sources: list[SourceView] | None = None
    if plan.check_duplicates:
        try:
            candidates = duplicate_candidates(
                tenant=tenant,
                conversation=conversation,
                state=state,
                policy=policy,
                question_vector=question_vector,
                intents=turn_settings.intents,
                recent_topics=recent_topics,
                model=model,
            )
        except vectorstore.VectorStoreUnavailable:
            logger.warning("question index unavailable: tenant-scope dedup skipped for this turn")
            candidates = []
        decision = decisions.duplicate_decide(
            question=question,
            question_vector=question_vector,
            previous_vector=decisions.followup_context(
                previous_vector=state.previous_vector(),
                previous_names_topic=not recent_topics or recent_topics[-1],
                previous_comparable=not recent_comparable or recent_comparable[-1],
            ),
            candidates=candidates,
            threshold=policy.threshold,
            embedding_model=embedding_model_name(),
            use_head=settings.DUPLICATE_HEAD,
            vector_model=model,
        )
        if decision.hit:
            matched = stored_answer_of(tenant=tenant, state=state, turn_id=decision.turn_id)
            if matched is not None and matched.origin_turn_id is not None:
                matched = stored_answer_at_origin(tenant=tenant, state=state, copy=matched)
            matched_sources = stored_sources(tenant=tenant, stored=matched) if matched is not None else None
            refusal = ""
            if matched is None:
                refusal = "no stored answer"
            elif matched_sources is None:
                refusal = "sources changed"
            elif not matched_sources:
                # An answer that cites no passage ("I found nothing", small talk) cannot be checked against the
                # knowledge base, which may hold the answer by now (a document indexed since): never served again.
                refusal = "answer cites no source"
            if refusal:
                # Refused after the decision: the audit event keeps what the decision found (the head's probability)
                # and says that the match did not pass every check.
                decision = replace(decision, hit=False, reason=refusal, passes_checks=False)
                matched = None
    timings["dedup"] = (time.perf_counter() - mark) * 1000

    serve_cached = decision.hit and not policy.shadow_mode
    next_number = state.turn_count + 1
    excluded: list[int] = []
    relaxed = False
    sources: list[SourceView] = []
    source_chunks: dict[str, dict] = {}
    answer_text = ""
    answer_tokens = 0
    context_tokens = 0
    shadow_action: str | None = None
    searched_index: IndexState | None = None

    mark = time.perf_counter()
    if serve_cached:
        action = DedupAction.SERVED_CACHED
        answer_text = matched.answer
        answer_tokens = matched.answer_tokens
        context_tokens = 0
        sources = matched_sources
        source_chunks = dict(matched.source_chunks)
    elif plan.smalltalk:
        action = DedupAction.SMALLTALK
        answer_text = SMALLTALK_REPLIES.get(intent, "Happy to help. What would you like to know?")
        answer_tokens = token_count(answer_text)
    else:
        search_vector, answer_question = question_vector, question
        if behaviour in (IntentBehaviour.REPEAT, IntentBehaviour.ELABORATE) and state.recent_turns:
            # "Show me that again" / "explain in more detail" are about the previous question, not about their
            # own words: search and answer for the last question that names a topic (a second "show me that
            # again", or a "thanks" in between, stands for the same one).
            topic = next(
                (t for t, named in zip(state.recent_turns[::-1], recent_topics[::-1], strict=True) if named), None
            )
            if topic is not None:
                # A question asked before a model change is embedded again: the chunk index is the new model's.
                search_vector, answer_question = topic.vector, topic.question
                if not decisions.vectors_comparable(stored_model=topic.vector_model, current_model=model):
                    search_vector = embed_query(topic.question)
        if plan.exclusion:
            excluded = decisions.excluded_ids(
                consumed=state.consumed,
                granularity=policy.granularity,
                next_turn_number=next_number,
                window=policy.exclusion_window,
            )
        applied_exclusion = [] if policy.shadow_mode else excluded
        # The texts those turns showed: a copy of one in another document (the same file uploaded twice) is no news.
        excluded_content = (
            chunk_content_hashes(
                tenant=tenant,
                chunk_ids=decisions.excluded_ids(
                    consumed=state.consumed,
                    granularity=Granularity.CHUNK,
                    next_turn_number=next_number,
                    window=policy.exclusion_window,
                ),
            )
            if applied_exclusion
            else set()
        )
        # Every vector searched with here is the process's model's (a stored one of another model was embedded again
        # above); a knowledge base of another model refuses the turn (409) before anything of it is written.
        query_model_identity = embedding_model_identity()
        hits, relaxed = _search(
            tenant=tenant,
            conversation=conversation,
            query_vector=search_vector,
            query_model_identity=query_model_identity,
            excluded=applied_exclusion,
            excluded_content=excluded_content,
            granularity=policy.granularity,
            min_results=policy.min_results,
        )
        searched_index = index_state(
            knowledge_base=conversation.knowledge_base, query_model_identity=query_model_identity
        )
        sources = [_view_of_hit(hit) for hit in hits]
        source_chunks = {
            str(hit.chunk_id): {"hash": hit.content_hash, "score": hit.score, "document_id": hit.document_id}
            for hit in hits
        }
        passages = [SourcePassage(chunk_id=h.chunk_id, text=h.text, token_count=h.token_count) for h in hits]
        if mode == "answer":
            generated = (generator or answer_generator()).generate(question=answer_question, passages=passages)
            answer_text, answer_tokens, context_tokens = (
                generated.text,
                generated.answer_tokens,
                generated.context_tokens,
            )
        else:
            context_tokens = context_tokens_of(passages)
        refused_close_match = decision.turn_id is not None and decision.reason not in ("", "below threshold")
        action = DedupAction.BYPASSED if (plan.bypass_reason or refused_close_match) else DedupAction.ANSWERED
        if decision.hit and policy.shadow_mode:
            shadow_action = DedupAction.SERVED_CACHED
    timings["answer"] = (time.perf_counter() - mark) * 1000

    elapsed_ms = (time.perf_counter() - started) * 1000
    tokens_saved = (matched.context_tokens + matched.answer_tokens) if decision.hit and matched else 0
    ms_saved = max(0.0, matched.elapsed_ms - elapsed_ms) if decision.hit and matched else 0.0
    reason = plan.bypass_reason or decision.reason
    if decision.hit and policy.shadow_mode:
        reason = "shadow mode: would have served the stored answer"

    turn = _turn_persist(
        tenant=tenant,
        conversation=conversation,
        ttl_seconds=policy.ttl_seconds,
        question=question,
        question_vector=question_vector,
        question_vector_model=model,
        partial_index=searched_index is not None and searched_index.partial,
        intent=intent,
        mode=mode,
        answer=answer_text,
        answer_tokens=answer_tokens,
        sources=sources,
        source_chunks=source_chunks,
        context_tokens=context_tokens,
        action=action,
        decision=decision,
        matched=matched,
        elapsed_ms=elapsed_ms,
        event={
            "action": shadow_action or action,
            "intent": intent,
            "reason": reason[:200],
            "scope": policy.scope,
            "threshold": decision.gate if decision.gate is not None else policy.threshold,
            "question_window": policy.question_window,
            "exclusion_window": policy.exclusion_window,
            "granularity": policy.granularity,
            "excluded_count": len(excluded),
            "relaxed": relaxed,
            "shadow": shadow_action is not None or (policy.shadow_mode and bool(excluded)),
            "tokens_saved": tokens_saved,
            "ms_saved": ms_saved,
        },
    )

    _after_commit(
        tenant=tenant,
        conversation=conversation,
        state=state,
        turn=turn,
        policy=policy,
        question_vector=question_vector,
    )
    timings["total"] = (time.perf_counter() - started) * 1000
    return TurnOutcome(
        turn=turn,
        answer=answer_text if (mode == "answer" or serve_cached or plan.smalltalk) else None,
        sources=sources,
        action=action,
        intent=intent,
        similarity=decision.similarity,
        matched_turn_id=decision.turn_id if decision.hit else None,
        excluded_count=len(excluded),
        relaxed=relaxed,
        shadow_action=shadow_action,
        reason=reason,
        index=searched_index,
        state_source=state.source,
        timings_ms=timings,
    )


def _turn_number_take(*, tenant: Tenant, conversation: Conversation, now: datetime, expires_at: datetime) -> int:
    """Inside the turn's transaction: count the turn on the conversation row, move its expiry, and return the new
    turn's number. The UPDATE locks the row until the transaction ends, so concurrent turns of one conversation
    queue here and get distinct numbers; RETURNING makes it one round trip (PostgreSQL, and SQLite 3.35+), where
    the ORM would need a locking read and a write."""
    connection = transaction.get_connection()
    table = connection.ops.quote_name(Conversation._meta.db_table)
    moments = [connection.ops.adapt_datetimefield_value(moment) for moment in (now, expires_at)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET turn_count = turn_count + 1, last_active_at = %s, expires_at = %s "
            "WHERE id = %s AND tenant_id = %s RETURNING turn_count",
            [*moments, conversation.pk, tenant.pk],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFoundError("Conversation not found.")
    return int(row[0])


def _commit_without_flush() -> None:
    """Inside a transaction: on PostgreSQL, commit it without waiting for the WAL flush (see
    settings.ASYNC_COMMIT_CACHED_TURNS for what that risks). Other databases are left as configured."""
    connection = transaction.get_connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def _turn_persist(**fields: Any) -> Turn:
    """Write the turn (`_turn_write`). A turn that names another turn (the pair it matched or served, or a close
    match it refused) can lose a race with the purge: the other turn's conversation expires and is deleted between
    the decision and this commit, and the deferred foreign-key check fails at COMMIT. The answer is still right (it
    was read while the pair existed), so the write is redone once with the vanished references left empty (the
    audit event keeps their numbers in its `_ref` columns); the common path pays no extra query."""
    decision: decisions.DuplicateDecision = fields["decision"]
    matched: StoredAnswer | None = fields["matched"]
    referenced = {pk for pk in (decision.turn_id, matched.turn_id if matched else None) if pk is not None}
    try:
        return _turn_write(**fields)
    except IntegrityError:
        if not referenced:
            raise
        logger.info("turn write lost a race with the purge (turns %s); writing it again", sorted(referenced))
    return _turn_write(**fields, recheck_references=referenced)


def _turn_write(
    *,
    tenant: Tenant,
    conversation: Conversation,
    ttl_seconds: int,
    question: str,
    question_vector: np.ndarray,
    question_vector_model: str,
    partial_index: bool,
    intent: str,
    mode: str,
    answer: str,
    answer_tokens: int,
    sources: list[SourceView],
    source_chunks: dict,
    context_tokens: int,
    action: str,
    decision: decisions.DuplicateDecision,
    matched: StoredAnswer | None,
    elapsed_ms: float,
    event: dict,
    recheck_references: set[int] | None = None,
) -> Turn:
    """One transaction: lock the conversation row (so concurrent turns queue here and get distinct numbers), write
    the QA pair, mark what it showed as consumed by this turn, move the expiry, write the audit event.
    `recheck_references`: turns this one names that may have been deleted since the decision; those still there are
    locked against deletion until the commit, the others are not named."""
    now = timezone.now()
    with transaction.atomic():
        if action == DedupAction.SERVED_CACHED and settings.ASYNC_COMMIT_CACHED_TURNS:
            _commit_without_flush()
        number = _turn_number_take(
            tenant=tenant, conversation=conversation, now=now, expires_at=now + timedelta(seconds=ttl_seconds)
        )
        present = None
        if recheck_references:
            present = set(
                Turn.objects.for_tenant(tenant)
                .select_for_update(no_key=True)
                .filter(pk__in=recheck_references)
                .values_list("pk", flat=True)
            )

        def still_there(pk: int | None) -> int | None:
            return pk if present is None or pk in present else None

        turn = Turn.objects.create(
            tenant=tenant,
            conversation=conversation,
            knowledge_base_id=conversation.knowledge_base_id,
            user_id=conversation.user_id,
            number=number,
            question=question,
            question_vector=vector_to_bytes(question_vector),
            question_vector_model=question_vector_model,
            partial_index=partial_index,
            intent=intent,
            mode=mode,
            answer=answer,
            answer_tokens=answer_tokens,
            source_chunks=source_chunks,
            source_chunk_ids=[s.chunk_id for s in sources],
            context_tokens=context_tokens,
            decision=action,
            similarity=decision.similarity,
            matched_turn_id=still_there(decision.turn_id) if decision.hit and matched is not None else None,
            answer_origin_id=still_there(matched.turn_id) if action == DedupAction.SERVED_CACHED else None,
            elapsed_ms=elapsed_ms,
        )
        consumed = _consumed_of(sources=sources, turn_number=number)
        if consumed:
            ConsumedItem.objects.bulk_create(
                [
                    ConsumedItem(
                        tenant=tenant, conversation=conversation, kind=c.kind, item_id=c.item_id, turn_number=number
                    )
                    for c in consumed
                ],
                update_conflicts=True,
                unique_fields=["conversation", "kind", "item_id"],
                update_fields=["turn_number"],
            )
        DedupEvent.objects.create(
            tenant=tenant,
            conversation=conversation,
            conversation_ref=conversation.pk,
            turn=turn,
            turn_ref=turn.pk,
            similarity=decision.similarity,
            matched_turn_id=still_there(decision.turn_id),
            matched_turn_ref=decision.turn_id,
            pair_probability=decision.probability,
            match_passes_checks=decision.passes_checks,
            **event,
        )
    turn.consumed_refs = consumed
    return turn


def _consumed_of(*, sources: list[SourceView], turn_number: int) -> list[decisions.ConsumedRef]:
    """Both granularities are recorded, so a policy change between doc and chunk applies to past turns too."""
    refs: dict[tuple[str, int], decisions.ConsumedRef] = {}
    for source in sources:
        refs[("doc", source.document_id)] = decisions.ConsumedRef("doc", source.document_id, turn_number)
        refs[("chunk", source.chunk_id)] = decisions.ConsumedRef("chunk", source.chunk_id, turn_number)
    return list(refs.values())


def _after_commit(
    *,
    tenant: Tenant,
    conversation: Conversation,
    state: ConversationState,
    turn: Turn,
    policy: decisions.PolicyView,
    question_vector: np.ndarray,
) -> None:
    """Refresh the hot copy (or drop it when another turn came in between: the next read rebuilds it), and index
    the question for tenant-scope dedup. Neither may fail the turn: the rows are already committed."""
    if turn.number == state.turn_count + 1:
        new_state = state_after_turn(
            state=state,
            turn=RecentTurn(
                turn.pk,
                turn.number,
                turn.question,
                question_vector,
                bool(turn.answer),
                StoredAnswer.of_turn(turn) if turn.answer else None,
                turn.question_vector_model,
                turn.partial_index,
            ),
            consumed=turn.consumed_refs,
        )
        state_store(tenant_id=tenant.pk, state=new_state, ttl_seconds=policy.ttl_seconds)
    else:
        state_forget(tenant_id=tenant.pk, conversation_id=conversation.pk)
    # A pair answered from a partial index is never served: in the tenant-scope index it would only take the place of
    # a candidate that can be (the search keeps the nearest TENANT_SCOPE_CANDIDATES).
    if policy.scope == DedupScope.TENANT and not turn.partial_index:
        try:
            vectorstore.question_vectors_upsert(
                rows=[
                    vectorstore.QuestionVector(
                        turn_id=turn.pk,
                        tenant_id=tenant.pk,
                        knowledge_base_id=conversation.knowledge_base_id,
                        created_ts=_epoch(turn.created_at),
                        vector=question_vector,
                    )
                ],
                model=turn.question_vector_model,
            )
        except vectorstore.VectorStoreUnavailable:
            # The turn is committed; its question is indexed by a worker once Milvus answers again, so it is not
            # missing from tenant-scope dedup for good.
            logger.warning("question index unavailable: turn %s queued for indexing by a worker", turn.pk)
            from conversations.tasks import question_index_backfill_task

            transaction.on_commit(
                lambda: question_index_backfill_task.delay(tenant.pk, turn_ids=[turn.pk]), robust=True
            )


# --- answers supplied by the client (retrieve mode) -----------------------------------------------------------------


def turn_answer_set(*, tenant: Tenant, turn_id: int, answer: str, allowed_knowledge_base_id: int | None = None) -> Turn:
    """Store the client's own answer to a retrieve-mode turn, so the QA pair serves later duplicates. A turn asked in
    answer mode, or a small-talk turn, is a conflict (409)."""
    answer = (answer or "").strip()
    if not answer:
        raise ApplicationError("The answer is empty.", extra={"fields": {"answer": ["This field is required."]}})
    if len(answer) > ANSWER_MAX_CHARS:
        raise ApplicationError(f"The answer is longer than {ANSWER_MAX_CHARS} characters.")
    with transaction.atomic():
        # NO KEY UPDATE: a concurrent turn that serves this pair inserts a row referencing it (a KEY SHARE lock
        # while it holds the conversation row); a plain FOR UPDATE here, then the conversation update below, would
        # wait on each other.
        turn = Turn.objects.for_tenant(tenant).select_for_update(no_key=True).filter(pk=turn_id).first()
        if turn is None or (
            allowed_knowledge_base_id is not None and turn.knowledge_base_id != allowed_knowledge_base_id
        ):
            raise NotFoundError("Turn not found.")
        if turn.mode != "retrieve":
            raise ConflictError("Only a turn asked in retrieve mode takes a client answer.")
        if turn.decision == DedupAction.SMALLTALK:
            # Small talk retrieves nothing and already has its reply: an answer stored on it would be a QA pair that
            # no search stands behind.
            raise ConflictError("A small-talk turn (greeting, thanks) retrieves nothing and takes no client answer.")
        turn.answer = answer
        turn.answer_tokens = token_count(answer)
        # A retrieve-mode turn that was served a stored answer names the pair it came from, and later duplicates of
        # it are served that pair's answer: the client's own answer makes the turn its own origin instead.
        turn.answer_origin = None
        turn.save(update_fields=["answer", "answer_tokens", "answer_origin"])
        # Invalidates every hot copy built before this answer, including one the state_forget below cannot reach.
        Conversation.objects.for_tenant(tenant).filter(pk=turn.conversation_id).update(
            state_revision=F("state_revision") + 1
        )
    state_forget(tenant_id=tenant.pk, conversation_id=turn.conversation_id)
    return turn


# --- deleting conversation records by hand (the admin) -------------------------------------------------------------


def conversation_records_delete(
    *,
    tenant: Tenant,
    conversation_ids: Sequence[int] = (),
    turn_ids: Sequence[int] = (),
    consumed_item_ids: Sequence[int] = (),
) -> None:
    """Delete conversations, turns or consumed items of `tenant` so that nothing keeps using them: every hot copy
    built before is invalidated (its conversation's revision moves, and it is dropped from Redis), so a deleted QA
    pair is never served again from a copy nor a deleted consumed item excluded; the deleted turns' question
    vectors leave the tenant-scope index (a worker deletes them when Milvus is down; a vector left behind meanwhile
    finds no row and is skipped). Audit events stay, as for an expired conversation. The hot copies and the vectors
    go once the deletion commits, so a caller's transaction that rolls back keeps them with its rows."""
    turns = Turn.objects.for_tenant(tenant)
    doomed_turns = list(
        turns.filter(Q(pk__in=list(turn_ids)) | Q(conversation_id__in=list(conversation_ids))).values_list(
            "pk", "conversation_id"
        )
    )
    touched = (
        {conversation_id for _, conversation_id in doomed_turns}
        | set(conversation_ids)
        | set(
            ConsumedItem.objects.for_tenant(tenant)
            .filter(pk__in=list(consumed_item_ids))
            .values_list("conversation_id", flat=True)
        )
    )
    with transaction.atomic():
        ConsumedItem.objects.for_tenant(tenant).filter(pk__in=list(consumed_item_ids)).delete()
        turns.filter(pk__in=[pk for pk, _ in doomed_turns]).delete()
        Conversation.objects.for_tenant(tenant).filter(pk__in=list(conversation_ids)).delete()
        # A conversation keeps its turn count (turn numbers are never reused); its revision tells hot copies apart.
        Conversation.objects.for_tenant(tenant).filter(pk__in=touched).update(state_revision=F("state_revision") + 1)
    # What lives outside the database follows the deletion only once it is committed: inside a caller's transaction
    # (the admin's delete view runs in one) a rollback would otherwise keep the rows and lose their vectors.
    transaction.on_commit(
        functools.partial(
            _records_deleted_outside_database,
            tenant_id=tenant.pk,
            conversation_ids=sorted(touched),
            turn_ids=[pk for pk, _ in doomed_turns],
        ),
        robust=True,
    )


def _records_deleted_outside_database(*, tenant_id: int, conversation_ids: list[int], turn_ids: list[int]) -> None:
    """After `conversation_records_delete` commits: drop the hot copies and the deleted turns' question vectors."""
    for conversation_id in conversation_ids:
        state_forget(tenant_id=tenant_id, conversation_id=conversation_id)
    if not turn_ids:
        return
    try:
        vectorstore.question_vectors_delete(tenant_id=tenant_id, turn_ids=turn_ids)
    except vectorstore.VectorStoreUnavailable:
        # The rows are gone (what the admin asked for); a worker deletes the vectors once Milvus answers.
        logger.warning("question index unavailable: deleting %s deleted questions' vectors queued", len(turn_ids))
        from conversations.tasks import question_vectors_delete_task

        try:
            question_vectors_delete_task.delay(tenant_id, turn_ids)
        except Exception:  # the broker down too: the deletion stands, the vectors stay (logged)
            logger.exception("could not queue the deletion of %s question vectors", len(turn_ids))


# --- audit review and retention ------------------------------------------------------------------------------------


def conversations_purge_expired(*, now: datetime | None = None, batch_size: int = 500) -> int:
    """Delete conversations past their expiry, across tenants (a retention job: `.unscoped()` on purpose), with
    their turns, consumed items, hot copies and their turns' question vectors; audit events stay. The vectors go
    whatever the tenant's scope is now: a question asked under tenant scope was indexed, and the scope may have
    changed since (a vector left behind finds no row, but takes a candidate slot of every tenant-scope search).
    When Milvus does not delete a tenant's vectors, that tenant's expired conversations stay (still refused with
    410) and the next run deletes both, as a document or knowledge base stays when its vectors cannot go.
    Idempotent; returns how many were deleted."""
    now = now or timezone.now()
    deleted = 0
    unavailable: set[int] = set()  # tenants whose vectors Milvus did not delete: left for the next run
    while True:
        batch = list(
            Conversation.objects.unscoped()
            .filter(expires_at__lte=now)
            .exclude(tenant_id__in=unavailable)
            .values_list("pk", "tenant_id")[:batch_size]
        )
        if not batch:
            return deleted
        by_tenant: dict[int, list[int]] = {}
        for pk, tenant_id in batch:
            by_tenant.setdefault(tenant_id, []).append(pk)
        for tenant_id, conversation_ids in by_tenant.items():
            try:
                deleted += _expired_conversations_delete(
                    tenant_id=tenant_id, conversation_ids=conversation_ids, now=now
                )
            except vectorstore.VectorStoreUnavailable as exc:
                unavailable.add(tenant_id)
                logger.warning(
                    "question index unavailable: %s expired conversations of tenant %s kept for the next purge: %s",
                    len(conversation_ids),
                    tenant_id,
                    exc,
                )


def _expired_conversations_delete(*, tenant_id: int, conversation_ids: list[int], now: datetime) -> int:
    """Delete those of the tenant's `conversation_ids` still expired at `now`, and their turns' question vectors, in
    one transaction: VectorStoreUnavailable rolls the rows back, so no vector outlives its row. Returns how many."""
    with transaction.atomic():
        turns = list(
            Turn.objects.unscoped()
            .filter(tenant_id=tenant_id, conversation_id__in=conversation_ids)
            .values_list("conversation_id", "pk")
        )
        Conversation.objects.unscoped().filter(
            tenant_id=tenant_id, pk__in=conversation_ids, expires_at__lte=now
        ).delete()
        # A turn that landed since the batch was read moved its conversation's expiry, and the delete left it: its
        # questions stay indexed and its hot copy stays. One landing from here on waits for the deleted row's lock,
        # then finds its conversation gone.
        kept = set(Conversation.objects.unscoped().filter(pk__in=conversation_ids).values_list("pk", flat=True))
        vectorstore.question_vectors_delete(
            tenant_id=tenant_id, turn_ids=[turn_id for conversation_id, turn_id in turns if conversation_id not in kept]
        )
    purged = [pk for pk in conversation_ids if pk not in kept]
    for pk in purged:
        state_forget(tenant_id=tenant_id, conversation_id=pk)
    return len(purged)


# --- dashboard rollups -------------------------------------------------------------------------------------------

# A day is rolled up once it has been over for this long: a turn whose event was stamped just before midnight may
# still be committing after it.
ROLLUP_SETTLE = timedelta(minutes=10)


def dedup_figures_rollup(*, now: datetime | None = None, max_days: int = 1000) -> int:
    """Write the dashboard's figures (`DedupDayFigures`) of every whole past day, in the site's time zone, of every
    tenant with events, back to the longest period the dashboard shows, where none is written yet (or one of another
    time zone). Newest days first across all tenants (yesterday for every tenant before the day before for any), at
    most `max_days` per run: a long history is finished by the next runs, and the dashboard counts a day without a row
    from its events meanwhile. Idempotent; returns how many days it wrote."""
    now = now or timezone.now()
    time_zone = timezone.get_current_timezone_name()
    last_day = timezone.localtime(now - ROLLUP_SETTLE).date() - timedelta(days=1)
    oldest = last_day - timedelta(days=MAX_PERIOD_DAYS)
    # Crosses tenants on purpose (a maintenance job); each tenant's rows are computed from its own events only.
    # Two queries whatever the number of tenants: each tenant's first event (one index probe per tenant, inside the
    # query) and the days already written in the period.
    first_event = (
        DedupEvent.objects.unscoped().filter(tenant_id=OuterRef("pk")).order_by("created_at").values("created_at")[:1]
    )
    tenants = [
        (tenant, first)
        for tenant, first in (
            (tenant, tenant.first_event_at)
            for tenant in Tenant.objects.annotate(first_event_at=Subquery(first_event)).order_by("pk")
        )
        if first is not None
    ]
    done: set[tuple[int, date]] = set(
        DedupDayFigures.objects.unscoped()
        .filter(day__gte=oldest, day__lte=last_day, time_zone=time_zone)
        .values_list("tenant_id", "day")
    )
    missing: list[tuple[date, Tenant]] = []
    for tenant, first in tenants:
        first_day = max(timezone.localtime(first).date(), oldest)
        missing += [
            (day, tenant)
            for day in (first_day + timedelta(days=offset) for offset in range((last_day - first_day).days + 1))
            if (tenant.pk, day) not in done
        ]
    missing.sort(key=lambda item: (item[0], -item[1].pk), reverse=True)  # newest day first; by tenant within a day
    rows = []
    for day, tenant in missing[:max_days]:
        groups, histogram, events = day_figures_compute(tenant=tenant, day=day)
        rows.append(
            DedupDayFigures(
                tenant=tenant, day=day, time_zone=time_zone, groups=groups, histogram=histogram, events=events
            )
        )
        if len(rows) == 500:
            _day_figures_write(rows)
    _day_figures_write(rows)
    written = min(len(missing), max_days)
    if written:
        logger.info("dashboard rollup: %s tenant-days written", written)
    return written


def _day_figures_write(rows: list[DedupDayFigures]) -> None:
    """Upsert and empty `rows`: a row of another time zone is replaced, and two runs at once write the same figures."""
    DedupDayFigures.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["tenant", "day"],
        update_fields=["time_zone", "groups", "histogram", "events", "computed_at"],
    )
    rows.clear()
