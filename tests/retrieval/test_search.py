"""chunk_search: Milvus finds the vectors, the database says what they are. A vector that no longer matches its chunk
row (a database restored from a backup older than Milvus hands the ids of lost chunks out again) never shows a
chunk of another knowledge base or document (real PostgreSQL under CI, `milvus-lite server`)."""

from __future__ import annotations

import pytest

from retrieval import embeddings, vectorstore
from retrieval.models import REINDEX_FROM_UNRECORDED, Chunk, Document, KnowledgeBase
from retrieval.selectors import (
    IndexStatus,
    chunk_search,
    embedding_model_mismatch,
    index_state,
    knowledge_bases_awaiting_reindex,
)
from tests.conversations.helpers import indexed_kb


@pytest.mark.django_db
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
                text="How much does the CEO earn?",
            )
        ],
        dimension=handbook.embedding_dimension,
    )

    for grouped in (True, False):
        hits = chunk_search(
            tenant=tenant,
            knowledge_base=handbook,
            query_vector=embeddings.embed_query("How much does the CEO earn?"),
            query_text="How much does the CEO earn?",
            query_model_identity=embeddings.model_identity(),
            limit=5,
            group_by_document=grouped,
        )
        assert hits and all(hit.chunk_id != secret.pk for hit in hits)
        assert {hit.document_id for hit in hits} <= set(handbook.documents.values_list("pk", flat=True))


# --- index_state: which model's vectors a search would rank (pure, no database) ---------------------------------

BUNDLED = "all-MiniLM-L6-v2@0123456789abcdef"
REPLACED_IN_PLACE = "all-MiniLM-L6-v2@fedcba9876543210"
OTHER = "e5-small@0123456789abcdef"


def _kb(
    identity: str = BUNDLED,
    *,
    name: str = "all-MiniLM-L6-v2",
    reindex: str = "idle",
    progress: float = 0.0,
    moved_from: str = "",
):
    return KnowledgeBase(
        embedding_model=name,
        embedding_model_identity=identity,
        reindex_status=reindex,
        reindex_progress=progress,
        reindex_from_model_identity=moved_from,
    )


@pytest.mark.parametrize(
    ("knowledge_base", "query", "status", "progress"),
    [
        (_kb(), BUNDLED, IndexStatus.CURRENT, None),
        (_kb(reindex="done", progress=1.0), BUNDLED, IndexStatus.CURRENT, None),
        (_kb(reindex="running", progress=0.25), BUNDLED, IndexStatus.REINDEXING, 0.25),
        (_kb(reindex="running", progress=0.25, moved_from=OTHER), BUNDLED, IndexStatus.REINDEXING, 0.25),
        # A failed same-model rebuild left every vector the model's; a failed model change left some of the old one's.
        (_kb(reindex="failed", progress=0.5), BUNDLED, IndexStatus.CURRENT, None),
        (_kb(reindex="failed", progress=0.5, moved_from=OTHER), BUNDLED, IndexStatus.REINDEX_FAILED, None),
        (_kb(reindex="failed", moved_from=REINDEX_FROM_UNRECORDED), BUNDLED, IndexStatus.REINDEX_FAILED, None),
        # The model replaced in place: same name, other files.
        (_kb(), REPLACED_IN_PLACE, IndexStatus.OTHER_MODEL, None),
        (_kb(name="e5-small", identity=OTHER), BUNDLED, IndexStatus.OTHER_MODEL, None),
        # A re-index queued but not yet taken up by a worker: the identity is still the old model's.
        (_kb(reindex="running", progress=0.0), OTHER, IndexStatus.OTHER_MODEL, 0.0),
        (_kb(reindex="failed"), OTHER, IndexStatus.OTHER_MODEL, None),
        (_kb(reindex="failed", moved_from=OTHER), OTHER, IndexStatus.OTHER_MODEL, None),
        # No identity recorded (made before identities were, or no vector yet): judged by the model's name.
        (_kb(""), BUNDLED, IndexStatus.CURRENT, None),
        (_kb(""), REPLACED_IN_PLACE, IndexStatus.CURRENT, None),
        (_kb("", reindex="running", progress=0.5), BUNDLED, IndexStatus.REINDEXING, 0.5),
        (_kb(""), OTHER, IndexStatus.OTHER_MODEL, None),
        (_kb("", name="x" * 200), "x" * 180 + "@0123456789abcdef", IndexStatus.CURRENT, None),
    ],
)
def test_index_state(knowledge_base, query, status, progress):
    state = index_state(knowledge_base=knowledge_base, query_model_identity=query)
    assert (state.status, state.reindex_progress) == (status, progress)
    assert state.knowledge_base_model == (knowledge_base.embedding_model_identity or knowledge_base.embedding_model)


def test_the_refusal_names_both_models_and_says_what_to_do():
    knowledge_base = _kb(name="e5-small", identity=OTHER)
    state = index_state(knowledge_base=knowledge_base, query_model_identity=BUNDLED)
    error = embedding_model_mismatch(knowledge_base=knowledge_base, state=state, query_model_identity=BUNDLED)
    assert error.status_code == 409
    assert "'e5-small'" in error.message and "'all-MiniLM-L6-v2'" in error.message
    assert "Re-index the knowledge base" in error.message
    assert error.extra["code"] == "embedding_model_mismatch"
    assert (error.extra["knowledge_base_model"], error.extra["query_model"]) == (OTHER, BUNDLED)

    replaced = _kb()
    state = index_state(knowledge_base=replaced, query_model_identity=REPLACED_IN_PLACE)
    error = embedding_model_mismatch(knowledge_base=replaced, state=state, query_model_identity=REPLACED_IN_PLACE)
    assert "another version of 'all-MiniLM-L6-v2'" in error.message

    queued = _kb(name="e5-small", identity=OTHER, reindex="running")
    state = index_state(knowledge_base=queued, query_model_identity=BUNDLED)
    error = embedding_model_mismatch(knowledge_base=queued, state=state, query_model_identity=BUNDLED)
    assert "queued" in error.message and error.extra["reindex_status"] == "running"


def test_the_refusal_of_a_failed_model_change_says_which_models_are_mixed_and_to_run_it_again():
    failed = _kb(reindex="failed", moved_from=OTHER)
    failed.reindex_error = "Milvus is down"
    state = index_state(knowledge_base=failed, query_model_identity=BUNDLED)
    error = embedding_model_mismatch(knowledge_base=failed, state=state, query_model_identity=BUNDLED)
    assert error.status_code == 409 and error.extra["code"] == "embedding_model_mismatch"
    assert "stopped part way" in error.message and "Milvus is down" in error.message
    assert "'e5-small'" in error.message and "'all-MiniLM-L6-v2'" in error.message
    assert "Re-index the knowledge base again" in error.message
    assert (error.extra["reindex_status"], error.extra["reindex_from_model"]) == ("failed", OTHER)

    unrecorded = _kb(reindex="failed", moved_from=REINDEX_FROM_UNRECORDED)
    state = index_state(knowledge_base=unrecorded, query_model_identity=BUNDLED)
    error = embedding_model_mismatch(knowledge_base=unrecorded, state=state, query_model_identity=BUNDLED)
    assert "stopped part way" in error.message and "not recorded" in error.message


def _kb_holding(tenant, name: str, identity: str, *, model: str = "all-MiniLM-L6-v2", chunk: bool = True):
    knowledge_base = KnowledgeBase.objects.create(
        tenant=tenant, name=name, embedding_model=model, embedding_model_identity=identity
    )
    if chunk:
        document = Document.objects.create(tenant=tenant, knowledge_base=knowledge_base, title=name)
        Chunk.objects.create(
            tenant=tenant, document=document, knowledge_base=knowledge_base, position=0, text="x", content_hash="h"
        )
    return knowledge_base


@pytest.mark.django_db
def test_the_knowledge_bases_awaiting_a_reindex_are_those_a_search_refuses(tenant, other_tenant):
    current = embeddings.model_identity()
    replaced = embeddings.identity_name(current) + "@ffffffffffffffff"
    awaiting = {
        _kb_holding(tenant, "replaced", replaced).pk,
        _kb_holding(tenant, "other", OTHER, model="e5-small").pk,
        _kb_holding(tenant, "legacy-other", "", model="e5-small").pk,
        _kb_holding(tenant, "queued", OTHER, model="e5-small").pk,
    }
    KnowledgeBase.objects.for_tenant(tenant).filter(name="queued").update(reindex_status="running")
    awaiting.add(_kb_holding(tenant, "failed-model-change", current).pk)
    KnowledgeBase.objects.for_tenant(tenant).filter(name="failed-model-change").update(
        reindex_status="failed", reindex_from_model_identity=OTHER
    )
    _kb_holding(tenant, "failed-rebuild", current)
    KnowledgeBase.objects.for_tenant(tenant).filter(name="failed-rebuild").update(reindex_status="failed")
    _kb_holding(tenant, "current", current)
    _kb_holding(tenant, "legacy-current", "")
    _kb_holding(tenant, "empty-other", OTHER, model="e5-small", chunk=False)
    theirs = _kb_holding(other_tenant, "theirs", OTHER, model="e5-small")

    mine = KnowledgeBase.objects.for_tenant(tenant)
    found = selectors_awaiting(mine, current)
    assert found == awaiting
    assert found == {
        kb.pk
        for kb in mine
        if index_state(knowledge_base=kb, query_model_identity=current).status
        in (IndexStatus.OTHER_MODEL, IndexStatus.REINDEX_FAILED)
        and kb.chunks.exists()
    }
    assert selectors_awaiting(KnowledgeBase.objects.unscoped(), current) == awaiting | {theirs.pk}


def selectors_awaiting(knowledge_bases, identity: str) -> set[int]:
    return set(
        knowledge_bases_awaiting_reindex(knowledge_bases=knowledge_bases, query_model_identity=identity).values_list(
            "pk", flat=True
        )
    )
