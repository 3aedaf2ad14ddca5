"""The one module that talks to Milvus.

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
collection has is read once per process, in `_collection_ensure` (`CollectionCapabilities`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from kbplatform.errors import ConflictError, ServiceUnavailableError

logger = logging.getLogger(__name__)

VARCHAR_ID_MAX = 64
DOC_FIELD = "doc_id"
LEGACY_DOC_FIELD = "document_id"  # what chunk collections of earlier releases call it
_lock = threading.Lock()
_client = None
_ready_collections: set[str] = set()
_text_collection: list[str] = []  # the full-text chunk collection's name, once `chunk_collection_name` has found it


@dataclass(frozen=True)
class CollectionCapabilities:
    """What a chunk collection's schema holds, read from it once per process: the one place that knows."""

    doc_field: str = "doc_id"  # the name of its document field (DOC_FIELD, or LEGACY_DOC_FIELD before it was renamed)
    full_text: bool = False  # whether it holds analysed text with BM25 sparse vectors (TEXT_FIELDS)
    metadata: bool = False  # whether it has the METADATA_FIELD that metadata filters match


_capabilities: dict[str, CollectionCapabilities] = {}  # chunk collection -> what its schema holds
_question_keyed: dict[str, bool] = {}  # question collection -> whether it has QUESTION_FILTER_FIELD
METADATA_FIELD = "metadata"
# A key a metadata filter may name: written into the expression unquoted (`metadata["k"]`), so nothing else passes.
METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
METADATA_FILTER_UNSUPPORTED = "metadata_filter_unsupported"


VECTOR_STORE_UNAVAILABLE = "vector_store_unavailable"


class VectorStoreUnavailable(ServiceUnavailableError):
    """Milvus could not be reached or refused the call: transient from the platform's point of view. The API answers
    503 with `message`, which names nothing of the deployment; `str()` of it is the detail, for logs and the
    statuses of documents and re-indexes waiting to retry."""

    def __init__(self, detail: str, *, message: str = "The search index is unavailable; retry in a moment.") -> None:
        super().__init__(message, extra={"code": VECTOR_STORE_UNAVAILABLE})
        self.args = (detail,)


class MetadataFilterUnsupported(ConflictError):
    """A metadata filter on a chunk collection without the metadata field (made before it, and Milvus refused to add
    it): nothing could be filtered, so the search is refused rather than served unfiltered."""


@contextmanager
def outage_message(message: str) -> Iterator[None]:
    """Inside: a VectorStoreUnavailable tells the client `message` (what was kept, what to do) instead of the
    default, with the same detail for the logs."""
    try:
        yield
    except VectorStoreUnavailable as exc:
        raise VectorStoreUnavailable(str(exc), message=message) from exc


# --- filters: pure ---------------------------------------------------------------------------------------


def filter_quote(value: str | int) -> str:
    """A Milvus expression literal for `value`: integers as is, anything else as a JSON-escaped string."""
    if isinstance(value, bool):
        raise TypeError("booleans are not filter values here")
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False)


def filter_build(
    *,
    tenant_id: int,
    knowledge_base_id: int | None = None,
    document_ids: Iterable[int] | None = None,
    exclude_document_ids: Iterable[int] | None = None,
    exclude_chunk_ids: Iterable[int] | None = None,
    chunk_ids: Iterable[int] | None = None,
    metadata_filter: Mapping[str, object] | None = None,
    doc_field: str = DOC_FIELD,
) -> str:
    """The filter expression for one tenant. The tenant clause is always first and always present, and every other
    clause is joined to it by `and`, so no clause can widen a filter past the tenant; an empty list adds no clause
    (Milvus rejects `in []`). `doc_field` is the collection's document field. `metadata_filter` adds, per key,
    `metadata["k"] == v` for a scalar and `(metadata["k"] == a or metadata["k"] == b)` for a list (Milvus Lite 3.2
    refuses `in` on a JSON path; the parentheses keep the `or` inside its own clause). Keys must match METADATA_KEY and
    values be strings, integers or booleans, or the build raises ValueError / TypeError."""
    if doc_field not in (DOC_FIELD, LEGACY_DOC_FIELD):
        raise ValueError(f"unknown document field {doc_field!r}")
    if tenant_id is None:
        raise ValueError("every Milvus filter must name the tenant")
    clauses = [f"tenant_id == {filter_quote(_tenant_key(tenant_id))}"]
    if knowledge_base_id is not None:
        clauses.append(f"knowledge_base_id == {filter_quote(int(knowledge_base_id))}")
    for field, op, ids in (
        (doc_field, "in", document_ids),
        (doc_field, "not in", exclude_document_ids),
        ("chunk_id", "not in", exclude_chunk_ids),
        ("chunk_id", "in", chunk_ids),
    ):
        values = sorted({int(i) for i in ids}) if ids is not None else []
        if values:
            clauses.append(f"{field} {op} [{', '.join(filter_quote(v) for v in values)}]")
    for key, wanted in (metadata_filter or {}).items():
        if not isinstance(key, str) or not METADATA_KEY.fullmatch(key):
            raise ValueError(f"not a metadata key: {key!r}")
        if isinstance(wanted, (list, tuple)):
            if not wanted:
                raise ValueError(f"metadata filter {key!r}: empty list of values")
            path = f'{METADATA_FIELD}["{key}"]'
            alternatives = [f"{path} == {literal}" for literal in sorted({_metadata_literal(v) for v in wanted})]
            clauses.append(f"({' or '.join(alternatives)})")
        else:
            clauses.append(f'{METADATA_FIELD}["{key}"] == {_metadata_literal(wanted)}')
    return " and ".join(clauses)


def _metadata_literal(value: object) -> str:
    """A metadata filter value as a Milvus literal: booleans as `true` / `false`, the rest by `filter_quote`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, (str, int)):
        raise TypeError(f"metadata filter values are strings, integers or booleans, not {type(value).__name__}")
    return filter_quote(value)


def _tenant_key(tenant_id: int) -> str:
    return f"t{int(tenant_id)}"


# --- client ---------------------------------------------------------------------------------------------


def _connect():  # noqa: ANN202 - pymilvus is imported on first use, not for a hint
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                from pymilvus import MilvusClient

                try:
                    _client = MilvusClient(
                        uri=settings.MILVUS_URI, token=settings.MILVUS_TOKEN or "", timeout=settings.MILVUS_TIMEOUT
                    )
                except Exception as exc:  # pymilvus raises many types for "cannot connect"
                    raise VectorStoreUnavailable(f"Milvus at {settings.MILVUS_URI} is unreachable: {exc}") from exc
    return _client


def _reset() -> None:
    global _client
    with _lock:
        if _client is not None:
            try:
                _client.close()
            except Exception:
                logger.debug("closing a broken Milvus client failed", exc_info=True)
        _client = None
        _ready_collections.clear()
        _capabilities.clear()
        _question_keyed.clear()
        _text_collection.clear()


def _call(operation: str, fn, *args, timeout: float | None = None, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - any client method
    """fn(*args, **kwargs) with a deadline (`MILVUS_TIMEOUT` unless given): pymilvus waits for a reply forever by
    default, so a Milvus that accepts connections but does not answer would hold a web worker until the web server
    killed it, and a worker's task until its time limit. Any failure, the deadline included, is
    VectorStoreUnavailable (a 503 for the API, a retry for the workers)."""
    try:
        return fn(*args, timeout=timeout or settings.MILVUS_TIMEOUT, **kwargs)
    except VectorStoreUnavailable:
        raise
    except Exception as exc:
        _reset()
        raise VectorStoreUnavailable(f"Milvus {operation} failed: {exc}") from exc


# --- chunk text: analysers and modes ------------------------------------------------------------------------------

ENGLISH = "english"
CHINESE = "chinese"
# Analyser -> (text field, its BM25 sparse field, analyser parameters). Only the `standard` and `jieba` tokenizers, the
# `lowercase`, `stemmer` and `stop` filters are used: Milvus 2.5.4 has them all, and Milvus Lite 3.2 knows the two
# tokenizers (it applies stop words and ignores the stemmer, so English terms are matched unstemmed there). The stop
# words are listed, not `_english_`, which Milvus Lite would read as one word.
ENGLISH_STOP_WORDS = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with"
).split()
TEXT_FIELDS: dict[str, tuple[str, str, dict]] = {
    ENGLISH: (
        "text",
        "sparse",
        {
            "tokenizer": "standard",
            "filter": [
                "lowercase",
                {"type": "stemmer", "language": "english"},
                {"type": "stop", "stop_words": ENGLISH_STOP_WORDS},
            ],
        },
    ),
    CHINESE: ("text_zh", "sparse_zh", {"tokenizer": "jieba"}),
}
# A VARCHAR holds at most 65,535 bytes. A chunk is at most 256 word pieces, far below that; should one be longer, its
# text is cut for BM25 only (the chunk row keeps it whole and is what a hit shows).
TEXT_MAX_BYTES = 65_535

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


def text_cut(text: str) -> str:
    """`text` cut to what a text field holds (TEXT_MAX_BYTES of UTF-8), never inside a character."""
    encoded = text.encode("utf-8")
    if len(encoded) <= TEXT_MAX_BYTES:
        return text
    return encoded[:TEXT_MAX_BYTES].decode("utf-8", errors="ignore")


def _collection_ensure(
    *,
    name: str,
    primary: str,
    int_fields: Sequence[str],
    dimension: int,
    full_text: bool = False,
    key_fields: Sequence[str] = (),
) -> str:
    """Create (once per process) and load a collection keyed by `primary`, partitioned by `tenant_id`, with an
    HNSW cosine index on `vector`: the one shape shared by the chunk and the question collections; with `full_text`, a
    new one also gets TEXT_FIELDS with their BM25 functions and sparse indexes; `key_fields` are VARCHAR fields of at
    most VARCHAR_ID_MAX characters. Records what its schema holds (`CollectionCapabilities` for a chunk collection,
    QUESTION_FILTER_FIELD for a question collection), read from Milvus when it existed already."""
    if name in _ready_collections:
        return name
    client = _connect()

    def _ensure(*, timeout: float) -> None:
        # Looking is quick: MILVUS_TIMEOUT, so a Milvus that does not answer fails a request fast; creating and loading
        # get `timeout` (MILVUS_SETUP_TIMEOUT), as loading a large collection takes its time.
        quick = min(timeout, settings.MILVUS_TIMEOUT)
        from pymilvus import DataType, Function, FunctionType

        chunks = DOC_FIELD in int_fields
        if client.has_collection(name, timeout=quick):
            fields = {field["name"] for field in client.describe_collection(name, timeout=quick)["fields"]}
            if not chunks:
                _question_keyed[name] = QUESTION_FILTER_FIELD in fields
            else:
                _capabilities[name] = CollectionCapabilities(
                    doc_field=LEGACY_DOC_FIELD if LEGACY_DOC_FIELD in fields else DOC_FIELD,
                    full_text=all(text in fields and sparse in fields for text, sparse, _ in TEXT_FIELDS.values()),
                    metadata=METADATA_FIELD in fields,
                )
        else:
            if DOC_FIELD in int_fields:
                _capabilities[name] = CollectionCapabilities(doc_field=DOC_FIELD, full_text=full_text, metadata=True)
            else:
                _question_keyed[name] = QUESTION_FILTER_FIELD in key_fields
            schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field(primary, DataType.INT64, is_primary=True)
            schema.add_field("tenant_id", DataType.VARCHAR, max_length=VARCHAR_ID_MAX, is_partition_key=True)
            for field in int_fields:
                schema.add_field(field, DataType.INT64)
            for field in key_fields:
                schema.add_field(field, DataType.VARCHAR, max_length=VARCHAR_ID_MAX)
            schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dimension)
            if chunks:
                schema.add_field(METADATA_FIELD, DataType.JSON, nullable=True)
            index_params = client.prepare_index_params()
            index_params.add_index(
                field_name="vector", index_type="HNSW", metric_type="COSINE", params={"M": 16, "efConstruction": 200}
            )
            if full_text:
                for text, sparse, analyzer_params in TEXT_FIELDS.values():
                    schema.add_field(
                        text,
                        DataType.VARCHAR,
                        max_length=TEXT_MAX_BYTES,
                        enable_analyzer=True,
                        analyzer_params=analyzer_params,
                    )
                    schema.add_field(sparse, DataType.SPARSE_FLOAT_VECTOR)
                    schema.add_function(
                        Function(
                            name=f"{sparse}_bm25",
                            function_type=FunctionType.BM25,
                            input_field_names=[text],
                            output_field_names=[sparse],
                        )
                    )
                    index_params.add_index(field_name=sparse, index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
            client.create_collection(collection_name=name, schema=schema, index_params=index_params, timeout=timeout)
        client.load_collection(name, timeout=timeout)

    _call(f"setup of collection {name}", _ensure, timeout=settings.MILVUS_SETUP_TIMEOUT)
    _ready_collections.add(name)
    return name


def chunk_collection_name(*, full_text: bool) -> str:
    """The chunk collection a knowledge base's chunks are in: MILVUS_COLLECTION for one searched by vectors only
    (`TextIndex.MISSING`), the full-text collection for one whose chunks carry their text (`TextIndex.READY`).

    The full-text collection is MILVUS_COLLECTION itself when that has (or will be created with) the text fields, and
    `<MILVUS_COLLECTION>_text` beside it when MILVUS_COLLECTION is a collection of vectors only from an earlier
    release, or once `_text` exists (so dropping the emptied old collection changes nothing). Every process reads the
    same answer from Milvus, once."""
    prefix = settings.MILVUS_COLLECTION
    if not full_text:
        return prefix
    if _text_collection:
        return _text_collection[0]
    _, beside = chunk_collection_names()

    def _find(*, timeout: float) -> str:
        client = _connect()
        if client.has_collection(beside, timeout=timeout):
            return beside
        if not client.has_collection(prefix, timeout=timeout):
            return prefix
        fields = {field["name"] for field in client.describe_collection(prefix, timeout=timeout)["fields"]}
        return prefix if all(text in fields for text, _, _ in TEXT_FIELDS.values()) else beside

    found = _call("lookup of the full-text collection", _find)
    _text_collection[:] = [found]
    return found


def chunk_collection_names() -> tuple[str, str]:
    """The names a chunk collection of this deployment may have: MILVUS_COLLECTION and the full-text collection beside
    it (`<MILVUS_COLLECTION>_text`, made when MILVUS_COLLECTION is a collection of vectors only). Nothing else is
    ever given either name. Pure: read from the settings, whether or not the collections exist."""
    prefix = settings.MILVUS_COLLECTION
    return prefix, f"{prefix}_text"


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
    return _collection_ensure(
        name=name,
        primary="chunk_id",
        int_fields=("knowledge_base_id", DOC_FIELD),
        dimension=dimension,
        full_text=True,
    )


def collection_capabilities(name: str) -> CollectionCapabilities:
    """What the schema of a chunk collection that collection_ensure has set up holds."""
    return _capabilities.get(name, CollectionCapabilities())


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
        "tenant_id": _tenant_key(row.tenant_id),
        "knowledge_base_id": row.knowledge_base_id,
        capabilities.doc_field: row.document_id,
        "vector": [float(x) for x in row.vector],
    }
    if capabilities.metadata:
        data[METADATA_FIELD] = dict(row.metadata or {})
    if capabilities.full_text:
        if row.analyzer not in TEXT_FIELDS:
            raise ValueError(f"unknown text analyser {row.analyzer!r}")
        for analyzer, (text_field, _, _) in TEXT_FIELDS.items():
            data[text_field] = text_cut(row.text) if analyzer == row.analyzer else ""
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
        _call("upsert", _connect().upsert, collection_name=name, data=data)
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
        _call("delete", _connect().delete, collection_name=name, filter=expression)


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
        _call("delete", _connect().delete, collection_name=name, filter=expression)


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
        if analyzer not in TEXT_FIELDS:
            raise ValueError(f"unknown text analyser {analyzer!r}")
        requests.append(
            SearchRequest(
                anns_field=TEXT_FIELDS[analyzer][1],
                data=[text_cut(query_text)],
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
) -> list[SearchHit]:
    """Best chunks of one knowledge base of one tenant, best first: nearest by vector (SEMANTIC), by BM25 of
    `query_text` in the field of `analyzer` (FULL_TEXT), or both fused (HYBRID: reciprocal rank fusion, or weighted
    scores with `dense_weight` for the vector side and the rest for BM25). With `group_by_document`, at most one chunk
    per document (its best); `limit` then counts documents. A `metadata_filter` narrows every
    sub-search inside Milvus (so grouping and exclusions apply to what it leaves); on a collection without the metadata
    field it raises MetadataFilterUnsupported (409). `full_text` says the knowledge base's chunks are in the
    full-text collection (`TextIndex.READY`); FULL_TEXT and HYBRID need it. A hit's score is the cosine (SEMANTIC),
    the BM25 score (FULL_TEXT) or the fused score (HYBRID), higher is better in each."""
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
    common = {"collection_name": name, "limit": limit, "output_fields": [doc_field, "knowledge_base_id"]}
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
        results = _call("hybrid search", _connect().hybrid_search, reqs=sub_requests, ranker=ranker, **common)
    else:
        (request,) = requests
        results = _call(
            "search",
            _connect().search,
            data=request.data,
            filter=request.expr,
            search_params=request.param,
            anns_field=request.anns_field,
            **common,
        )
    hits = []
    for hit in results[0] if results else []:
        entity = hit.get("entity", {})
        distance = float(hit["distance"])
        hits.append(
            SearchHit(
                chunk_id=int(hit.get("id", hit.get("chunk_id"))),
                document_id=int(entity[doc_field]),
                knowledge_base_id=int(entity["knowledge_base_id"]),
                # BM25 scores are never negative; Milvus Lite reports them negated (in the right order).
                score=abs(distance) if mode == FULL_TEXT else distance,
            )
        )
    return hits


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
            _call(f"flush of collection {name}", _connect().flush, name, timeout=settings.MILVUS_SETUP_TIMEOUT)
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
    rows = _call("count", _connect().query, collection_name=name, filter=expression, output_fields=["count(*)"])
    return int(rows[0]["count(*)"]) if rows else 0


def vectorstore_ping() -> bool:
    try:
        _call("ping", _connect().list_collections)
        return True
    except VectorStoreUnavailable:
        return False


# --- question vectors (conversations' tenant-scope dedup) ---------------------------------------------------
# One collection per embedding model, one row per QA pair: the tenant-wide duplicate search is one ANN query, not a
# Python loop over every stored question. Same rules as chunks: tenant as partition key, every filter built here
# and naming it. A collection holds the vectors of one model only (named by `retrieval.embeddings.model_id`), so a
# search never meets a vector of another model, whatever its size: after a model change the old model's questions
# are simply not searched (and are found again if the operator switches back). Questions indexed before collections
# were per model are in the collection without a model suffix, never searched; deletes reach every collection.
# Each question carries the key of the metadata filter its turn searched under (QUESTION_FILTER_FIELD), and a search
# names the key of the new question's: a stored answer is compared only with questions asked under an equal filter.
# A collection made before the key was stored has no such field: its search names no key (the caller must keep only
# the candidates of its own filter, as `conversations.turn.candidates` does from the turns' rows), until
# `question_collection_drop` and a backfill (`manage.py milvus_rebuild --questions`) make it again with the field.

_QUESTION_MODEL = re.compile(r"[0-9a-f]{1,32}")
QUESTION_FILTER_FIELD = "metadata_filter_key"
_FILTER_KEY = re.compile(r"[0-9a-f]{64}")


def question_collection_name(*, model: str) -> str:
    """The question collection of embedding model `model` (a `model_id`); "" names the one from before models were
    recorded."""
    if not model:
        return f"{settings.MILVUS_COLLECTION}_questions"
    if not _QUESTION_MODEL.fullmatch(model):
        raise ValueError(f"not an embedding model id: {model!r}")
    return f"{settings.MILVUS_COLLECTION}_questions_{model}"


def question_collection_model(name: str) -> str | None:
    """The embedding model id whose question collection `name` is ("" for the one from before models were
    recorded), or None when `name` is not one of this deployment's question collections."""
    legacy = question_collection_name(model="")
    if name == legacy:
        return ""
    model = name[len(legacy) + 1 :] if name.startswith(f"{legacy}_") else ""
    return model if _QUESTION_MODEL.fullmatch(model) else None


def question_collection_names() -> list[str]:
    """Every question collection of this deployment that exists, whatever its model."""
    names = _call("list collections", _connect().list_collections)
    return sorted(name for name in names if question_collection_model(name) is not None)


def question_filter_build(
    *,
    tenant_id: int,
    knowledge_base_id: int | None = None,
    created_after: int | None = None,
    turn_ids: Iterable[int] | None = None,
    metadata_filter_key: str | None = None,
) -> str:
    """The tenant's clause first (from `filter_build`), then the knowledge base, the TTL floor (epoch seconds),
    the metadata filter key (`retrieval.metadata.metadata_filter_key`: "" matches the questions asked with no filter)
    and a list of turn ids; an empty id list adds no clause, nor does a key of None."""
    clauses = [filter_build(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id)]
    if created_after is not None:
        clauses.append(f"created_ts >= {filter_quote(int(created_after))}")
    if metadata_filter_key is not None:
        clauses.append(f"{QUESTION_FILTER_FIELD} == {filter_quote(filter_key_checked(metadata_filter_key))}")
    values = sorted({int(i) for i in turn_ids}) if turn_ids is not None else []
    if values:
        clauses.append(f"turn_id in [{', '.join(filter_quote(v) for v in values)}]")
    return " and ".join(clauses)


def filter_key_checked(key: str) -> str:
    """`key` if it is a metadata filter key ("" or 64 hex digits), else ValueError: nothing else is ever stored or
    searched for."""
    if key and not _FILTER_KEY.fullmatch(key):
        raise ValueError(f"not a metadata filter key: {key!r}")
    return key


def _question_collection_ensure(*, name: str, dimension: int) -> str:
    return _collection_ensure(
        name=name,
        primary="turn_id",
        int_fields=("knowledge_base_id", "created_ts"),
        dimension=dimension,
        key_fields=(QUESTION_FILTER_FIELD,),
    )


def question_collection_keyed(name: str) -> bool:
    """Whether existing question collection `name` stores each question's metadata filter key: read from its schema
    once per process (a collection dropped and made again by another process is read again once a call on it has
    failed, as every failure resets this process's client)."""
    keyed = _question_keyed.get(name)
    if keyed is None:
        described = _call(f"description of collection {name}", _connect().describe_collection, name)
        keyed = _question_keyed[name] = QUESTION_FILTER_FIELD in {field["name"] for field in described["fields"]}
    return keyed


def question_collection_ensure(*, model: str, dimension: int) -> str:
    """Create (once) and load the question collection of embedding model `model`, whose vectors have `dimension`."""
    return _question_collection_ensure(name=question_collection_name(model=model), dimension=dimension)


@dataclass(frozen=True)
class QuestionVector:
    turn_id: int
    tenant_id: int
    knowledge_base_id: int
    created_ts: int
    vector: Sequence[float]
    metadata_filter_key: str = ""  # `retrieval.metadata.metadata_filter_key` of the filter its turn searched under


@dataclass(frozen=True)
class QuestionHit:
    turn_id: int
    score: float


def question_vectors_upsert(*, rows: Sequence[QuestionVector], model: str) -> int:
    """Index questions whose vectors embedding model `model` made (all of one size), in that model's collection."""
    if not rows:
        return 0
    name = question_collection_ensure(model=model, dimension=len(rows[0].vector))
    keyed = question_collection_keyed(name)
    data = [
        {
            "turn_id": row.turn_id,
            "tenant_id": _tenant_key(row.tenant_id),
            "knowledge_base_id": row.knowledge_base_id,
            "created_ts": int(row.created_ts),
            "vector": [float(x) for x in row.vector],
            **({QUESTION_FILTER_FIELD: filter_key_checked(row.metadata_filter_key)} if keyed else {}),
        }
        for row in rows
    ]
    _call("question upsert", _connect().upsert, collection_name=name, data=data)
    return len(data)


def question_vectors_search(
    *,
    tenant_id: int,
    knowledge_base_id: int,
    query_vector: Sequence[float],
    limit: int,
    model: str,
    metadata_filter_key: str,
    created_after: int | None = None,
) -> list[QuestionHit]:
    """The tenant's stored questions of one knowledge base nearest to `query_vector`, best first, among those
    embedding model `model` (the one that made `query_vector`) made and asked under the metadata filter of
    `metadata_filter_key`. In a collection made before the key was stored (`question_collection_keyed` false), the
    questions of every filter: the caller keeps those of its own."""
    name = question_collection_ensure(model=model, dimension=len(query_vector))
    expression = question_filter_build(
        tenant_id=tenant_id,
        knowledge_base_id=knowledge_base_id,
        created_after=created_after,
        metadata_filter_key=metadata_filter_key if question_collection_keyed(name) else None,
    )
    results = _call(
        "question search",
        _connect().search,
        collection_name=name,
        data=[[float(x) for x in query_vector]],
        filter=expression,
        limit=limit,
        output_fields=["turn_id"],
        search_params={"metric_type": "COSINE", "params": {"ef": max(64, limit * 4)}},
        anns_field="vector",
    )
    return [
        QuestionHit(turn_id=int(hit.get("id", hit.get("turn_id"))), score=float(hit["distance"]))
        for hit in (results[0] if results else [])
    ]


def question_vectors_delete(
    *, tenant_id: int, turn_ids: Iterable[int] | None = None, knowledge_base_id: int | None = None
) -> None:
    """Delete a tenant's question vectors of the given turns, or of every turn of one knowledge base, from the
    collection of every embedding model (a turn's vector is in its own model's; turn ids are unique across them)."""
    turn_ids = list(turn_ids) if turn_ids is not None else None
    if turn_ids is None and knowledge_base_id is None:
        raise ValueError("refusing to delete every question vector of a tenant without naming a knowledge base")
    if turn_ids is not None and not turn_ids:
        return
    expression = question_filter_build(tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, turn_ids=turn_ids)
    for name in question_collection_names():
        if name not in _ready_collections:
            _call(f"load of collection {name}", _connect().load_collection, name, timeout=settings.MILVUS_SETUP_TIMEOUT)
            _ready_collections.add(name)
        _call("question delete", _connect().delete, collection_name=name, filter=expression)


# --- the deployment's collections, for the operator (`manage.py milvus_collections`) ----------------------------


def deployment_collection_names() -> list[str]:
    """Every collection named after this deployment's MILVUS_COLLECTION (it, or it followed by "_"): the chunk
    collection, the question collections, and whatever else carries the prefix."""
    prefix = settings.MILVUS_COLLECTION
    names = _call("list collections", _connect().list_collections)
    return sorted(name for name in names if name == prefix or name.startswith(f"{prefix}_"))


def collection_entity_count(*, name: str) -> int:
    """The entities Milvus reports for a collection, without loading it (Milvus standalone may count deleted ones
    until it compacts)."""
    stats = _call(f"statistics of collection {name}", _connect().get_collection_stats, name)
    return int(stats.get("row_count", 0))


def question_collection_drop(*, model: str) -> str:
    """Drop the question collection of embedding model `model` (a `model_id`, or "" for the one from before models
    were recorded) and return its name. Takes a model id, not a name, so nothing but a question collection of this
    deployment can be dropped here; whether its questions are still needed is the caller's decision. Another process
    that had it open fails one call on it (VectorStoreUnavailable, which resets its client) and creates it again,
    empty, only if it still runs that model."""
    name = question_collection_name(model=model)
    _call(f"drop of collection {name}", _connect().drop_collection, name, timeout=settings.MILVUS_SETUP_TIMEOUT)
    with _lock:
        _ready_collections.discard(name)
        _question_keyed.pop(name, None)
    return name
