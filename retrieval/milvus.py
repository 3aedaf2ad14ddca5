"""The connection to Milvus and the shape of its collections: the one module that holds a Milvus client.

Every call goes through `call` (a deadline, and any failure a VectorStoreUnavailable that resets the client), every
filter expression through `filter_build` (the tenant first, every value quoted: Milvus Lite ignores `filter_params`
templates and real Milvus rejects an empty `in []` list), and every collection is made and loaded by
`collection_setup`, which reads once per process what an existing one's schema holds. Two modules are built on it and
nothing else opens a client: `retrieval.vectorstore` (the chunks' vectors: writes, deletes, searches, flushes) and
`retrieval.question_index` (the conversations' question vectors).

Chunk collections keep `tenant_id` as the partition key and `doc_id` the document a chunk belongs to (collections made
before the field was named `doc_id` call it `document_id`, read from the schema, `CollectionCapabilities`); a chunk
collection made by this release also holds TEXT_FIELDS with their BM25 functions and a nullable JSON `metadata`.
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
from kbplatform.stems import LATIN_LANGUAGES

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
# A question collection's field for the key of the metadata filter its turn searched under (`retrieval.question_index`).
QUESTION_FILTER_FIELD = "metadata_filter_key"


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
    clauses = [f"tenant_id == {filter_quote(tenant_key(tenant_id))}"]
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


def tenant_key(tenant_id: int) -> str:
    return f"t{int(tenant_id)}"


# --- client ---------------------------------------------------------------------------------------------


def connect():  # noqa: ANN201 - pymilvus is imported on first use, not for a hint
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


def reset() -> None:
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


def call(operation: str, fn, *args, timeout: float | None = None, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201 - any client method
    """fn(*args, **kwargs) with a deadline (`MILVUS_TIMEOUT` unless given): pymilvus waits for a reply forever by
    default, so a Milvus that accepts connections but does not answer would hold a web worker until the web server
    killed it, and a worker's task until its time limit. Any failure, the deadline included, is
    VectorStoreUnavailable (a 503 for the API, a retry for the workers)."""
    try:
        return fn(*args, timeout=timeout or settings.MILVUS_TIMEOUT, **kwargs)
    except VectorStoreUnavailable:
        raise
    except Exception as exc:
        reset()
        raise VectorStoreUnavailable(f"Milvus {operation} failed: {exc}") from exc


# --- chunk text: the analysers of its fields -------------------------------------------------------------------------

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
# Analysers of a language written in Latin letters: each writes the `english` field, its words stemmed in its language
# before they reach it (`kbplatform.stems`), so no collection needs a field per language (Milvus Lite ignores a
# field's stemmer, and a collection's fields are fixed when it is made).
LANGUAGE_ANALYZERS = LATIN_LANGUAGES
ANALYZERS = (*TEXT_FIELDS, *LANGUAGE_ANALYZERS)


def text_field_analyzer(analyzer: str) -> str:
    """The analyser of TEXT_FIELDS whose field `analyzer`'s text is written to and searched in."""
    if analyzer in TEXT_FIELDS:
        return analyzer
    if analyzer in LANGUAGE_ANALYZERS:
        return ENGLISH
    raise ValueError(f"unknown text analyser {analyzer!r}")


# A VARCHAR holds at most 65,535 bytes. A chunk is at most 256 word pieces, far below that; should one be longer, its
# text is cut for BM25 only (the chunk row keeps it whole and is what a hit shows).
TEXT_MAX_BYTES = 65_535


def collection_setup(
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
    client = connect()

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

    call(f"setup of collection {name}", _ensure, timeout=settings.MILVUS_SETUP_TIMEOUT)
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
        client = connect()
        if client.has_collection(beside, timeout=timeout):
            return beside
        if not client.has_collection(prefix, timeout=timeout):
            return prefix
        fields = {field["name"] for field in client.describe_collection(prefix, timeout=timeout)["fields"]}
        return prefix if all(text in fields for text, _, _ in TEXT_FIELDS.values()) else beside

    found = call("lookup of the full-text collection", _find)
    _text_collection[:] = [found]
    return found


def chunk_collection_names() -> tuple[str, str]:
    """The names a chunk collection of this deployment may have: MILVUS_COLLECTION and the full-text collection beside
    it (`<MILVUS_COLLECTION>_text`, made when MILVUS_COLLECTION is a collection of vectors only). Nothing else is
    ever given either name. Pure: read from the settings, whether or not the collections exist."""
    prefix = settings.MILVUS_COLLECTION
    return prefix, f"{prefix}_text"


def collection_capabilities(name: str) -> CollectionCapabilities:
    """What the schema of a chunk collection that collection_ensure has set up holds."""
    return _capabilities.get(name, CollectionCapabilities())


def collection_load(name: str) -> None:
    """Load existing collection `name` once per process (a reopened collection is "released" until loaded)."""
    if name not in _ready_collections:
        call(f"load of collection {name}", connect().load_collection, name, timeout=settings.MILVUS_SETUP_TIMEOUT)
        _ready_collections.add(name)


def question_collection_keyed(name: str) -> bool:
    """Whether existing question collection `name` stores each question's metadata filter key: read from its schema
    once per process (a collection dropped and made again by another process is read again once a call on it has
    failed, as every failure resets this process's client)."""
    keyed = _question_keyed.get(name)
    if keyed is None:
        described = call(f"description of collection {name}", connect().describe_collection, name)
        keyed = _question_keyed[name] = QUESTION_FILTER_FIELD in {field["name"] for field in described["fields"]}
    return keyed


def collection_drop(name: str) -> None:
    """Drop collection `name` and forget what this process knew of it (another process that had it open fails one
    call on it, which resets its client)."""
    call(f"drop of collection {name}", connect().drop_collection, name, timeout=settings.MILVUS_SETUP_TIMEOUT)
    with _lock:
        _ready_collections.discard(name)
        _question_keyed.pop(name, None)


def vectorstore_ping() -> bool:
    try:
        call("ping", connect().list_collections)
        return True
    except VectorStoreUnavailable:
        return False


# --- the deployment's collections, for the operator (`manage.py milvus_collections`) ----------------------------


def deployment_collection_names() -> list[str]:
    """Every collection named after this deployment's MILVUS_COLLECTION (it, or it followed by "_"): the chunk
    collection, the question collections, and whatever else carries the prefix."""
    prefix = settings.MILVUS_COLLECTION
    names = call("list collections", connect().list_collections)
    return sorted(name for name in names if name == prefix or name.startswith(f"{prefix}_"))


def collection_entity_count(*, name: str) -> int:
    """The entities Milvus reports for a collection, without loading it (Milvus standalone may count deleted ones
    until it compacts)."""
    stats = call(f"statistics of collection {name}", connect().get_collection_stats, name)
    return int(stats.get("row_count", 0))
