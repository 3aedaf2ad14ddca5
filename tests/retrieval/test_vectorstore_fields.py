"""The chunk collection's document field is `doc_id` (searches group by it, exclusions name it); collections created
when it was `document_id` keep working, against a real `milvus-lite server`."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from retrieval import milvus, vectorstore

DIMENSION = 8
TENANT = 7


def _vectors() -> dict[int, tuple[int, np.ndarray]]:
    """chunk id -> (document id, unit vector): documents 1 and 2 have two chunks each, document 3 one."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=DIMENSION)
    chunks = {}
    for chunk_id, document_id in ((11, 1), (12, 1), (21, 2), (22, 2), (31, 3)):
        vector = base + rng.normal(scale=0.3, size=DIMENSION)
        chunks[chunk_id] = (document_id, vector / np.linalg.norm(vector))
    return chunks


def _exercise(collection: str) -> None:
    chunks = _vectors()
    vectorstore.vectors_upsert(
        rows=[
            vectorstore.ChunkVector(chunk_id=c, tenant_id=TENANT, knowledge_base_id=5, document_id=d, vector=v, text="")
            for c, (d, v) in chunks.items()
        ],
        dimension=DIMENSION,
        collection=collection,
    )
    query = np.mean([v for _, v in chunks.values()], axis=0)

    def search(**kwargs) -> list[vectorstore.SearchHit]:
        return vectorstore.vectors_search(
            tenant_id=TENANT, knowledge_base_id=5, query_vector=query, limit=5, dimension=DIMENSION,
            collection=collection, **kwargs,
        )  # fmt: skip

    grouped = search()
    assert sorted(hit.document_id for hit in grouped) == [1, 2, 3]  # one chunk per document
    assert all(chunks[hit.chunk_id][0] == hit.document_id for hit in grouped)
    assert sorted(hit.document_id for hit in search(exclude_document_ids=[1, 3])) == [2]
    assert len(search(group_by_document=False)) == 5
    vectorstore.vectors_delete_stale(
        tenant_id=TENANT, dimension=DIMENSION, document_ids=[2], keep_chunk_ids=[21], collection=collection
    )
    vectorstore.vectors_delete(tenant_id=TENANT, dimension=DIMENSION, document_ids=[3], collection=collection)
    assert sorted(hit.chunk_id for hit in search(group_by_document=False)) == [11, 12, 21]


def _fields(collection: str) -> set[str]:
    return {field["name"] for field in milvus.connect().describe_collection(collection)["fields"]}


def test_a_new_chunk_collection_groups_and_excludes_by_doc_id(milvus_server):
    collection = f"fields_new_{uuid.uuid4().hex[:8]}"
    vectorstore.collection_ensure(dimension=DIMENSION, collection=collection)
    assert {"doc_id", "chunk_id", "tenant_id", "knowledge_base_id"} <= _fields(collection)
    assert "document_id" not in _fields(collection)
    _exercise(collection)


def test_a_collection_from_before_keeps_its_document_id_field(milvus_server):
    from pymilvus import DataType

    collection = f"fields_legacy_{uuid.uuid4().hex[:8]}"
    client = milvus.connect()
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("chunk_id", DataType.INT64, is_primary=True)
    schema.add_field("tenant_id", DataType.VARCHAR, max_length=64, is_partition_key=True)
    schema.add_field("knowledge_base_id", DataType.INT64)
    schema.add_field("document_id", DataType.INT64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIMENSION)
    index_params = client.prepare_index_params()
    index_params.add_index(field_name="vector", index_type="HNSW", metric_type="COSINE", params={"M": 16})
    client.create_collection(collection_name=collection, schema=schema, index_params=index_params)

    milvus.reset()  # a new process: it learns the field's name from the collection
    vectorstore.collection_ensure(dimension=DIMENSION, collection=collection)
    assert vectorstore._doc_field(collection) == "document_id"
    _exercise(collection)


def test_filter_build_refuses_an_unknown_document_field():
    with pytest.raises(ValueError, match="document field"):
        vectorstore.filter_build(tenant_id=1, document_ids=[1], doc_field="tenant_id")
