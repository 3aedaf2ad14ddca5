"""chunk_search: Milvus finds the vectors, the database says what they are. A vector that no longer matches its chunk
row (a database restored from a backup older than Milvus hands the ids of lost chunks out again) never shows a
chunk of another knowledge base or document (real PostgreSQL under CI, `milvus-lite server`)."""

from __future__ import annotations

import pytest

from retrieval import embeddings, vectorstore
from retrieval.models import Chunk, Document
from retrieval.selectors import chunk_search
from tests.conversations.helpers import indexed_kb

pytestmark = pytest.mark.django_db


def test_a_vector_whose_chunk_id_now_names_another_knowledge_bases_chunk_is_not_a_hit(milvus_server, tenant):
    handbook = indexed_kb(tenant, name="handbook")
    payroll = indexed_kb(tenant, {"salaries": ["The CEO earns 2.4 million dollars a year."]}, name="payroll")
    secret = Chunk.objects.for_tenant(tenant).get(knowledge_base=payroll)
    # Before the restore, chunk id `secret.pk` was a handbook chunk: its vector is still filed under the handbook.
    handbook_document = Document.objects.for_tenant(tenant).filter(knowledge_base=handbook).first()
    vectorstore.vectors_upsert(
        rows=[
            vectorstore.ChunkVector(
                chunk_id=secret.pk,
                tenant_id=tenant.pk,
                knowledge_base_id=handbook.pk,
                document_id=handbook_document.pk,
                vector=embeddings.embed_query("How much does the CEO earn?"),
            )
        ],
        dimension=handbook.embedding_dimension,
    )

    for grouped in (True, False):
        hits = chunk_search(
            tenant=tenant,
            knowledge_base=handbook,
            query_vector=embeddings.embed_query("How much does the CEO earn?"),
            limit=5,
            group_by_document=grouped,
        )
        assert hits and all(hit.chunk_id != secret.pk for hit in hits)
        assert {hit.document_id for hit in hits} <= set(handbook.documents.values_list("pk", flat=True))
