"""The chunks' vectors in Milvus: writes, deletes, searches, counts and flushes, over the client and collection
shapes of `retrieval.milvus` (the one module that holds a Milvus client; the question index is
`retrieval.question_index`).

One collection holds every tenant's chunks, with `tenant_id` as the partition key and `doc_id` the document a chunk
belongs to (what searches group by and exclusions name: `group_by_field="doc_id"`, `doc_id not in [...]`). Every
search, query and delete goes through `filter_build`, which always names the tenant and quotes every value, because
Milvus Lite ignores `filter_params` templates and real Milvus rejects an empty `in []` list.

Collections created before the field was named `doc_id` call it `document_id`; the name is read from the
collection's schema once per process, so they keep working as they are (docs/operations.md: re-index into a new
collection to move one over).

Full text: a chunk collection created by this release also holds each chunk's text, analysed, in one of two text fields
(`text`, English analyser; `text_zh`, jieba), each turned into a sparse vector by a BM25 function with a sparse inverted
index; a row fills the field of its knowledge base's analyser and leaves the other empty. Two fields, not one
multi-analyser field, because multi-analyser fields need Milvus 2.5.11 and the compose file pins 2.5.4, and Milvus Lite
has none. A collection from before (no text field) cannot gain a BM25 output in place, so full text lives in a
collection of its own beside it (`chunk_collection_name`) and each knowledge base moves over by a re-index from its
stored chunks (`retrieval.services.text_index`); until then it is searched by its vectors alone.

Chunk collections carry a nullable JSON field `metadata` (the document's metadata, `retrieval.metadata`) that
`filter_build` filters on. A collection made before it keeps working without it: Milvus Lite 3.2 does not implement
`add_collection_field` (UNIMPLEMENTED), so the field cannot be added in place, and a metadata filter on such a
collection is a 409 until the knowledge base has moved to the full-text collection (which has the field). What each
collection has is read once per process, in `retrieval.milvus.collection_setup` (`CollectionCapabilities`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from django.conf import settings

from kbplatform import chinese_script
from kbplatform.errors import ServiceUnavailableError
from kbplatform.stems import words_stemmed
from kbplatform.text import marks_as_letters, unspaced_runs_paired, width_folded
from retrieval import milvus

# Re-exported: the names callers have always imported from here (the errors, the filter, the text fields).
from retrieval.milvus import ANALYZERS as ANALYZERS
from retrieval.milvus import CHINESE as CHINESE
from retrieval.milvus import DOC_FIELD as DOC_FIELD
from retrieval.milvus import ENGLISH as ENGLISH
from retrieval.milvus import LANGUAGE_ANALYZERS as LANGUAGE_ANALYZERS
from retrieval.milvus import LEGACY_DOC_FIELD as LEGACY_DOC_FIELD
from retrieval.milvus import METADATA_FIELD as METADATA_FIELD
from retrieval.milvus import METADATA_FILTER_UNSUPPORTED as METADATA_FILTER_UNSUPPORTED
from retrieval.milvus import METADATA_KEY as METADATA_KEY
from retrieval.milvus import TEXT_FIELDS as TEXT_FIELDS
from retrieval.milvus import TEXT_MAX_BYTES as TEXT_MAX_BYTES
from retrieval.milvus import VECTOR_STORE_UNAVAILABLE as VECTOR_STORE_UNAVAILABLE
from retrieval.milvus import CollectionCapabilities as CollectionCapabilities
from retrieval.milvus import MetadataFilterUnsupported as MetadataFilterUnsupported
from retrieval.milvus import VectorStoreUnavailable as VectorStoreUnavailable
from retrieval.milvus import chunk_collection_name as chunk_collection_name
from retrieval.milvus import chunk_collection_names as chunk_collection_names
from retrieval.milvus import collection_capabilities as collection_capabilities
from retrieval.milvus import collection_entity_count as collection_entity_count
from retrieval.milvus import deployment_collection_names as deployment_collection_names
from retrieval.milvus import filter_build as filter_build
from retrieval.milvus import filter_quote as filter_quote
from retrieval.milvus import outage_message as outage_message
from retrieval.milvus import text_field_analyzer as text_field_analyzer
from retrieval.milvus import vectorstore_ping as vectorstore_ping

logger = logging.getLogger(__name__)


# --- retrieval modes ------------------------------------------------------------------------------------------

SEMANTIC = "semantic"
FULL_TEXT = "full_text"
HYBRID = "hybrid"
RETRIEVAL_MODES = (SEMANTIC, FULL_TEXT, HYBRID)
# Reciprocal rank fusion's k (Milvus's `RRFRanker`): a chunk at rank r on a side adds 1 / (k + r). 20, not Milvus's
# 60: at 60, with each side bringing 40 candidates, a chunk both sides found anywhere in their lists outranks the best
# chunk only one side found (2 / (60 + 40) > 1 / 61), so the weak BM25 matches of a conversational question displace
# the vector's first hits; at 20 a shared chunk must be in both sides' first 21 places to. Chosen on MTRAG and SciFact
# (docs/ingestion.md, "Rank fusion's k").
RRF_K = 20
# Hits each sub-request of a hybrid search hands to the fusion, per hit asked for: fusion ranks what either side found,
# so each side must bring more than the final list (and grouping keeps one chunk per document of them).
HYBRID_CANDIDATES_PER_HIT = 4
SEARCH_LIMIT_MAX = 16_384  # what Milvus accepts as a search's limit


class TextIndex:
    """Where a knowledge base's chunks are in Milvus (`KnowledgeBase.text_index`)."""

    READY = "ready"  # in the full-text collection, with their text: every retrieval mode
    MISSING = "missing"  # in the collection of vectors only (made before full text): semantic search only
    BUILDING = "building"  # being copied into the full-text collection: written to both, searched in the old one


def bm25_query(query_text: str, analyzer: str) -> str:
    """The text a BM25 search of `analyzer`'s field is given for `query_text`: the query read as a chunk's field is
    (`bm25_document_text`), so that a query and a page match word for word whatever script or width either is written in
    ("退款多久能到帳" finds "到账"'s page, "ＡＰＩ" finds "API"), and a word is weighed once, not once per spelling."""
    return bm25_document_text(query_text, analyzer)


def bm25_document_text(text: str, analyzer: str) -> str:
    """The text a chunk's BM25 field of `analyzer` holds: full-width letters and digits as ASCII (`width_folded`:
    "ＡＰＩ" typed in an input method's full-width mode is the word "API"); an `english` one's with each Cyrillic,
    Arabic, Devanagari and Greek word as its Russian, Arabic, Hindi or Greek stem (`words_stemmed`: the field's own
    stemmer is English, so "пароль" did not find "пароля"; a language analyser's, `spanish` and the others of
    LANGUAGE_ANALYZERS, which writes the same field, also each word in Latin letters as its stem in that language, its
    function words left out), with no combining mark (`marks_as_letters`: Milvus Lite's tokenizer took a Hindi or Thai
    word apart at each vowel sign) and its runs of Han, kana, Hangul and Thai as overlapping pairs of letters
    (`unspaced_runs_paired`: its tokenizer cuts at spaces, and these scripts write none between words or join the
    grammar to the word, so a Japanese, Korean or Thai knowledge base, or Chinese text in an English one, matched a
    question only on a whole clause); and a `chinese` one's in Simplified characters
    (`chinese_script.simplified_unless_japanese`; text holding kana is Japanese, and its kanji are kept).
    jieba's dictionary is Simplified and it matches characters as written, so a page written in Traditional characters
    was found by no query in Simplified ones (a mainland user of a Taiwan or Hong Kong help centre) and cut into worse
    words for its own script's queries. The field is searched, never shown: a hit's text is the chunk's, as the
    document has it. A chunk indexed before its field was so read holds its text as written until it is re-indexed
    (`manage.py text_reading_reindex`)."""
    folded = width_folded(text)
    if text_field_analyzer(analyzer) == ENGLISH:
        language = analyzer if analyzer in LANGUAGE_ANALYZERS else None
        return unspaced_runs_paired(marks_as_letters(words_stemmed(folded, language)))
    return chinese_script.simplified_unless_japanese(folded)


def text_cut(text: str) -> str:
    """`text` cut to what a text field holds (TEXT_MAX_BYTES of UTF-8), never inside a character."""
    encoded = text.encode("utf-8")
    if len(encoded) <= TEXT_MAX_BYTES:
        return text
    return encoded[:TEXT_MAX_BYTES].decode("utf-8", errors="ignore")


def model_chunk_collection_name(*, dimension: int) -> str | None:
    """The chunk collection of the vectors of `dimension` when they are not the primary embedding model's: one per
    offered model, named after it (`<MILVUS_COLLECTION>_use_multilingual_v3`), always with the text fields, the tenant
    its partition key as in every collection. None for the primary model's size, whose chunks stay in the collections
    `chunk_collection_name` names. The offered models differ in size, so the size names the model here; a knowledge
    base's filter keeps its own vectors apart from any other's in any collection."""
    from retrieval import embeddings

    primary = embeddings.primary_model()
    primary_size = embeddings.embedding_dimension(primary)
    alike = [
        model
        for model in embeddings.offered_models()
        if model != primary and settings.PACKAGED_EMBEDDING_MODELS.get(model) == primary_size
    ]
    if alike:
        raise ServiceUnavailableError(
            f"EMBEDDING_MODELS offers {', '.join(alike)} beside the primary model {primary}, all of {primary_size} "
            "dimensions: their chunks would share one collection. Offer models of different vector sizes.",
            extra={"code": "embedding_models_clash"},
        )
    if dimension == primary_size:
        return None
    named = [name for name, size in settings.PACKAGED_EMBEDDING_MODELS.items() if size == dimension]
    suffix = re.sub(r"[^0-9a-z]+", "_", named[0].lower()) if named else f"d{int(dimension)}"
    return f"{settings.MILVUS_COLLECTION}_{suffix}"


def model_chunk_collection_names() -> list[str]:
    """The chunk collections of the offered models other than the primary one (whether or not they exist yet)."""
    from retrieval import embeddings

    names = [
        model_chunk_collection_name(dimension=embeddings.embedding_dimension(model))
        for model in embeddings.offered_models()
    ]
    return [name for name in dict.fromkeys(names) if name]


def collection_ensure(*, dimension: int, collection: str | None = None, full_text: bool = True) -> str:
    """Create (once) and load a chunk collection; returns its name. `collection` names one (the schema it was made with
    is read); else the one of the model of `dimension` (`model_chunk_collection_name`), else the one
    `chunk_collection_name(full_text=...)` names. A chunk collection this release creates always holds the text fields,
    whatever its name."""
    name = collection or model_chunk_collection_name(dimension=dimension) or chunk_collection_name(full_text=full_text)
    return milvus.collection_setup(
        name=name,
        primary="chunk_id",
        int_fields=("knowledge_base_id", DOC_FIELD),
        dimension=dimension,
        full_text=True,
    )


def _doc_field(name: str) -> str:
    return collection_capabilities(name).doc_field


def _chunk_collections(*, dimension: int) -> list[str]:
    """Every chunk collection a knowledge base's chunks may be in (one name when the deployment has only one)."""
    names = [collection_ensure(dimension=dimension, full_text=False), collection_ensure(dimension=dimension)]
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class ChunkVector:
    chunk_id: int
    tenant_id: int
    knowledge_base_id: int
    document_id: int
    vector: Sequence[float]
    text: str  # the chunk's text, for BM25 (in a collection that holds text)
    analyzer: str = ENGLISH  # its knowledge base's `text_analyzer`: which text field holds it
    text_index: str = TextIndex.READY  # its knowledge base's `text_index`: which collections it is written to
    metadata: Mapping[str, object] | None = None  # the document's metadata, what metadata filters match


@dataclass(frozen=True)
class SearchHit:
    chunk_id: int
    document_id: int
    knowledge_base_id: int
    score: float
    # The query vector's cosine to the chunk's vector, whatever ranked it (in HYBRID the score is fusion's, which says
    # how the hit ranked, not how near it is); None when not asked for (`vectors_search`'s `hit_similarity`).
    similarity: float | None = None


def _row_targets(row: ChunkVector, *, dimension: int) -> list[str]:
    """The collections a chunk is written to: where its knowledge base is searched, and during a move to the full-text
    collection both, so that no chunk written meanwhile is missing from either."""
    if row.text_index == TextIndex.READY:
        return [collection_ensure(dimension=dimension)]
    if row.text_index == TextIndex.MISSING:
        return [collection_ensure(dimension=dimension, full_text=False)]
    return _chunk_collections(dimension=dimension)


def _row_data(row: ChunkVector, *, name: str) -> dict:
    capabilities = collection_capabilities(name)
    data = {
        "chunk_id": row.chunk_id,
        "tenant_id": milvus.tenant_key(row.tenant_id),
        "knowledge_base_id": row.knowledge_base_id,
        capabilities.doc_field: row.document_id,
        "vector": [float(x) for x in row.vector],
    }
    if capabilities.metadata:
        data[METADATA_FIELD] = dict(row.metadata or {})
    if capabilities.full_text:
        written = text_field_analyzer(row.analyzer)
        for analyzer, (text_field, _, _) in TEXT_FIELDS.items():
            data[text_field] = text_cut(bm25_document_text(row.text, row.analyzer)) if analyzer == written else ""
    return data


def vectors_upsert(*, rows: Sequence[ChunkVector], dimension: int, collection: str | None = None) -> int:
    """Write the rows into the collections of their knowledge bases' `text_index` (or into `collection` alone)."""
    if not rows:
        return 0
    by_collection: dict[str, list[dict]] = {}
    for row in rows:
        names = [collection_ensure(dimension=dimension, collection=collection)] if collection else None
        for name in names or _row_targets(row, dimension=dimension):
            by_collection.setdefault(name, []).append(_row_data(row, name=name))
    for name, data in by_collection.items():
        milvus.call("upsert", milvus.connect().upsert, collection_name=name, data=data)
    return len(rows)


def vectors_delete(
    *,
    tenant_id: int,
    dimension: int,
    knowledge_base_id: int | None = None,
    document_ids: Iterable[int] | None = None,
    chunk_ids: Iterable[int] | None = None,
    collection: str | None = None,
) -> None:
    """Delete a tenant's vectors of the given documents or chunks (or of a whole knowledge base), from every chunk
    collection (or from `collection` alone)."""
    document_ids = list(document_ids) if document_ids is not None else None
    chunk_ids = list(chunk_ids) if chunk_ids is not None else None
    if (document_ids is not None and not document_ids) or (chunk_ids is not None and not chunk_ids):
        return
    if document_ids is None and chunk_ids is None and knowledge_base_id is None:
        raise ValueError("refusing to delete every vector of a tenant without naming a knowledge base")
    names = [collection_ensure(dimension=dimension, collection=collection)] if collection else None
    for name in names or _chunk_collections(dimension=dimension):
        expression = filter_build(
            tenant_id=tenant_id,
            knowledge_base_id=knowledge_base_id,
            document_ids=document_ids,
            chunk_ids=chunk_ids,
            doc_field=_doc_field(name),
        )
        milvus.call("delete", milvus.connect().delete, collection_name=name, filter=expression)


def vectors_delete_stale(
    *,
    tenant_id: int,
    dimension: int,
    document_ids: Iterable[int],
    keep_chunk_ids: Iterable[int],
    collection: str | None = None,
) -> None:
    """Delete the vectors of these documents whose chunk is not in `keep_chunk_ids`: what a re-run or re-index
    leaves behind when a document's chunks changed. With nothing to keep, every vector of the documents goes. From
    every chunk collection (or from `collection` alone)."""
    document_ids = list(document_ids)
    if not document_ids:
        return
    keep_chunk_ids = list(keep_chunk_ids)
    names = [collection_ensure(dimension=dimension, collection=collection)] if collection else None
    for name in names or _chunk_collections(dimension=dimension):
        expression = filter_build(
            tenant_id=tenant_id, document_ids=document_ids, exclude_chunk_ids=keep_chunk_ids, doc_field=_doc_field(name)
        )
        milvus.call("delete", milvus.connect().delete, collection_name=name, filter=expression)


# --- search: the requests are built by a pure function, so every one of them is seen to carry the tenant's filter ---


@dataclass(frozen=True)
class SearchRequest:
    """One search of one field: what `search` (alone) or a sub-request of `hybrid_search` is given."""

    anns_field: str
    data: list
    param: dict
    limit: int
    expr: str


def search_requests_build(
    *,
    mode: str,
    expression: str,
    limit: int,
    query_vector: Sequence[float] | None,
    query_text: str,
    analyzer: str = ENGLISH,
) -> list[SearchRequest]:
    """The field searches of a search in `mode`: the dense vector (SEMANTIC), the BM25 field of `analyzer`
    (FULL_TEXT), or both (HYBRID, each bringing HYBRID_CANDIDATES_PER_HIT hits per hit asked for). Every one carries
    `expression`, the whole filter (tenant, knowledge base, exclusions): a sub-request without it would let fusion
    rank another tenant's chunks or an excluded one. Pure."""
    if mode not in RETRIEVAL_MODES:
        raise ValueError(f"unknown retrieval mode {mode!r}")
    if not expression.startswith("tenant_id == "):
        raise ValueError("every Milvus filter must name the tenant first")
    sub_limit = min(SEARCH_LIMIT_MAX, limit * HYBRID_CANDIDATES_PER_HIT) if mode == HYBRID else limit
    requests = []
    if mode in (SEMANTIC, HYBRID):
        if query_vector is None:
            raise ValueError(f"a {mode} search needs a query vector")
        requests.append(
            SearchRequest(
                anns_field="vector",
                data=[[float(x) for x in query_vector]],
                param={"metric_type": "COSINE", "params": {"ef": max(64, sub_limit * 4)}},
                limit=sub_limit,
                expr=expression,
            )
        )
    if mode in (FULL_TEXT, HYBRID):
        if not query_text.strip():
            raise ValueError(f"a {mode} search needs the query's text")
        requests.append(
            SearchRequest(
                anns_field=TEXT_FIELDS[text_field_analyzer(analyzer)][1],
                data=[text_cut(bm25_query(query_text, analyzer))],
                param={"metric_type": "BM25"},
                limit=sub_limit,
                expr=expression,
            )
        )
    return requests


def vectors_search(
    *,
    tenant_id: int,
    knowledge_base_id: int,
    query_vector: Sequence[float] | None,
    limit: int,
    dimension: int,
    exclude_document_ids: Iterable[int] | None = None,
    exclude_chunk_ids: Iterable[int] | None = None,
    group_by_document: bool = True,
    metadata_filter: Mapping[str, object] | None = None,
    collection: str | None = None,
    mode: str = SEMANTIC,
    query_text: str = "",
    analyzer: str = ENGLISH,
    full_text: bool = False,
    dense_weight: float | None = None,
    hit_similarity: bool = False,
) -> list[SearchHit]:
    """Best chunks of one knowledge base of one tenant, best first: nearest by vector (SEMANTIC), by BM25 of
    `query_text` in the field of `analyzer` (FULL_TEXT), or both fused (HYBRID: reciprocal rank fusion, or weighted
    scores with `dense_weight` for the vector side and the rest for BM25). With `group_by_document`, at most one chunk
    per document (its best); `limit` then counts documents. A `metadata_filter` narrows every
    sub-search inside Milvus (so grouping and exclusions apply to what it leaves); on a collection without the metadata
    field it raises MetadataFilterUnsupported (409). `full_text` says the knowledge base's chunks are in the
    full-text collection (`TextIndex.READY`); FULL_TEXT and HYBRID need it. A hit's score is the cosine (SEMANTIC),
    the BM25 score (FULL_TEXT) or the fused score (HYBRID), higher is better in each. A hit's `similarity` is its cosine
    to `query_vector`: the score in SEMANTIC; in the other modes only with `hit_similarity`, which asks Milvus for the
    hits' vectors (a few milliseconds more a search: BENCHMARKS.md), else None."""
    if mode != SEMANTIC and not full_text and collection is None:
        raise ValueError(f"a {mode} search needs the knowledge base's chunks in the full-text collection")
    name = collection_ensure(dimension=dimension, collection=collection, full_text=full_text)
    capabilities = collection_capabilities(name)
    if mode != SEMANTIC and not capabilities.full_text:
        raise ValueError(f"collection {name} holds no text: a {mode} search cannot run on it")
    doc_field = capabilities.doc_field
    if metadata_filter and not capabilities.metadata:
        raise MetadataFilterUnsupported(
            "This knowledge base's vectors are in a search index made before documents carried metadata, and Milvus "
            "cannot add the field in place, so a metadata filter cannot be applied. An operator moves the knowledge "
            "base to the full-text collection, which has the field (`manage.py text_index`, docs/operations.md); "
            "search without metadata_filter meanwhile.",
            extra={"code": METADATA_FILTER_UNSUPPORTED},
        )
    expression = filter_build(
        tenant_id=tenant_id,
        knowledge_base_id=knowledge_base_id,
        exclude_document_ids=exclude_document_ids,
        exclude_chunk_ids=exclude_chunk_ids,
        metadata_filter=metadata_filter,
        doc_field=doc_field,
    )
    requests = search_requests_build(
        mode=mode,
        expression=expression,
        limit=limit,
        query_vector=query_vector,
        query_text=query_text,
        analyzer=analyzer,
    )
    output_fields = [doc_field, "knowledge_base_id"]
    if hit_similarity and mode != SEMANTIC and query_vector is not None:
        # The hits' vectors, for their cosine to the query: a SEMANTIC hit's score is that cosine already.
        output_fields.append("vector")
    common = {"collection_name": name, "limit": limit, "output_fields": output_fields}
    if group_by_document:
        common["group_by_field"] = doc_field
    if mode == HYBRID:
        from pymilvus import AnnSearchRequest, RRFRanker, WeightedRanker

        ranker = (
            RRFRanker(RRF_K) if dense_weight is None else WeightedRanker(float(dense_weight), 1.0 - float(dense_weight))
        )
        sub_requests = [
            AnnSearchRequest(data=r.data, anns_field=r.anns_field, param=r.param, limit=r.limit, expr=r.expr)
            for r in requests
        ]
        results = milvus.call(
            "hybrid search", milvus.connect().hybrid_search, reqs=sub_requests, ranker=ranker, **common
        )
    else:
        (request,) = requests
        results = milvus.call(
            "search",
            milvus.connect().search,
            data=request.data,
            filter=request.expr,
            search_params=request.param,
            anns_field=request.anns_field,
            **common,
        )
    query = _unit(query_vector) if "vector" in output_fields else None
    hits = []
    for hit in results[0] if results else []:
        entity = hit.get("entity", {})
        distance = float(hit["distance"])
        if mode == SEMANTIC:
            similarity = distance
        else:
            vector = entity.get("vector") if query is not None else None
            similarity = None if vector is None else float(query @ _unit(vector))
        hits.append(
            SearchHit(
                chunk_id=int(hit.get("id", hit.get("chunk_id"))),
                document_id=int(entity[doc_field]),
                knowledge_base_id=int(entity["knowledge_base_id"]),
                # BM25 scores are never negative; Milvus Lite reports them negated (in the right order).
                score=abs(distance) if mode == FULL_TEXT else distance,
                similarity=similarity,
            )
        )
    return hits


def _unit(vector: Sequence[float]) -> np.ndarray:
    """`vector` scaled to length 1 (a zero vector stays zero), so that a dot product is the COSINE metric's value."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm else array


def collections_flush(*, names: Sequence[str] | None = None) -> list[str]:
    """Flush what the deployment's collections (or `names`, where they exist) hold in memory into segments, so that
    searches use their index: Milvus Lite searches its in-memory table row by row. Returns the collections flushed.
    Nothing is lost by not flushing (written rows are searchable and logged to disk either way), so a flush that fails
    is logged and left to the next one, never raised. Does nothing with MILVUS_FLUSH_INTERVAL=0."""
    if not settings.MILVUS_FLUSH_INTERVAL:
        return []
    try:
        existing = deployment_collection_names()
    except VectorStoreUnavailable as exc:
        logger.warning("vectors not flushed: %s", exc)
        return []
    flushed = []
    for name in existing if names is None else [name for name in names if name in existing]:
        try:
            milvus.call(
                f"flush of collection {name}", milvus.connect().flush, name, timeout=settings.MILVUS_SETUP_TIMEOUT
            )
        except VectorStoreUnavailable as exc:
            logger.warning("collection %s not flushed, the next flush will: %s", name, exc)
            continue
        flushed.append(name)
    return flushed


def vectors_flush(*, collection: str | None = None) -> bool:
    """Flush the chunk collections (`collections_flush`), or `collection`: what an indexing run calls once it has
    written its vectors, so a knowledge base is searched through its index as soon as its documents are indexed.
    True when one was flushed."""
    names = [collection] if collection else [*chunk_collection_names(), *model_chunk_collection_names()]
    return bool(collections_flush(names=names))


def vectors_count(
    *, tenant_id: int, knowledge_base_id: int, dimension: int, collection: str | None = None, full_text: bool = True
) -> int:
    """The knowledge base's chunks in `collection`, else in the chunk collection `chunk_collection_name` names."""
    name = collection_ensure(dimension=dimension, collection=collection, full_text=full_text)
    expression = filter_build(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)
    rows = milvus.call(
        "count", milvus.connect().query, collection_name=name, filter=expression, output_fields=["count(*)"]
    )
    return int(rows[0]["count(*)"]) if rows else 0
