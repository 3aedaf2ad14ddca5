"""Writes of the ingestion side, one concern a module; this package names the app's public write API.

- `knowledge_bases`: creating one;
- `documents`: creating (one or many), deleting and re-indexing documents, queueing their indexing, and queueing
  again those whose run or task was lost;
- `indexing`: the pipeline a worker runs on a batch of documents (`documents_index`), safe to run twice;
- `reindex`: re-indexing a whole knowledge base from its stored chunks;
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
    documents_recover_stalled,
    stored_file_name,
)
from retrieval.services.indexing import (
    TRANSIENT_ERRORS,
    IndexRun,
    TransientIngestError,
    chunk_vectors_upsert,
    documents_fail_after_retries,
    documents_index,
)
from retrieval.services.knowledge_bases import knowledge_base_create
from retrieval.services.reindex import (
    knowledge_base_reindex,
    knowledge_base_reindex_fail,
    knowledge_base_reindex_running,
    knowledge_base_reindex_start,
    knowledge_base_reindexes_recover,
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
    "knowledge_base_create",
    "knowledge_base_reindex",
    "knowledge_base_reindex_fail",
    "knowledge_base_reindex_running",
    "knowledge_base_reindex_start",
    "knowledge_base_reindexes_recover",
    "stored_file_name",
]
