"""The conversations' question index: the vectors of the questions their turns answered, for the tenant-wide
duplicate search (`conversations.turn.candidates`), built on `retrieval.milvus` like the chunks' vectors.

One collection per embedding model, one row per QA pair: the tenant-wide duplicate search is one ANN query, not a
Python loop over every stored question. Same rules as chunks: tenant as partition key, every filter built here
and naming it. A collection holds the vectors of one model only (named by `retrieval.embeddings.model_id`), so a
search never meets a vector of another model, whatever its size: after a model change the old model's questions
are simply not searched (and are found again if the operator switches back). Questions indexed before collections
were per model are in the collection without a model suffix, never searched; deletes reach every collection.
Each question carries the key of the metadata filter its turn searched under (QUESTION_FILTER_FIELD), and a search
names the key of the new question's: a stored answer is compared only with questions asked under an equal filter.
A collection made before the key was stored has no such field: its search names no key (the caller must keep only
the candidates of its own filter, as `conversations.turn.candidates` does from the turns' rows), until
`question_collection_drop` and a backfill (`manage.py milvus_rebuild --questions`) make it again with the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings

from retrieval import milvus
from retrieval.milvus import QUESTION_FILTER_FIELD, filter_build, filter_quote

_QUESTION_MODEL = re.compile(r"[0-9a-f]{1,32}")
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
    names = milvus.call("list collections", milvus.connect().list_collections)
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
    return milvus.collection_setup(
        name=name,
        primary="turn_id",
        int_fields=("knowledge_base_id", "created_ts"),
        dimension=dimension,
        key_fields=(QUESTION_FILTER_FIELD,),
    )


def question_collection_keyed(name: str) -> bool:
    """Whether existing question collection `name` stores each question's metadata filter key (read once per process,
    `retrieval.milvus.question_collection_keyed`)."""
    return milvus.question_collection_keyed(name)


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
            "tenant_id": milvus.tenant_key(row.tenant_id),
            "knowledge_base_id": row.knowledge_base_id,
            "created_ts": int(row.created_ts),
            "vector": [float(x) for x in row.vector],
            **({QUESTION_FILTER_FIELD: filter_key_checked(row.metadata_filter_key)} if keyed else {}),
        }
        for row in rows
    ]
    milvus.call("question upsert", milvus.connect().upsert, collection_name=name, data=data)
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
    results = milvus.call(
        "question search",
        milvus.connect().search,
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
        milvus.collection_load(name)
        milvus.call("question delete", milvus.connect().delete, collection_name=name, filter=expression)


def question_collection_drop(*, model: str) -> str:
    """Drop the question collection of embedding model `model` (a `model_id`, or "" for the one from before models
    were recorded) and return its name. Takes a model id, not a name, so nothing but a question collection of this
    deployment can be dropped here; whether its questions are still needed is the caller's decision. Another process
    that had it open fails one call on it (VectorStoreUnavailable, which resets its client) and creates it again,
    empty, only if it still runs that model."""
    name = question_collection_name(model=model)
    milvus.collection_drop(name)
    return name
