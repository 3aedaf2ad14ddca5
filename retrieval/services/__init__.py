"""Writes of the ingestion side, one concern a module; this package names the app's public write API.

- `knowledge_bases`: creating one, and changing how it ranks its chunks;
- `documents`: creating (one or many), deleting and re-indexing documents, and queueing their indexing;
- `recovery`: queueing again the documents whose run or task was lost, without flooding the broker in a backlog;
- `stored_files`: deleting uploaded files that no document holds (left by a process that died mid-upload);
- `indexing`: the pipeline a worker runs on a batch of documents (`documents_index`), safe to run twice, over its
  stages: `index_runs` (claims, leases, failures), `index_parse` (parsing, chunk rows), `index_embed` (vectors);
- `reindex`: re-indexing a whole knowledge base from its stored chunks;
- `text_index`: moving a knowledge base made before full text into the full-text collection.
- `chunks`: a chunk edited, disabled or enabled by hand.
"""

from retrieval.services.chunks import chunk_update
from retrieval.services.documents import (
    STORED_NAME_MAX_BYTES,
    BulkDocument,
    DocumentInput,
    document_create,
    document_delete,
    document_reindex,
    document_update,
    documents_create_bulk,
    documents_create_each,
    documents_enqueue,
    stored_file_name,
)
from retrieval.services.index_embed import chunk_vectors_upsert
from retrieval.services.index_runs import (
    TRANSIENT_ERRORS,
    IndexRun,
    TransientIngestError,
    documents_fail_after_retries,
)
from retrieval.services.indexing import documents_index
from retrieval.services.knowledge_bases import (
    embedding_model_checked,
    knowledge_base_create,
    knowledge_base_retrieval_set,
)
from retrieval.services.recovery import documents_recover_stalled, ingest_queue_marker_seen
from retrieval.services.reindex import (
    knowledge_base_reindex,
    knowledge_base_reindex_fail,
    knowledge_base_reindex_running,
    knowledge_base_reindex_start,
    knowledge_base_reindexes_recover,
)
from retrieval.services.stored_files import stored_files_orphaned_delete
from retrieval.services.text_index import (
    knowledge_base_text_index,
    knowledge_base_text_index_fail,
    knowledge_base_text_index_start,
    knowledge_base_text_indexes_recover,
)

__all__ = [
    "STORED_NAME_MAX_BYTES",
    "TRANSIENT_ERRORS",
    "BulkDocument",
    "DocumentInput",
    "IndexRun",
    "TransientIngestError",
    "chunk_update",
    "chunk_vectors_upsert",
    "document_create",
    "document_delete",
    "document_reindex",
    "document_update",
    "documents_create_bulk",
    "documents_create_each",
    "documents_enqueue",
    "documents_fail_after_retries",
    "documents_index",
    "documents_recover_stalled",
    "ingest_queue_marker_seen",
    "embedding_model_checked",
    "knowledge_base_create",
    "knowledge_base_retrieval_set",
    "knowledge_base_text_index",
    "knowledge_base_text_index_fail",
    "knowledge_base_text_index_start",
    "knowledge_base_text_indexes_recover",
    "knowledge_base_reindex",
    "knowledge_base_reindex_fail",
    "knowledge_base_reindex_running",
    "knowledge_base_reindex_start",
    "knowledge_base_reindexes_recover",
    "stored_file_name",
    "stored_files_orphaned_delete",
]
