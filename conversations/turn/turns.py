"""The turn pipeline (`turn_ask`): load, embed, judge, decide (`turn_decision.turn_decide`), execute, persist.

Everything slow (embedding, Milvus, generation) happens before the transaction, so the row lock is held for a
few small writes only; two concurrent turns on one conversation both land, with distinct numbers."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings

from conversations.dedup import decisions
from conversations.models import (
    COUNT_MAX,
    AnswerState,
    Conversation,
    DedupScope,
    Granularity,
    Turn,
)
from conversations.turn import languages
from conversations.turn.answering import (
    AnswerGenerator,
    GeneratedAnswer,
    HistoryTurn,
    SourcePassage,
    answer_cites,
    answer_generator,
    answer_similarity_floor,
    context_tokens_of,
)
from conversations.turn.conversations import conversation_for
from conversations.turn.judge import CuratedMatch, Judged, conversation_model, question_intent, turn_judge
from conversations.turn.policy import TurnSettings, turn_settings_load
from conversations.turn.search_query import search_mode_choose
from conversations.turn.sources import (
    SourceRows,
    SourceView,
    content_hashes_of,
    source_view_of_hit,
    stored_source_rows_read,
)
from conversations.turn.state import (
    ConversationState,
    state_load,
)
from conversations.turn.turn_decision import (
    TurnDecision,
    TurnFacts,
    TurnKind,
    turn_decide,
)
from conversations.turn.turn_history import history_select, rewrite_applies
from conversations.turn.turn_write import TurnRecord, turn_after_commit, turn_persist
from kbplatform.errors import ApplicationError
from kbplatform.text import control_character_problem, has_visible_character
from retrieval.embeddings import (
    embed_query,
    embed_query_start,
    text_readable,
    token_count,
    token_counts,
)
from retrieval.embeddings import model_id as embedding_model_id
from retrieval.embeddings import model_identity as embedding_model_identity
from retrieval.selectors import (
    ChunkHit,
    IndexState,
    chunk_search,
    hits_of_distinct_content,
    index_state,
    retrieval_mode_resolve,
)
from tenants.models import Tenant

logger = logging.getLogger(__name__)

TOP_K = 5
QUESTION_MAX_CHARS = 4000


# --- the turn ---------------------------------------------------------------------------------------------------------


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
    # The standalone question a follow-up was rewritten into and decided with ("" when taken as asked).
    rewritten_question: str = ""
    # True when the turn generated no answer: it served a stored answer or a small-talk reply.
    served: bool = False
    # The curated answer the turn served (matched directly, or an earlier turn's copy of it); None otherwise.
    curated_answer_id: int | None = None


def _search(
    *,
    tenant: Tenant,
    conversation: Conversation,
    query_vector: np.ndarray,
    query_text: str,
    query_model_identity: str,
    retrieval_mode: str,
    excluded: list[int],
    excluded_content: Collection[str],
    granularity: str,
    min_results: int,
    hit_similarity: bool,
) -> tuple[list[ChunkHit], bool]:
    """Grouped search leaving out `excluded` and the passages of `excluded_content` (the texts the excluded turns
    showed, whichever document holds them now: empty when `excluded` is); relaxed (novel first, then the best
    already seen) when fewer than `min_results` remain. An empty exclusion list adds no clause. Raises
    EmbeddingModelMismatchError (409) when the knowledge base's vectors are another model's, before anything of the
    turn is written. Both searches rank in `retrieval_mode` (`search_query.search_mode_choose`'s; `query_text`: what
    `query_vector` embeds); `hit_similarity` gives their hits their cosine to it in every mode."""
    exclude_docs = excluded if granularity == Granularity.DOC else None
    exclude_chunks = excluded if granularity == Granularity.CHUNK else None
    hits = chunk_search(
        tenant=tenant,
        knowledge_base=conversation.knowledge_base,
        query_vector=query_vector,
        query_text=query_text,
        query_model_identity=query_model_identity,
        retrieval_mode=retrieval_mode,
        limit=TOP_K,
        exclude_document_ids=exclude_docs,
        exclude_chunk_ids=exclude_chunks,
        exclude_content_hashes=excluded_content,
        metadata_filter=conversation.metadata_filter,
        hit_similarity=hit_similarity,
    )
    if not excluded or not decisions.exclusion_relaxes(result_count=len(hits), min_results=min_results, wanted=TOP_K):
        return hits, False
    full = chunk_search(
        tenant=tenant,
        knowledge_base=conversation.knowledge_base,
        query_vector=query_vector,
        query_text=query_text,
        query_model_identity=query_model_identity,
        retrieval_mode=retrieval_mode,
        limit=TOP_K,
        metadata_filter=conversation.metadata_filter,
        hit_similarity=hit_similarity,
    )
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


def _question_checked(*, question: str, mode: str) -> str:
    """The question as the turn takes it (trimmed), or an ApplicationError (400) that says what is wrong with it."""
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
    return question


@dataclass
class _TurnAnswer:
    """What executing a turn's decision produced."""

    text: str = ""
    answer_tokens: int = 0
    context_tokens: int = 0
    sources: list[SourceView] = field(default_factory=list)
    source_chunks: dict[str, dict] = field(default_factory=dict)
    relaxed: bool = False
    searched_index: IndexState | None = None
    # A search in answer mode: the passages and the question the answer is still to be generated from.
    passages: list[SourcePassage] = field(default_factory=list)
    answer_question: str = ""
    # A search whose passages the generator cannot answer from: `text` is the turn's reply, nothing is generated.
    replied: bool = False


def _turn_execute(
    *,
    tenant: Tenant,
    conversation: Conversation,
    decision: TurnDecision,
    judged: Judged,
    question: str,
    question_vector: np.ndarray,
    model: str,
    mode: str,
    rows_read: SourceRows | None = None,
    hit_similarity: bool = False,
) -> _TurnAnswer:
    """Carry the decision out: the stored answer, the small-talk reply, or a search (whose answer, in `answer` mode, the
    caller generates: all at once, or streamed). `rows_read`: chunk rows read ahead, which give the excluded texts'
    hashes when they cover the exclusion window; `hit_similarity`: the search gives every hit its cosine to the
    question (what a similarity floor reads), whatever its mode."""
    if decision.kind == TurnKind.STORED:
        matched = decision.matched
        return _TurnAnswer(
            text=matched.answer,
            answer_tokens=matched.answer_tokens,
            sources=judged.match_sources,
            source_chunks=dict(matched.source_chunks),
        )
    if decision.kind == TurnKind.SMALLTALK:
        return _TurnAnswer(text=decision.smalltalk_reply, answer_tokens=token_count(decision.smalltalk_reply))
    search_vector, answer_question = question_vector, question
    recent, names_topic = judged.facts.recent_turns, judged.facts.recent_names_topic
    topic = decision.search_topic
    before = len(recent)  # the recent questions the searched one followed: all of them, or those before the topic
    if topic is not None:
        # A question asked before a model change is embedded again: the chunk index is the new model's.
        search_vector, answer_question = topic.vector, topic.question
        if not decisions.vectors_comparable(stored_model=topic.vector_model, current_model=model):
            search_vector = embed_query(topic.question, conversation_model(conversation))
        before = next(index for index, turn in enumerate(recent) if turn is topic)
    # The topic of "show me that again" is searched in the mode it was searched in when asked, so it shows the same.
    search_mode = search_mode_choose(
        question=answer_question,
        knowledge_base_mode=retrieval_mode_resolve(knowledge_base=conversation.knowledge_base),
        recent_questions=[turn.question for turn in recent[:before]],
        names_topic=names_topic[:before],
    )
    policy = judged.facts.policy
    excluded_content = content_hashes_of(
        tenant=tenant, chunk_ids=decision.excluded_content_chunk_ids, read_ahead=rows_read
    )
    # Every vector searched with here is the knowledge base's model's (a stored one of another model was embedded
    # again above); a knowledge base holding another model's vectors refuses the turn (409) before anything is written.
    query_model_identity = embedding_model_identity(conversation_model(conversation))
    hits, relaxed = _search(
        tenant=tenant,
        conversation=conversation,
        query_vector=search_vector,
        query_text=answer_question,
        retrieval_mode=search_mode,
        query_model_identity=query_model_identity,
        excluded=list(decision.applied_exclusion),
        excluded_content=excluded_content,
        granularity=policy.granularity,
        min_results=policy.min_results,
        hit_similarity=hit_similarity,
    )
    result = _TurnAnswer(
        relaxed=relaxed,
        searched_index=index_state(
            knowledge_base=conversation.knowledge_base, query_model_identity=query_model_identity
        ),
        sources=[source_view_of_hit(hit) for hit in hits],
        source_chunks={
            str(hit.chunk_id): {
                "hash": hit.content_hash,
                "score": hit.score,
                "similarity": hit.similarity,
                "document_id": hit.document_id,
            }
            for hit in hits
        },
    )
    result.passages = [
        SourcePassage(chunk_id=h.chunk_id, text=h.text, token_count=h.token_count, similarity=h.similarity)
        for h in hits
    ]
    result.answer_question = answer_question
    if mode != "answer":
        result.context_tokens = context_tokens_of(result.passages)
    return result


def _audit_event(
    *,
    decision: TurnDecision,
    facts: TurnFacts,
    answer: _TurnAnswer,
    elapsed_ms: float,
    curated: CuratedMatch | None,
    embedding_model: str,
) -> dict:
    """The audit event's fields of a turn: what was decided and why, under which policy and embedding model, what a
    served (or, in shadow mode, servable) stored answer saved, and the curated answer and phrasing the decision was
    about."""
    policy, duplicate, matched = facts.policy, decision.duplicate, decision.matched
    curated_answer_id = curated.curated_answer_id if curated else (matched.curated_answer_id if matched else None)
    return {
        "embedding_model": embedding_model,
        "curated_answer_id": curated_answer_id,
        "curated_answer_ref": curated_answer_id,
        "curated_question": curated.question if curated else "",
        "action": decision.audit_action,
        "intent": facts.intent,
        "reason": decision.reason[:200],
        "scope": policy.scope,
        "threshold": duplicate.gate if duplicate.gate is not None else policy.threshold,
        "question_window": policy.question_window,
        "exclusion_window": policy.exclusion_window,
        "granularity": policy.granularity,
        "excluded_count": len(decision.excluded),
        "relaxed": answer.relaxed,
        "shadow": decision.audit_shadow,
        "tokens_saved": min(COUNT_MAX, matched.context_tokens + matched.answer_tokens) if matched else 0,
        "ms_saved": max(0.0, matched.elapsed_ms - elapsed_ms) if matched else 0.0,
    }


@dataclass
class TurnPrepared:
    """A turn loaded, decided and executed up to its answer: what is left is generating the answer (when
    `answer_pending`) and recording the turn (`turn_record`). Everything that can refuse the turn with a 4xx has run."""

    started: float
    tenant: Tenant
    conversation: Conversation
    turn_settings: TurnSettings
    state: ConversationState
    model: str
    question: str  # as asked
    rewritten_question: str  # the standalone rewrite of a follow-up ("" when taken as asked)
    question_vector: np.ndarray  # of the question decided with: the rewrite when there is one
    mode: str
    judged: Judged
    decision: TurnDecision
    answer: _TurnAnswer
    generator: AnswerGenerator
    history: list[HistoryTurn]

    @property
    def answer_pending(self) -> bool:
        return self.decision.kind == TurnKind.SEARCH and self.mode == "answer" and not self.answer.replied


def _history_of(*, state: ConversationState) -> list[HistoryTurn]:
    """The conversation's recent answered exchanges the model is shown (`turn_history.history_select`: at most
    LLM_HISTORY_TURNS of them within LLM_HISTORY_TOKENS), oldest first."""
    exchanges = [(recent.question, recent.stored.answer) for recent in state.recent_turns if recent.stored is not None][
        -max(0, settings.LLM_HISTORY_TURNS) :
    ]
    if not exchanges or settings.LLM_HISTORY_TURNS <= 0:
        return []
    counts = token_counts([f"{question}\n{answer}" for question, answer in exchanges])
    chosen = history_select(
        exchanges=exchanges,
        token_counts=counts,
        max_turns=settings.LLM_HISTORY_TURNS,
        max_tokens=settings.LLM_HISTORY_TOKENS,
    )
    return [HistoryTurn(question=exchanges[i][0], answer=exchanges[i][1]) for i in chosen]


def _question_rewritten(
    *,
    turn_settings: TurnSettings,
    generator: AnswerGenerator,
    state: ConversationState,
    question: str,
    question_vector: np.ndarray,
    embedding: str | None = None,
) -> tuple[str, list[HistoryTurn] | None]:
    """The standalone rewrite of a follow-up (`turn_history.rewrite_applies`), or "" when the question is taken as
    asked; with the history it was read in when it was loaded (None when it was not needed). A failing answer service
    does not fail the turn: the question is then taken as asked (logged)."""
    if not (turn_settings.policy.rewrite_followups and generator.uses_history):
        return "", None
    _, behaviour = question_intent(
        question=question,
        question_vector=question_vector,
        turn_settings=turn_settings,
        readable=None,
        embedding=embedding,
    )
    if not rewrite_applies(
        enabled=True,
        generator_rewrites=True,
        question=question,
        behaviour=behaviour,
        has_history=any(recent.stored is not None for recent in state.recent_turns),
    ):
        return "", None
    history = _history_of(state=state)
    if not history:
        return "", history
    try:
        rewritten = generator.rewrite(question=question, history=history)
    except ApplicationError as exc:
        logger.warning("follow-up rewrite failed, question taken as asked: %s", exc.message)
        return "", history
    return (rewritten if rewritten.strip() and rewritten != question else ""), history


def _read_ahead_chunk_ids(*, policy: decisions.PolicyView, state: ConversationState) -> set[int]:
    """The chunks whose rows a turn may need once it has decided, read while the question is embedded: those cited by
    the stored answers the hot copy holds, when the policy looks for repeated questions at all (a hit in this
    conversation serves one of those answers, so its sources check needs no query of its own), and those the
    exclusion window holds, when exclusion applies (a search leaves their texts out, in whatever document)."""
    cited = (
        set()
        if policy.scope == DedupScope.OFF
        else {
            chunk_id
            for recent in state.recent_turns
            if recent.stored is not None
            for chunk_id in recent.stored.source_chunk_ids
        }
    )
    if not policy.exclusion_enabled or policy.shadow_mode:
        return cited
    shown = decisions.excluded_ids(
        consumed=state.consumed,
        granularity=Granularity.CHUNK,
        next_turn_number=state.turn_count + 1,
        window=policy.exclusion_window,
    )
    return cited.union(shown)


def _shows_nothing(*, answer: _TurnAnswer, decision: TurnDecision, language: str) -> None:
    """Make `answer` a turn that shows no passage and says why, when its generator cannot answer from them
    (`AnswerGenerator.answerable`). Showing none, it consumes none and cites none: a repeat of the question searches
    again (`MatchRefusal.NO_SOURCE`), perhaps once the knowledge base holds the answer. When the exclusion window left
    passages out and the search did not bring them back (a relaxed search shows the best of them again), the reply
    says so: what answers the question may be among what the conversation has already shown. The reply is in the
    question's `language`."""
    excluded = bool(decision.applied_exclusion or decision.excluded_content_chunk_ids) and not answer.relaxed
    answer.sources, answer.source_chunks, answer.passages = [], {}, []
    answer.text = languages.reply(languages.NOTHING_NEW if excluded else languages.NOTHING_FOUND, language)
    answer.answer_tokens, answer.context_tokens = token_count(answer.text), 0
    answer.replied = True


def turn_prepare(
    *,
    tenant: Tenant,
    conversation_id: int,
    question: str,
    force_refresh: bool = False,
    mode: str = "answer",
    generator: AnswerGenerator | None = None,
    allowed_knowledge_base_id: int | None = None,
) -> TurnPrepared:
    """Load, embed, (rewrite a follow-up,) judge, decide (`turn_decide`) and execute a turn up to its answer. Every
    refusal (400, 404, 410, 409) is raised here, before anything is written or streamed."""
    started = time.perf_counter()
    question = _question_checked(question=question, mode=mode)
    conversation = conversation_for(
        tenant=tenant, conversation_id=conversation_id, allowed_knowledge_base_id=allowed_knowledge_base_id
    )
    # The knowledge base's model embeds the question while this thread reads what the turn needs of the database and
    # Redis: neither needs the other. A refusal below (410) leaves the embedding to finish unread.
    model_name = conversation_model(conversation)
    embedding = embed_query_start(question, model_name)
    turn_settings = turn_settings_load(tenant=tenant, model=model_name)
    state = state_load(conversation=conversation)
    rows_read = stored_source_rows_read(
        tenant=tenant, chunk_ids=_read_ahead_chunk_ids(policy=turn_settings.policy, state=state)
    )
    model = embedding_model_id(model_name)
    generator = generator or answer_generator()
    question_vector = embedding.result()
    rewritten, history = _question_rewritten(
        turn_settings=turn_settings,
        generator=generator,
        state=state,
        question=question,
        question_vector=question_vector,
        embedding=model_name,
    )
    if rewritten:
        question_vector = embed_query(rewritten, model_name)
    decided = rewritten or question
    judged = turn_judge(
        tenant=tenant,
        conversation=conversation,
        turn_settings=turn_settings,
        state=state,
        question=decided,
        question_vector=question_vector,
        model=model,
        force_refresh=force_refresh,
        sources_read=rows_read,
        asked=question,
    )
    decision = turn_decide(judged.facts)
    if history is None:
        # Read only for an answer still to be generated, by a generator that reads it: a served turn tokenizes nothing.
        generates = decision.kind == TurnKind.SEARCH and mode == "answer"
        history = _history_of(state=state) if generates and generator.uses_history else []
    # The floor of the answer's passages' cosine, when its generator reads one: only then are the hits' vectors asked
    # for (a lexical or fused search's scores say nothing of it).
    similarity_floor = answer_similarity_floor(model_name) if generator.uses_similarity_floor else None
    answer = _turn_execute(
        tenant=tenant,
        conversation=conversation,
        decision=decision,
        judged=judged,
        question=decided,
        question_vector=question_vector,
        model=model,
        mode=mode,
        rows_read=rows_read,
        hit_similarity=mode == "answer" and similarity_floor is not None,
    )
    if (
        decision.kind == TurnKind.SEARCH
        and mode == "answer"
        and answer.passages
        and not generator.answerable(
            question=answer.answer_question,
            passages=answer.passages,
            question_read=text_readable(answer.answer_question, model_name),
            similarity_floor=similarity_floor,
        )
    ):
        _shows_nothing(answer=answer, decision=decision, language=judged.facts.language)
    return TurnPrepared(
        started=started,
        tenant=tenant,
        conversation=conversation,
        turn_settings=turn_settings,
        state=state,
        model=model,
        question=question,
        rewritten_question=rewritten,
        question_vector=question_vector,
        mode=mode,
        judged=judged,
        decision=decision,
        answer=answer,
        generator=generator,
        history=history,
    )


def _answer_cites_passages(*, prepared: TurnPrepared, answer_state: str) -> bool:
    """False for a complete answer generated from passages that cites none of them (`answering.answer_cites`): the
    model saying they do not hold the answer. Stored answers, small talk and turns that show no passage keep theirs."""
    answer = prepared.answer
    generated = prepared.decision.kind == TurnKind.SEARCH and prepared.mode == "answer" and bool(answer.passages)
    if not generated or answer_state != AnswerState.COMPLETE:
        return True
    return answer_cites(answer.text, len(answer.passages))


def turn_answer_apply(*, prepared: TurnPrepared, generated: GeneratedAnswer) -> None:
    """Take the generated answer into the turn about to be recorded."""
    prepared.answer.text = generated.text
    prepared.answer.answer_tokens = generated.answer_tokens
    prepared.answer.context_tokens = generated.context_tokens


def turn_record(
    *,
    prepared: TurnPrepared,
    answer_state: str = AnswerState.COMPLETE,
    answer_partial: str = "",
    answer_error: str = "",
) -> TurnOutcome:
    """Persist the turn (QA pair, consumed items and audit event in one transaction), refresh the hot copy, and say
    what the client is answered. A turn whose answer did not complete (`answer_state`) is recorded with no answer,
    what was streamed of it in `answer_partial`: it never serves a later duplicate."""
    tenant, conversation, decision, answer = prepared.tenant, prepared.conversation, prepared.decision, prepared.answer
    policy, facts, mode = prepared.turn_settings.policy, prepared.judged.facts, prepared.mode
    if answer_state != AnswerState.COMPLETE:
        answer.text, answer.answer_tokens = "", 0
        if not answer.context_tokens:
            answer.context_tokens = context_tokens_of(answer.passages)
    elapsed_ms = (time.perf_counter() - prepared.started) * 1000
    duplicate, matched = decision.duplicate, decision.matched
    served_curated = matched.curated_answer_id if matched is not None and decision.kind == TurnKind.STORED else None
    turn = turn_persist(
        TurnRecord(
            tenant=tenant,
            conversation=conversation,
            ttl_seconds=policy.ttl_seconds,
            question=prepared.question,
            question_vector=prepared.question_vector,
            question_vector_model=prepared.model,
            partial_index=answer.searched_index is not None and answer.searched_index.partial,
            intent=facts.intent,
            mode=mode,
            answer=answer.text,
            answer_tokens=answer.answer_tokens,
            sources=answer.sources,
            source_chunks=answer.source_chunks,
            context_tokens=answer.context_tokens,
            action=decision.action,
            decision=duplicate,
            matched=matched,
            elapsed_ms=elapsed_ms,
            event=_audit_event(
                decision=decision,
                facts=facts,
                answer=answer,
                elapsed_ms=elapsed_ms,
                curated=prepared.judged.curated,
                embedding_model=conversation_model(conversation),
            ),
            answer_state=answer_state,
            answer_partial=answer_partial,
            answer_error=answer_error,
            rewritten_question=prepared.rewritten_question,
            curated_answer_id=served_curated,
            answer_cites=_answer_cites_passages(prepared=prepared, answer_state=answer_state),
        )
    )
    turn_after_commit(
        tenant=tenant,
        conversation=conversation,
        state=prepared.state,
        turn=turn,
        policy=policy,
        question_vector=prepared.question_vector,
    )
    served = decision.kind != TurnKind.SEARCH
    return TurnOutcome(
        turn=turn,
        answer=answer.text if (mode == "answer" or served) else None,
        sources=answer.sources,
        action=decision.action,
        intent=facts.intent,
        similarity=duplicate.similarity,
        matched_turn_id=duplicate.turn_id if duplicate.hit else None,
        excluded_count=len(decision.excluded),
        relaxed=answer.relaxed,
        shadow_action=decision.shadow_action,
        reason=decision.reason,
        index=answer.searched_index,
        rewritten_question=prepared.rewritten_question,
        served=served,
        curated_answer_id=served_curated,
    )


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
    """Take one turn of a conversation: load, embed, judge, decide (`turn_decide`), execute, persist. A stored answer
    to a repeated question, or a fresh search (minus what the last turns showed) and answer. The QA pair, consumed
    items and audit event are written atomically, before the answer goes out; an answer service that fails is a 502
    or 504 with nothing written. `turn_stream` is the same turn streamed as it is made."""
    prepared = turn_prepare(
        tenant=tenant,
        conversation_id=conversation_id,
        question=question,
        force_refresh=force_refresh,
        mode=mode,
        generator=generator,
        allowed_knowledge_base_id=allowed_knowledge_base_id,
    )
    if prepared.answer_pending:
        turn_answer_apply(
            prepared=prepared,
            generated=prepared.generator.generate(
                question=prepared.answer.answer_question, passages=prepared.answer.passages, history=prepared.history
            ),
        )
    return turn_record(prepared=prepared)
