"""A `milvus-lite server` stopped while it wrote a segment's index file leaves that file empty, or holding only the
pages written so far; the platform's start of the next server (make run, and the tests' servers) removes it, so the
collection loads and Milvus Lite builds the index again from the segment, with every row still found. A whole index
file is left alone."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient

from kbplatform.devserver import hnsw_index_file_cut, milvus_lite_cut_index_files_remove
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


def _segments_indexed(server: MilvusServer) -> tuple[np.ndarray, list]:
    """A collection with one flushed segment and its index file written, on a server then stopped; its vectors and
    the index files' paths."""
    client = MilvusClient(uri=server.uri)
    vectors = _collection_with_an_index_file(client)
    data = server.data_dir / "data"
    segments = wait_for(
        lambda: sorted(data.glob("collections/*/partitions/*/data/data_*.parquet")),
        timeout=60,
        interval=0.5,
        what="the flushed segment's data file",
    )
    index_files = [segment.parent.parent / "indexes" / f"{segment.stem}.vector.hnsw.idx" for segment in segments]
    # Whole before the stop: a stop while Milvus Lite still writes one is what the tests below make by hand.
    wait_for(
        lambda: all(path.is_file() and path.stat().st_size and not hnsw_index_file_cut(path) for path in index_files),
        timeout=60,
        interval=0.5,
        what="the index files, whole",
    )
    server.stop()
    return vectors, index_files


@pytest.mark.parametrize("kept", ["nothing", "part"], ids=["empty", "cut-part-way"])
def test_an_index_file_cut_short_by_a_stop_is_removed_and_built_again(kept):
    server = MilvusServer()
    server.start()
    try:
        vectors, index_files = _segments_indexed(server)
        data = server.data_dir / "data"
        whole = {path: path.read_bytes() for path in index_files}
        assert milvus_lite_cut_index_files_remove(data) == []  # whole files stay
        assert all(path.is_file() for path in index_files)

        def cut() -> None:
            # What a stop in the middle of writing a segment's index leaves: the file, empty or with its first part
            # only (the HNSW graph or the vectors end past it), where Milvus Lite reads it.
            for path, content in whole.items():
                path.write_bytes(b"" if kept == "nothing" else content[: len(content) // 2])

        cut()
        assert sorted(milvus_lite_cut_index_files_remove(data)) == index_files
        cut()
        server.start()  # removes them again before the server reads the data
        client = MilvusClient(uri=server.uri)
        client.load_collection(COLLECTION)
        assert [_nearest_id(client, vectors[i]) for i in (0, 57, 199)] == [0, 57, 199]
    finally:
        server.close()


def test_every_length_short_of_a_whole_index_file_is_cut(tmp_path):
    """Wherever a stop cuts the file (a page, a part of the graph, a part of the vectors), it is cut; whole, it is
    not; a file of another kind is never called cut."""
    server = MilvusServer()
    server.start()
    try:
        _, index_files = _segments_indexed(server)
        content = index_files[0].read_bytes()
    finally:
        server.close()  # and its data with it
    path = tmp_path / "data_1.vector.hnsw.idx"
    path.write_bytes(content)
    assert not hnsw_index_file_cut(path)
    for length in sorted({4, 16, 40, 100, len(content) // 3, len(content) // 2, len(content) - 4, len(content) - 1}):
        path.write_bytes(content[:length])
        assert hnsw_index_file_cut(path), length
    path.write_bytes(b"not an index of this kind" * 10)
    assert not hnsw_index_file_cut(path)
