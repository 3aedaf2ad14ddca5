"""A turn's judging, before its decision: which model reads the conversation, the question's intent, and the facts
`turn_decision.turn_decide` decides on: the plan, the candidates, the duplicate decision on the knowledge base's
curated answers and then on the user's own history, and the matched answer's sources. Reads (the database, Redis,
Milvus) and the pure rules of `dedup.decisions`; writes nothing."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
from django.conf import settings

from conversations.dedup import decisions
from conversations.models import (
    Conversation,
    IntentBehaviour,
)
from conversations.turn.candidates import duplicate_candidates, stored_answer_at_origin, stored_answer_of
from conversations.turn.curated_set import CuratedSet, curated_set_of
from conversations.turn.languages import reply_language
from conversations.turn.policy import TurnSettings
from conversations.turn.sources import (
    SourceRows,
    SourceView,
    stored_sources,
)
from conversations.turn.state import (
    ConversationState,
    StoredAnswer,
)
from conversations.turn.turn_decision import (
    MatchFacts,
    MatchRefusal,
    TurnFacts,
)
from retrieval import vectorstore
from retrieval.embeddings import (
    knowledge_base_model,
    text_readable,
)
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def conversation_model(conversation: Conversation) -> str:
    """The embedding model (by name) the conversation's questions are embedded and searched with: its knowledge
    base's (`embeddings.knowledge_base_model`)."""
    return knowledge_base_model(conversation.knowledge_base.embedding_model)


def question_intent(
    *,
    question: str,
    question_vector: np.ndarray,
    turn_settings: TurnSettings,
    readable: bool | None,
    embedding: str | None = None,
) -> tuple[str, str]:
    """(intent, behaviour) of the question. A question the embedding model (`embedding`, by name) cannot read
    (`readable` False; None: find out) has a vector near no example for any reason that has to do with its meaning, so
    it is classified by the rules alone (`decisions.intent_by_tenant_rules`: Chinese formulas), else `other`."""
    if readable is None:
        readable = text_readable(question, embedding)
    if not readable:
        ruled = decisions.intent_by_tenant_rules(question=question, intents=turn_settings.intents)
        return ruled if ruled is not None else (decisions.INTENT_OTHER, IntentBehaviour.NORMAL)
    intent, behaviour, _ = decisions.intent_classify(
        question=question, question_vector=question_vector, intents=turn_settings.intents
    )
    return intent, behaviour


@dataclass(frozen=True)
class CuratedMatch:
    """The curated answer whose phrasing the turn's recorded duplicate decision matched (served, or the nearest match
    refused), and that phrasing: the stored question of the pair in the audit log."""

    curated_answer_id: int
    question: str


@dataclass(frozen=True)
class Judged:
    """What a turn found out before deciding: the facts for `turn_decide`, the matched pair's sources, and the curated
    answer the recorded decision is about (None: it is about the user's own history, or about nothing)."""

    facts: TurnFacts
    match_sources: list[SourceView] | None
    curated: CuratedMatch | None = None


def _curated_judge(
    *,
    tenant: Tenant,
    curated: CuratedSet,
    decide: dict,
    sources_read: SourceRows | None,
) -> tuple[decisions.DuplicateDecision | None, MatchFacts | None, list[SourceView] | None]:
    """The duplicate decision on the knowledge base's curated phrasings (the same `duplicate_decide_verified`, gate,
    checks, head and follow-up guard as on the user's history), with the matched answer's facts and sources when it
    hit and its citations still stand. A hit whose cited chunks changed since is refused (`sources changed`), as a
    stored answer's is. None when there is no curated phrasing."""
    if not curated.candidates:
        return None, None, None
    decided = decisions.duplicate_decide_verified(candidates=curated.candidates, **decide)
    if not decided.hit:
        return decided, None, None
    answer = curated.answer_of(decided.turn_id)
    sources = stored_sources(tenant=tenant, stored=answer, read_ahead=sources_read)
    if sources is None:
        refused = replace(
            decided,
            hit=False,
            reason=str(MatchRefusal.SOURCES_CHANGED),
            passes_checks=False,
            close_match_refused=True,
        )
        return refused, None, None
    return decided, MatchFacts(answer=answer, sources_intact=True, cites_sources=True), sources


def _curated_copy_current(*, answer: StoredAnswer | None, curated: CuratedSet) -> StoredAnswer | None:
    """An earlier turn's copy of a curated answer as that curated answer reads now, or None when it is disabled or
    deleted since (the copy is then no answer to serve). Any other stored answer as it is."""
    if answer is None or answer.curated_answer_id is None:
        return answer
    current = curated.answers.get(answer.curated_answer_id)
    if current is None:
        return None
    return replace(
        answer,
        answer=current.answer,
        answer_tokens=current.answer_tokens,
        source_chunk_ids=current.source_chunk_ids,
        source_chunks=current.source_chunks,
    )


def _own_history_judge(
    *,
    tenant: Tenant,
    conversation: Conversation,
    turn_settings: TurnSettings,
    state: ConversationState,
    question_vector: np.ndarray,
    recent_topics: list[bool],
    model: str,
    curated: CuratedSet,
    decide: dict,
    sources_read: SourceRows | None,
) -> tuple[decisions.DuplicateDecision, MatchFacts | None, list[SourceView] | None]:
    """The duplicate decision on the user's own history within the policy's scope, and for a hit the stored answer
    it would serve (at its origin, as its curated answer reads now) with that answer's sources."""
    try:
        candidates = duplicate_candidates(
            tenant=tenant,
            conversation=conversation,
            state=state,
            policy=turn_settings.policy,
            question_vector=question_vector,
            intents=turn_settings.intents,
            recent_topics=recent_topics,
            model=model,
        )
    except vectorstore.VectorStoreUnavailable:
        logger.warning("question index unavailable: tenant-scope dedup skipped for this turn")
        candidates = []
    duplicate = decisions.duplicate_decide_verified(candidates=candidates, **decide)
    if not duplicate.hit:
        return duplicate, None, None
    answer = stored_answer_of(tenant=tenant, state=state, turn_id=duplicate.turn_id)
    if answer is not None and answer.origin_turn_id is not None:
        answer = stored_answer_at_origin(tenant=tenant, state=state, copy=answer)
    answer = _curated_copy_current(answer=answer, curated=curated)
    match_sources = (
        stored_sources(tenant=tenant, stored=answer, read_ahead=sources_read) if answer is not None else None
    )
    match = MatchFacts(
        answer=answer,
        sources_intact=match_sources is not None,
        # A copy of a curated answer stands without citations, as the curated answer does.
        cites_sources=bool(match_sources) or (answer is not None and answer.curated_answer_id is not None),
    )
    return duplicate, match, match_sources


def _recent_context(
    *, turn_settings: TurnSettings, state: ConversationState, model: str, wanted: bool
) -> tuple[list[bool], list[bool]]:
    """Per recent question: whether this model embedded it (no other vector is compared with this one's), and, when
    `wanted`, whether it names a topic of its own (not small talk, "show me that again"): a follow-up is read in the
    context of the question before it only when that one does, and a repeat re-asks the last one that does."""
    recent_comparable = [
        decisions.vectors_comparable(stored_model=t.vector_model, current_model=model) for t in state.recent_turns
    ]
    if not wanted:
        return recent_comparable, []
    recent_topics = decisions.names_topic(
        vectors=[t.vector for t in state.recent_turns],
        intents=turn_settings.intents,
        comparable=recent_comparable,
        questions=[t.question for t in state.recent_turns],
    )
    return recent_comparable, list(recent_topics)


def turn_judge(
    *,
    tenant: Tenant,
    conversation: Conversation,
    turn_settings: TurnSettings,
    state: ConversationState,
    question: str,
    question_vector: np.ndarray,
    model: str,
    force_refresh: bool,
    sources_read: SourceRows | None = None,
    asked: str = "",
) -> Judged:
    """Classify the question, look for the stored question it repeats within the policy's scope (when the plan
    looks), and load what the database holds of the pair that decision matched (`sources_read`: chunk rows read
    ahead of the decision, which the sources check uses when they cover the pair's sources). `asked`: the question as
    the user wrote it, when `question` is its rewrite: the platform's own replies are in its language."""
    policy = turn_settings.policy
    embedding = conversation_model(conversation)
    # A question the model cannot read has a vector that matches no stored question by similarity.
    readable = text_readable(question, embedding)
    intent, behaviour = question_intent(
        question=question,
        question_vector=question_vector,
        turn_settings=turn_settings,
        readable=readable,
        embedding=embedding,
    )
    plan = decisions.turn_plan(policy=policy, intent=intent, behaviour=behaviour, force_refresh=force_refresh)
    recent_comparable, recent_topics = _recent_context(
        turn_settings=turn_settings,
        state=state,
        model=model,
        wanted=plan.check_duplicates or behaviour in (IntentBehaviour.REPEAT, IntentBehaviour.ELABORATE),
    )
    duplicate = decisions.DuplicateDecision(hit=False)
    match, match_sources, curated_match = None, None, None
    if plan.check_duplicates:
        decide = {
            "verifier": turn_settings.verifiers.active,
            "shadow": turn_settings.verifiers.shadow,
            "question": question,
            "question_vector": question_vector,
            "previous_vector": decisions.followup_context(
                previous_vector=state.previous_vector(),
                previous_names_topic=not recent_topics or recent_topics[-1],
                previous_comparable=not recent_comparable or recent_comparable[-1],
            ),
            "threshold": policy.threshold,
            "embedding_model": embedding,
            "use_head": settings.DUPLICATE_HEAD,
            "vector_model": model,
            "question_readable": readable,
        }
        # The knowledge base's curated answers first: the same question always gets the standard answer.
        curated = curated_set_of(tenant=tenant, knowledge_base_id=conversation.knowledge_base_id, embedding=embedding)
        curated_decision, match, match_sources = _curated_judge(
            tenant=tenant, curated=curated, decide=decide, sources_read=sources_read
        )
    if plan.check_duplicates and match is not None:
        duplicate = curated_decision
    elif plan.check_duplicates:
        duplicate, match, match_sources = _own_history_judge(
            tenant=tenant,
            conversation=conversation,
            turn_settings=turn_settings,
            state=state,
            question_vector=question_vector,
            recent_topics=recent_topics,
            model=model,
            curated=curated,
            decide=decide,
            sources_read=sources_read,
        )
        if (
            not duplicate.hit
            and curated_decision is not None
            and (curated_decision.similarity or -1.0) > (duplicate.similarity or -1.0)
        ):
            # Neither served: the audit log records the nearer of the two near misses (what a lower gate would serve).
            duplicate = curated_decision
    if plan.check_duplicates and duplicate is curated_decision and curated_decision.turn_id is not None:
        curated_match = CuratedMatch(
            curated_answer_id=curated.answer_of_phrasing[curated_decision.turn_id],
            question=next(c.question for c in curated.candidates if c.turn_id == curated_decision.turn_id),
        )
        # No QA pair of a conversation was matched: the phrasing is named by `curated_match` instead.
        duplicate = replace(duplicate, turn_id=None)
    facts = TurnFacts(
        policy=policy,
        intent=intent,
        behaviour=behaviour,
        force_refresh=force_refresh,
        plan=plan,
        duplicate=duplicate,
        match=match,
        recent_turns=state.recent_turns,
        recent_names_topic=recent_topics,
        consumed=state.consumed,
        next_turn_number=state.turn_count + 1,
        language=reply_language(asked or question),
    )
    return Judged(facts=facts, match_sources=match_sources, curated=curated_match)
