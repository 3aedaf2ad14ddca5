from __future__ import annotations

import functools
import logging
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from kbplatform.errors import ConflictError
from kbplatform.row_reads import values_by_keys
from retrieval import embeddings, vectorstore
from retrieval.embeddings import IDENTITY_NAME_CHARS, identity_name
from retrieval.models import (
    REINDEX_FROM_UNRECORDED,
    Chunk,
    Document,
    DocumentStatus,
    KnowledgeBase,
    ReindexStatus,
    TextIndexStatus,
)
from tenants.models import Tenant

logger = logging.getLogger(__name__)

EMBEDDING_MODEL_MISMATCH = "embedding_model_mismatch"


class IndexStatus(StrEnum):
    """How a knowledge base's chunk vectors stand against a query embedded by a given model."""

    CURRENT = "current"  # every vector is the query's model's
    REINDEXING = "reindexing"  # a re-index to the query's model runs: vectors not rebuilt yet may be another's
    # A re-index moving the knowledge base to the query's model stopped part way: the vectors it did not reach are the
    # old model's. Refused like OTHER_MODEL (a failed rebuild that kept the model is CURRENT: every vector is its).
    REINDEX_FAILED = "reindex_failed"
    OTHER_MODEL = "other_model"  # the vectors are another model's: scores against this query mean nothing


@dataclass(frozen=True)
class IndexState:
    status: IndexStatus
    reindex_progress: float | None  # while a re-index runs: the share of chunks already rebuilt
    knowledge_base_model: str  # the model the knowledge base records: its identity, or its name when none was recorded

    @property
    def partial(self) -> bool:
        """Whether a search may miss what the index does not hold yet (vectors not rebuilt are another model's, and
        rank at random): results are served, flagged, but an answer made from them is not reused. REINDEXING in
        practice (REINDEX_FAILED is refused before anything is searched)."""
        return self.status in (IndexStatus.REINDEXING, IndexStatus.REINDEX_FAILED)


class EmbeddingModelMismatchError(ConflictError):
    """A search whose query vector is not of the model that made the knowledge base's vectors: refused, since
    cosines between two models' vectors of one size are numbers with no meaning and would be served as results."""


# The statuses a search refuses (EmbeddingModelMismatchError): the vectors ranked would be, all or in part, another
# model's, with no end in sight (no re-index runs).
REFUSED_STATUSES = (IndexStatus.OTHER_MODEL, IndexStatus.REINDEX_FAILED)


def knowledge_base_records_model(*, knowledge_base: KnowledgeBase, model_identity: str) -> bool:
    """Whether the model the knowledge base records is `model_identity`: by identity, or by name when none was
    recorded (made before identities were, or holding no vector yet), as ingestion adopts it."""
    recorded = knowledge_base.embedding_model_identity
    if recorded:
        return recorded == model_identity
    return knowledge_base.embedding_model[:IDENTITY_NAME_CHARS] == identity_name(model_identity)


def index_state(*, knowledge_base: KnowledgeBase, query_model_identity: str) -> IndexState:
    """How the knowledge base's vectors stand against a query of the model `query_model_identity`
    (`embeddings.model_identity()`). Pure: reads the row as loaded, so a turn pays no query for it.

    A knowledge base with no recorded identity (made before identities were, or holding no vector yet) is judged by
    its model's name, as ingestion adopts it. A re-index moves the recorded identity to the new model when its worker
    takes it up, so a re-index still queued (or run by workers of another model) is `OTHER_MODEL`, not `REINDEXING`.
    A re-index that failed is `REINDEX_FAILED` only when it was moving the knowledge base from another model
    (`reindex_from_model_identity`): one that kept the model left every vector that model's, and is `CURRENT`."""
    recorded = knowledge_base.embedding_model_identity
    same_model = knowledge_base_records_model(knowledge_base=knowledge_base, model_identity=query_model_identity)
    running = knowledge_base.reindex_status == ReindexStatus.RUNNING
    if not same_model:
        status = IndexStatus.OTHER_MODEL
    elif running:
        status = IndexStatus.REINDEXING
    elif knowledge_base.reindex_status == ReindexStatus.FAILED and knowledge_base.reindex_from_model_identity:
        status = IndexStatus.REINDEX_FAILED
    else:
        status = IndexStatus.CURRENT
    return IndexState(
        status=status,
        reindex_progress=float(knowledge_base.reindex_progress) if running else None,
        knowledge_base_model=recorded or knowledge_base.embedding_model,
    )


def knowledge_bases_awaiting_reindex(
    *, knowledge_bases: QuerySet[KnowledgeBase], query_model_identity: str
) -> QuerySet[KnowledgeBase]:
    """Those of `knowledge_bases` (scoped by the caller) that a search with a query of `query_model_identity` refuses:
    `index_state` says `OTHER_MODEL` or `REINDEX_FAILED` and they hold a chunk. The ones that need a re-index onto that
    model, including those whose re-index is queued but not yet taken up by a worker, and those whose re-index onto it
    stopped part way. One query."""
    name = identity_name(query_model_identity)
    # index_state compares a name cut to IDENTITY_NAME_CHARS: a name that long was cut, so any longer one matches.
    same_name = Q(embedding_model__startswith=name) if len(name) >= IDENTITY_NAME_CHARS else Q(embedding_model=name)
    other_model = (~Q(embedding_model_identity="") & ~Q(embedding_model_identity=query_model_identity)) | (
        Q(embedding_model_identity="") & ~same_name
    )
    mixed_models = Q(reindex_status=ReindexStatus.FAILED) & ~Q(reindex_from_model_identity="")
    holds_chunks = Exists(Chunk.objects.filter(tenant_id=OuterRef("tenant_id"), knowledge_base_id=OuterRef("pk")))
    return knowledge_bases.filter(other_model | mixed_models, holds_chunks)


def knowledge_bases_awaiting_reindex_onto_their_models(
    *, knowledge_bases: QuerySet[KnowledgeBase]
) -> QuerySet[KnowledgeBase]:
    """`knowledge_bases_awaiting_reindex` with each knowledge base judged against the model it is searched with
    (`embeddings.knowledge_base_model`: its own when offered, else the primary model). Raises EmbeddingModelUnavailable
    when an offered model cannot be read."""
    offered = embeddings.offered_models()
    primary = embeddings.primary_model()
    awaiting = Q(pk__in=[])
    for model in offered:
        named = Q(embedding_model=model)
        if model == primary:
            named |= ~Q(embedding_model__in=offered)
        of_model = knowledge_bases_awaiting_reindex(
            knowledge_bases=knowledge_bases.filter(named), query_model_identity=embeddings.model_identity(model)
        )
        awaiting |= Q(pk__in=of_model.values("pk"))
    return knowledge_bases.filter(awaiting)


def embedding_model_mismatch(
    *, knowledge_base: KnowledgeBase, state: IndexState, query_model_identity: str
) -> EmbeddingModelMismatchError:
    """The refusal of a search of `knowledge_base` with a query of another model, or of a knowledge base whose re-index
    onto the query's model stopped part way: names both models and what to do."""
    query_name = identity_name(query_model_identity)
    if state.status == IndexStatus.REINDEX_FAILED:
        return _mixed_models_refusal(
            knowledge_base=knowledge_base, state=state, query_model_identity=query_model_identity
        )
    recorded_name = identity_name(state.knowledge_base_model) or state.knowledge_base_model
    made_by = (
        f"another version of {query_name!r} (the model's files changed since)"
        if recorded_name == query_name
        else repr(recorded_name)
    )
    message = (
        f"The knowledge base's vectors were made by {made_by}, but this server embeds queries with {query_name!r}: "
        "scores between two models' vectors mean nothing, so the search was refused. "
    )
    if knowledge_base.reindex_status == ReindexStatus.RUNNING:
        message += (
            "A re-index of the knowledge base is queued and has not started yet: search again once it has "
            '(its reindex_status stays "running" and reindex_progress moves). If this lasts, check that the workers '
            "run the same model as this server (EMBEDDING_MODEL_PATH)."
        )
    else:
        message += (
            f"Re-index the knowledge base to move it to {query_name!r} "
            f"(POST /api/v1/knowledge-bases/{knowledge_base.pk}/reindex/ with an admin key, or the admin's "
            "re-index action; the workers, which run it, must run that model too); searches are served again, "
            "flagged, as soon as the re-index has started."
        )
    return _mismatch_error(
        message, knowledge_base=knowledge_base, state=state, query_model_identity=query_model_identity
    )


def _mismatch_error(
    message: str,
    *,
    knowledge_base: KnowledgeBase,
    state: IndexState,
    query_model_identity: str,
    **extra: str,
) -> EmbeddingModelMismatchError:
    return EmbeddingModelMismatchError(
        message,
        extra={
            "code": EMBEDDING_MODEL_MISMATCH,
            "knowledge_base": knowledge_base.pk,
            "knowledge_base_model": state.knowledge_base_model,
            **extra,
            "query_model": query_model_identity,
            "reindex_status": knowledge_base.reindex_status,
            "reindex_progress": float(knowledge_base.reindex_progress),
        },
    )


def _mixed_models_refusal(
    *, knowledge_base: KnowledgeBase, state: IndexState, query_model_identity: str
) -> EmbeddingModelMismatchError:
    query_name = identity_name(query_model_identity)
    moved_from = knowledge_base.reindex_from_model_identity
    if moved_from == REINDEX_FROM_UNRECORDED:
        old = "the model it had before (not recorded: the re-index began before that was kept)"
    elif (identity_name(moved_from) or moved_from) == query_name:
        old = f"the earlier version of {query_name!r} (the model's files changed since)"
    else:
        old = repr(identity_name(moved_from) or moved_from)
    reason = knowledge_base.reindex_error.strip().rstrip(".") or "no reason recorded"
    message = (
        f"The re-index moving the knowledge base's vectors to {query_name!r} stopped part way ({reason}): the "
        f"vectors it did not reach are still {old}'s, and scores between two models' vectors mean nothing, so the "
        "search was refused. Re-index the knowledge base again "
        f"(POST /api/v1/knowledge-bases/{knowledge_base.pk}/reindex/ with an admin key, or the admin's re-index "
        "action): it goes quickly through the vectors already rebuilt, and searches are served again, flagged, as "
        "soon as it has started."
    )
    return _mismatch_error(
        message,
        knowledge_base=knowledge_base,
        state=state,
        query_model_identity=query_model_identity,
        reindex_from_model=moved_from,
    )


@dataclass(frozen=True)
class ChunkHit:
    """A search result: the Milvus hit joined with its chunk row (the database is the source of truth)."""

    chunk_id: int
    document_id: int
    score: float
    text: str
    position: int
    token_count: int
    content_hash: str
    external_id: str | None
    document_external_id: str | None
    document_title: str
    # The query's cosine to the chunk's vector (`vectorstore.SearchHit.similarity`): how near, where `score` is how it
    # ranked in the search's mode. None when the search did not ask for it (`chunk_search`'s `hit_similarity`).
    similarity: float | None = None


FULL_TEXT_UNAVAILABLE = "full_text_unavailable"


class FullTextUnavailableError(ConflictError):
    """A full-text or hybrid search of a knowledge base whose chunks carry no text in Milvus yet (made before full
    text, not yet moved over by `manage.py text_index`): refused with what to do, rather than served by vectors alone
    under another mode's name."""


def full_text_unavailable(*, knowledge_base: KnowledgeBase, mode: str) -> FullTextUnavailableError:
    moving = knowledge_base.text_index == TextIndexStatus.BUILDING
    message = (
        f"The knowledge base cannot be searched in {mode!r} mode yet: its chunks' text is not in the search index "
        "(it was indexed before full-text search existed), so only 'semantic' search is available. "
        + (
            f"Its move to full text is running ({knowledge_base.text_index_progress:.0%} done); "
            "ask again once its text_index is 'ready'."
            if moving
            else "An operator moves it over with `manage.py text_index` (online: it keeps answering meanwhile)."
        )
    )
    return FullTextUnavailableError(
        message,
        extra={
            "code": FULL_TEXT_UNAVAILABLE,
            "knowledge_base": knowledge_base.pk,
            "retrieval_mode": mode,
            "text_index": knowledge_base.text_index,
            "text_index_progress": float(knowledge_base.text_index_progress),
        },
    )


def retrieval_mode_resolve(*, knowledge_base: KnowledgeBase, requested: str | None = None) -> str:
    """The mode a search of `knowledge_base` runs in: `requested`, else the knowledge base's `retrieval_mode`. A mode
    that needs the chunks' text, on a knowledge base whose text is not in Milvus yet, is refused when asked for
    (FullTextUnavailableError, a 409) and is `semantic` when it is only the setting, as its API field says (a setting
    the services do not accept there; rows the last release inserted during an upgrade may hold it). Pure."""
    mode = requested or knowledge_base.retrieval_mode
    if mode not in vectorstore.RETRIEVAL_MODES:
        raise ValueError(f"unknown retrieval mode {mode!r}")
    if mode != vectorstore.SEMANTIC and knowledge_base.text_index != TextIndexStatus.READY:
        if requested:
            raise full_text_unavailable(knowledge_base=knowledge_base, mode=mode)
        return vectorstore.SEMANTIC
    return mode


def query_retrieval_mode(*, knowledge_base: KnowledgeBase, mode: str, query_text: str) -> str:
    """The mode a search of `query_text` runs in, in `mode` as `retrieval_mode_resolve` gave it: `full_text` for a
    hybrid search of a query the knowledge base's model cannot read (`embeddings.text_readable`: most of its word
    pieces unknown, as Chinese and Thai are to all-MiniLM-L6-v2), `mode` otherwise. Such a query's vector says next to
    nothing of what it asks (every such text looks alike to the model), and rank fusion gives the pages it lands near
    as much say as the pages that hold the query's words: BM25 alone ranks them (docs/ingestion.md, "A question the
    model cannot read"). Semantic and full-text searches run as asked."""
    if mode != vectorstore.HYBRID or not query_text:
        return mode
    model = embeddings.knowledge_base_model(knowledge_base.embedding_model)
    return mode if embeddings.text_readable(query_text, model) else vectorstore.FULL_TEXT


# Hits asked of Milvus beyond `limit`, so a result list still fills up when copies of a passage are dropped from it.
CONTENT_REPEAT_SLACK = 5


def first_search_limit(*, mode: str, limit: int) -> int:
    """How many hits `chunk_search` first asks Milvus for, for a page of `limit` in `mode`. A vector search asks for
    `limit`: its best `limit` are the same whatever it is asked for, so the slack for dropped hits is asked for only
    when a full page lost some (a repeated passage, a row gone or disabled). A search that fuses BM25 always asks with
    the slack: each side's candidates are the fusion's input, so its best `limit` depend on how many each side
    brings."""
    return limit if mode == vectorstore.SEMANTIC else limit + CONTENT_REPEAT_SLACK


def hits_of_distinct_content(hits: Iterable[ChunkHit], *, shown_content_hashes: Collection[str] = ()) -> list[ChunkHit]:
    """`hits` in their order without the passages already among them or already shown: a hit whose text (by
    `content_hash`) is that of a better hit, or one of `shown_content_hashes`. The same file uploaded twice, or a
    passage copied into several documents, are other documents to Milvus and to `doc_id` exclusion: without this a
    result list shows the passage twice, and the turn after shows its copy as new. Pure."""
    seen = set(shown_content_hashes)
    distinct = []
    for hit in hits:
        if hit.content_hash in seen:
            continue
        seen.add(hit.content_hash)
        distinct.append(hit)
    return distinct


def chunk_content_hashes(*, tenant: Tenant, chunk_ids: Iterable[int]) -> set[str]:
    """The content hashes of the tenant's chunks among `chunk_ids` (chunks deleted since are left out)."""
    chunk_ids = list(chunk_ids)
    if not chunk_ids:
        return set()
    return set(Chunk.objects.for_tenant(tenant).filter(pk__in=chunk_ids).values_list("content_hash", flat=True))


def chunk_search(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    query_vector: Sequence[float],
    query_model_identity: str,
    limit: int,
    exclude_document_ids: Iterable[int] | None = None,
    exclude_chunk_ids: Iterable[int] | None = None,
    exclude_content_hashes: Collection[str] = (),
    group_by_document: bool = True,
    query_text: str = "",
    retrieval_mode: str | None = None,
    metadata_filter: Mapping[str, object] | None = None,
    hit_similarity: bool = False,
) -> list[ChunkHit]:
    """Best chunks of one knowledge base for a query vector, best first, at most one per document when
    grouped, and never two of the same text (`hits_of_distinct_content`; nor one of `exclude_content_hashes`).
    Hits whose chunk row no longer exists (deleted since indexing), or is not the chunk the vector was written for
    (its id handed out again, e.g. after restoring an older database), are dropped, and so are disabled chunks
    (their vectors are deleted when they are disabled; this holds even where that delete has not reached Milvus).
    `metadata_filter` (`retrieval.metadata.metadata_filter_validate`) keeps only chunks of documents whose metadata
    matches, applied inside Milvus with the tenant clause, before grouping and exclusion.

    `query_model_identity` names the model that made `query_vector`: when the knowledge base's vectors are another
    model's, all or in part (`index_state` says `OTHER_MODEL`, or `REINDEX_FAILED` after a re-index onto the query's
    model stopped part way), the search raises EmbeddingModelMismatchError (a 409) rather than rank them; a knowledge
    base holding no chunk has no vector to rank and gives no hit. During a re-index to the
    query's model the search runs: the caller reports `index_state` with the results.

    Ranked in `retrieval_mode_resolve`'s mode (`retrieval_mode`, else the knowledge base's) as `query_retrieval_mode`
    reads it for `query_text`: by `query_vector`, by BM25 of `query_text` (the text `query_vector` was embedded from),
    or both fused. Grouping, exclusions and the tenant's filter are the same in every mode: each field search carries
    the whole filter. `hit_similarity`: give every hit its cosine to `query_vector` in every mode
    (`vectorstore.vectors_search`; a semantic hit always has it)."""
    mode = query_retrieval_mode(
        knowledge_base=knowledge_base,
        mode=retrieval_mode_resolve(knowledge_base=knowledge_base, requested=retrieval_mode),
        query_text=query_text,
    )
    if knowledge_base.tenant_id != tenant.pk:
        raise ValueError("knowledge base of another tenant")
    state = index_state(knowledge_base=knowledge_base, query_model_identity=query_model_identity)
    if len(query_vector) != knowledge_base.embedding_dimension and state.status not in REFUSED_STATUSES:
        # A query of another size than the knowledge base's vectors is of another model, whatever the row records.
        state = replace(state, status=IndexStatus.OTHER_MODEL)
    if state.status in REFUSED_STATUSES:
        if not Chunk.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).exists():
            return []
        logger.warning(
            "search refused: knowledge base %s of tenant %s holds vectors of %s, the query is of %s (reindex %s%s)",
            knowledge_base.pk,
            tenant.pk,
            state.knowledge_base_model,
            query_model_identity,
            knowledge_base.reindex_status,
            f" from {knowledge_base.reindex_from_model_identity}" if knowledge_base.reindex_from_model_identity else "",
        )
        raise embedding_model_mismatch(
            knowledge_base=knowledge_base, state=state, query_model_identity=query_model_identity
        )
    search = functools.partial(
        vectorstore.vectors_search,
        tenant_id=tenant.pk,
        knowledge_base_id=knowledge_base.pk,
        query_vector=query_vector,
        dimension=knowledge_base.embedding_dimension,
        exclude_document_ids=exclude_document_ids,
        exclude_chunk_ids=exclude_chunk_ids,
        group_by_document=group_by_document,
        mode=mode,
        query_text=query_text,
        analyzer=knowledge_base.text_analyzer,
        full_text=knowledge_base.text_index == TextIndexStatus.READY,
        dense_weight=knowledge_base.hybrid_dense_weight,
        metadata_filter=metadata_filter,
        hit_similarity=hit_similarity,
    )
    asked = first_search_limit(mode=mode, limit=limit)
    hits = search(limit=asked)
    if not hits:
        vectors_lost_check(tenant=tenant, knowledge_base=knowledge_base)
        return []
    results = _hits_shown(tenant=tenant, knowledge_base=knowledge_base, hits=hits, shown=exclude_content_hashes)
    if len(results) < limit and len(hits) == asked < limit + CONTENT_REPEAT_SLACK:
        hits = search(limit=limit + CONTENT_REPEAT_SLACK)
        results = _hits_shown(tenant=tenant, knowledge_base=knowledge_base, hits=hits, shown=exclude_content_hashes)
    return results[:limit]


_HIT_COLUMNS = (
    "pk",
    "knowledge_base_id",
    "document_id",
    "text",
    "position",
    "token_count",
    "content_hash",
    "external_id",
    "document__external_id",
    "document__title",
)


def _hits_shown(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, hits: list[vectorstore.SearchHit], shown: Collection[str]
) -> list[ChunkHit]:
    """`hits` with their rows, in their order: without those whose chunk row is gone, disabled or no longer the chunk
    the vector was written for, and without repeated or `shown` passages (`hits_of_distinct_content`)."""
    # The columns a hit shows, and no more: a document row holds its whole source text.
    rows = {
        row[0]: row
        for row in values_by_keys(
            model=Chunk,
            columns=_HIT_COLUMNS,
            keys=[hit.chunk_id for hit in hits],
            tenant_id=tenant.pk,
            true=("enabled",),
        )
    }
    results = []
    for hit in hits:
        row = rows.get(hit.chunk_id)
        if row is None or (row[1], row[2]) != (knowledge_base.pk, hit.document_id):
            continue
        _, _, document_id, text, position, token_count, content_hash, external_id, document_external_id, title = row
        results.append(
            ChunkHit(
                chunk_id=hit.chunk_id,
                document_id=document_id,
                score=hit.score,
                similarity=hit.similarity,
                text=text,
                position=position,
                token_count=token_count,
                content_hash=content_hash,
                external_id=external_id,
                document_external_id=document_external_id,
                document_title=title,
            )
        )
    return hits_of_distinct_content(results, shown_content_hashes=shown)


VECTORS_LOST_MESSAGE = (
    "This knowledge base's search index is being rebuilt (the vector store lost its data); retry in a moment."
)


def vectors_lost_check(*, tenant: Tenant, knowledge_base: KnowledgeBase) -> None:
    """After a search that found nothing: raise VectorStoreUnavailable (a 503, so a turn writes nothing) when Milvus
    holds no vector of a knowledge base whose documents the database says are indexed. That is a Milvus that lost
    its data (the collection is made again, empty, on the next call), not a query that matched nothing: an answer
    from it would be one with no sources, recorded as if the knowledge base had none. It lasts until
    `manage.py milvus_rebuild` has written the knowledge base's vectors again. One count, on an empty search only."""
    indexed = (
        Chunk.objects.for_tenant(tenant)
        .filter(knowledge_base=knowledge_base, document__status=DocumentStatus.INDEXED)
        .exists()
    )
    if not indexed:
        return
    count = vectorstore.vectors_count(
        tenant_id=tenant.pk,
        knowledge_base_id=knowledge_base.pk,
        dimension=knowledge_base.embedding_dimension,
        full_text=knowledge_base.text_index == TextIndexStatus.READY,
    )
    if count == 0:
        raise vectorstore.VectorStoreUnavailable(
            f"no vector of knowledge base {knowledge_base.pk} of tenant {tenant.pk} in Milvus, though the database "
            "holds its indexed chunks: run `manage.py milvus_rebuild`",
            message=VECTORS_LOST_MESSAGE,
        )


def knowledge_bases_indexed_sample(*, count: int) -> list[KnowledgeBase]:
    """Up to `count` knowledge bases, across tenants (newest first), holding an enabled chunk of an indexed document:
    ones whose vectors Milvus must hold, what the health check counts there."""
    indexed = Chunk.objects.unscoped().filter(
        knowledge_base=OuterRef("pk"), enabled=True, document__status=DocumentStatus.INDEXED
    )
    return list(KnowledgeBase.objects.unscoped().filter(Exists(indexed)).order_by("-pk")[:count])


def knowledge_base_vectors_count(*, knowledge_base: KnowledgeBase) -> int:
    """The vectors Milvus holds of the knowledge base, in the chunk collection it is searched in."""
    return vectorstore.vectors_count(
        tenant_id=knowledge_base.tenant_id,
        knowledge_base_id=knowledge_base.pk,
        dimension=knowledge_base.embedding_dimension,
        full_text=knowledge_base.text_index == TextIndexStatus.READY,
    )


@dataclass(frozen=True)
class TextSettings:
    """What a chunk's vector row needs of its knowledge base: the analyser of its text and where it is written."""

    analyzer: str
    text_index: str


def knowledge_base_text_settings(*, tenant_id: int, knowledge_base_ids: Iterable[int]) -> dict[int, TextSettings]:
    """Knowledge base id -> its `TextSettings` as the database holds them now (one query): a writer asks just before it
    writes, so a move to the full-text collection that started meanwhile has its chunks written to both."""
    rows = KnowledgeBase.objects.filter(tenant_id=tenant_id, pk__in=set(knowledge_base_ids)).values_list(
        "pk", "text_analyzer", "text_index"
    )
    return {pk: TextSettings(analyzer=analyzer, text_index=text_index) for pk, analyzer, text_index in rows}


def knowledge_base_list(*, tenant: Tenant, only_id: int | None = None) -> list[KnowledgeBase]:
    """The tenant's knowledge bases; with `only_id` (a key limited to one knowledge base), just that one."""
    queryset = KnowledgeBase.objects.for_tenant(tenant)
    if only_id is not None:
        queryset = queryset.filter(pk=only_id)
    return list(queryset.order_by("name"))


def knowledge_base_get(*, tenant: Tenant, knowledge_base_id: int, only_id: int | None = None) -> KnowledgeBase | None:
    """The knowledge base if this tenant (and, for a limited key, this key) may reach it; None otherwise, so
    another tenant's id and a forbidden one look the same: not found."""
    if only_id is not None and int(knowledge_base_id) != only_id:
        return None
    return KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base_id).first()


def document_get(*, tenant: Tenant, document_id: int, only_knowledge_base_id: int | None = None) -> Document | None:
    queryset = Document.objects.for_tenant(tenant).select_related("knowledge_base").filter(pk=document_id)
    if only_knowledge_base_id is not None:
        queryset = queryset.filter(knowledge_base_id=only_knowledge_base_id)
    return queryset.first()


def document_list(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    statuses: Collection[str] | None = None,
    external_id: str | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
) -> QuerySet[Document]:
    """The knowledge base's documents, newest first (by id among those created at the same instant, so pages of a
    bulk upload neither repeat nor skip one). `statuses`: any of them (none or empty: every status); `created_to` is
    exclusive. A knowledge base of another tenant has none. The stored sources (`source_text`, `source_chunks`:
    megabytes for a large text or pre-chunked document) are not loaded."""
    documents = (
        Document.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).defer("source_text", "source_chunks")
    )
    if statuses:
        documents = documents.filter(status__in=sorted(statuses))
    if external_id is not None:
        documents = documents.filter(external_id=external_id)
    if created_from is not None:
        documents = documents.filter(created_at__gte=created_from)
    if created_to is not None:
        documents = documents.filter(created_at__lt=created_to)
    return documents.order_by("-created_at", "-id")


def chunk_list(*, tenant: Tenant, document: Document) -> QuerySet[Chunk]:
    """The document's chunks in reading order, disabled ones included. A document of another tenant has none."""
    return Chunk.objects.for_tenant(tenant).filter(document=document).order_by("position")


def chunk_get(*, tenant: Tenant, chunk_id: int, only_knowledge_base_id: int | None = None) -> Chunk | None:
    """The tenant's chunk (of the key's one knowledge base, for a limited key); None otherwise, so another tenant's
    chunk and a forbidden one look the same: not found."""
    queryset = Chunk.objects.for_tenant(tenant).filter(pk=chunk_id)
    if only_knowledge_base_id is not None:
        queryset = queryset.filter(knowledge_base_id=only_knowledge_base_id)
    return queryset.first()


def document_status_counts(*, tenant: Tenant, knowledge_base: KnowledgeBase) -> dict[str, int]:
    """How many of the knowledge base's documents are in each status: every status named, in the pipeline's order,
    0 when none is. One aggregate query, whatever the number of documents or statuses."""
    counted = dict(
        Document.objects.for_tenant(tenant)
        .filter(knowledge_base=knowledge_base)
        .order_by()
        .values_list("status")
        .annotate(documents=Count("id"))
    )
    return {status: counted.get(status, 0) for status in DocumentStatus.values}


def chunk_texts_sample(*, tenant: Tenant, knowledge_base: KnowledgeBase, count: int, seed: int = 0) -> list[str]:
    """Up to `count` texts of the knowledge base's chunks, drawn at random (the same ones for the same `seed` and
    chunks), in the order drawn. Reads the ids first and only the drawn rows' texts, so a knowledge base of many
    chunks costs one id scan, not a sort of every row."""
    chunk_ids = list(
        Chunk.objects.for_tenant(tenant)
        .filter(knowledge_base=knowledge_base)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    drawn = random.Random(seed).sample(chunk_ids, min(count, len(chunk_ids)))
    texts = dict(Chunk.objects.for_tenant(tenant).filter(pk__in=drawn).values_list("pk", "text"))
    return [texts[pk] for pk in drawn if pk in texts]
