"""A `milvus-lite server` stopped while it wrote a segment's index file leaves that file empty; the platform's start
of the next server (make run, and the tests' servers) removes it, so the collection loads and Milvus Lite builds the
index again from the segment, with every row still found."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient

from kbplatform.devserver import milvus_lite_cut_index_files_remove
from tests.services import MilvusServer, wait_for

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
    return vectors


def _nearest_id(client: MilvusClient, vector: np.ndarray) -> int:
    [hits] = client.search(COLLECTION, data=[vector.tolist()], limit=1, anns_field="vector")
    return int(hits[0]["id"])


def test_an_index_file_cut_short_by_a_stop_is_removed_and_built_again():
    server = MilvusServer()
    server.start()
    try:
        client = MilvusClient(uri=server.uri)
        vectors = _collection_with_an_index_file(client)
        data = server.data_dir / "data"
        segments = wait_for(
            lambda: sorted(data.glob("collections/*/partitions/*/data/data_*.parquet")),
            timeout=60,
            interval=0.5,
            what="the flushed segment's data file",
        )
        server.stop()
        # What a stop in the middle of writing a segment's index leaves: the file, empty, where Milvus Lite reads it.
        index_files = [segment.parent.parent / "indexes" / f"{segment.stem}.vector.hnsw.idx" for segment in segments]
        for path in index_files:
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(b"")
        assert sorted(milvus_lite_cut_index_files_remove(data)) == index_files
        for path in index_files:
            path.write_bytes(b"")

        server.start()  # removes them again before the server reads the data
        client = MilvusClient(uri=server.uri)
        client.load_collection(COLLECTION)
        assert [_nearest_id(client, vectors[i]) for i in (0, 57, 199)] == [0, 57, 199]
    finally:
        server.close()
