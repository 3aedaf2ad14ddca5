"""A `milvus-lite server` stopped while it wrote a segment's index file leaves that file empty; the platform's start
of the next server (make run, and the tests' servers) removes it, so the collection loads and Milvus Lite builds the
index again from the segment, with every row still found."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient

from kbplatform.devserver import milvus_lite_cut_index_files_remove
from tests.services import MilvusServer

pytestmark = pytest.mark.integration

COLLECTION = "cut_index_file"
DIMENSION = 8


def _collection_with_an_index_file(client: MilvusClient) -> np.ndarray:
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIMENSION)
    index = client.prepare_index_params()
    index.add_index(field_name="vector", index_type="HNSW", metric_type="COSINE", params={"M": 8, "efConstruction": 32})
    client.create_collection(COLLECTION, schema=schema, index_params=index)
    vectors = np.random.default_rng(7).normal(size=(200, DIMENSION)).astype(np.float32)
    client.insert(COLLECTION, [{"id": i, "vector": v.tolist()} for i, v in enumerate(vectors)])
    client.flush(COLLECTION)
    client.load_collection(COLLECTION)
    _nearest_id(client, vectors[0])  # a loaded segment's index is built, and written, by the time it is searched
    return vectors


def _nearest_id(client: MilvusClient, vector: np.ndarray) -> int:
    [hits] = client.search(COLLECTION, data=[vector.tolist()], limit=1, anns_field="vector")
    return int(hits[0]["id"])


def test_an_index_file_cut_short_by_a_stop_is_removed_and_built_again():
    server = MilvusServer()
    server.start()
    try:
        vectors = _collection_with_an_index_file(MilvusClient(uri=server.uri))
        server.stop()
        index_files = list((server.data_dir / "data").glob("collections/*/partitions/*/indexes/*.idx"))
        assert index_files, "the flush wrote no index file to cut short"
        for path in index_files:
            path.write_bytes(b"")  # what a stop in the middle of the write leaves

        # Without the removal the restarted server cannot load the collection: the case this guards against.
        assert milvus_lite_cut_index_files_remove(server.data_dir / "data") == index_files
        for path in index_files:
            path.write_bytes(b"")

        server.start()  # removes them again before the server reads the data
        client = MilvusClient(uri=server.uri)
        client.load_collection(COLLECTION)
        assert [_nearest_id(client, vectors[i]) for i in (0, 57, 199)] == [0, 57, 199]
    finally:
        server.close()
