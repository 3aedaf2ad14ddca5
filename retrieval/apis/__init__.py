"""REST endpoints of ingestion and the retrieval test, one resource a module: `knowledge_bases`, `documents`, `bulk`
(many documents in one request), `chunks`, `search`; `common` holds the base that resolves what a key reaches. A key
limited to one knowledge base reaches nothing else: another knowledge base, like another tenant's, is a 404. What
other apps' endpoints share with these is in `retrieval.api_fields`."""

from retrieval.apis.bulk import DocumentBulkCreateApi
from retrieval.apis.chunks import ChunkDetailApi, DocumentChunkListApi
from retrieval.apis.documents import DocumentDetailApi, DocumentListCreateApi, DocumentReindexApi
from retrieval.apis.knowledge_bases import KnowledgeBaseDetailApi, KnowledgeBaseListCreateApi, KnowledgeBaseReindexApi
from retrieval.apis.search import KnowledgeBaseSearchApi

__all__ = [
    "ChunkDetailApi",
    "DocumentBulkCreateApi",
    "DocumentChunkListApi",
    "DocumentDetailApi",
    "DocumentListCreateApi",
    "DocumentReindexApi",
    "KnowledgeBaseDetailApi",
    "KnowledgeBaseListCreateApi",
    "KnowledgeBaseReindexApi",
    "KnowledgeBaseSearchApi",
]
