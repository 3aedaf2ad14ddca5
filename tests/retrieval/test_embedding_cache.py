"""The embedding cache: reused within a tenant, never across tenants, and purged once no chunk has the text."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import numpy as np
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from retrieval import embeddings
from retrieval.embedding_cache import embedding_cache_purge, embeddings_cached
from retrieval.models import Chunk, Document, EmbeddingCacheEntry, KnowledgeBase
from retrieval.tasks import embedding_cache_purge as embedding_cache_purge_task

MODEL = "test-model"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _chunk(tenant, text: str) -> Chunk:  # noqa: ANN001
    kb = KnowledgeBase.objects.for_tenant(tenant).first() or KnowledgeBase.objects.create(tenant=tenant, name="kb")
    document = Document.objects.create(tenant=tenant, knowledge_base=kb, title=text[:20])
    return Chunk.objects.create(
        tenant=tenant, document=document, knowledge_base=kb, position=0, text=text, content_hash=_hash(text)
    )


def _entry(tenant, text: str, *, age: timedelta = timedelta(days=1)) -> EmbeddingCacheEntry:  # noqa: ANN001
    entry = EmbeddingCacheEntry.objects.create(
        tenant=tenant, model_name=MODEL, text_hash=_hash(text), vector=np.ones(4, dtype=np.float32).tobytes()
    )
    EmbeddingCacheEntry.objects.for_tenant(tenant).filter(pk=entry.pk).update(created_at=timezone.now() - age)
    return entry


def _hashes(tenant) -> set[str]:  # noqa: ANN001
    return set(EmbeddingCacheEntry.objects.for_tenant(tenant).values_list("text_hash", flat=True))


@pytest.mark.django_db
def test_a_text_is_encoded_once_per_tenant_and_never_served_from_another_tenants_entry(tenant, other_tenant):
    texts = ["Invoices are issued on the first day of the month.", "Passwords are reset from the login page."]
    hashes = [_hash(text) for text in texts]

    first, encoded = embeddings_cached(tenant_id=tenant.pk, texts=texts, text_hashes=hashes, model_name=MODEL)
    assert encoded == 2
    again, encoded = embeddings_cached(tenant_id=tenant.pk, texts=texts, text_hashes=hashes, model_name=MODEL)
    assert encoded == 0
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(first, embeddings.embed_texts(texts), atol=1e-6)

    # The other tenant holds the same text: it is encoded again (no timing tells it the first tenant has it).
    _, encoded = embeddings_cached(tenant_id=other_tenant.pk, texts=texts[:1], text_hashes=hashes[:1], model_name=MODEL)
    assert encoded == 1
    assert _hashes(tenant) == set(hashes)
    assert _hashes(other_tenant) == {hashes[0]}


@pytest.mark.django_db
def test_purge_deletes_what_no_chunk_of_the_tenant_has_and_keeps_the_rest(tenant, other_tenant):
    _chunk(tenant, "kept: a chunk of this tenant has it")
    _chunk(other_tenant, "only the other tenant has this text")
    _entry(tenant, "kept: a chunk of this tenant has it")
    _entry(tenant, "gone: its document was deleted")
    _entry(tenant, "only the other tenant has this text")  # the other tenant's chunk does not keep this entry
    _entry(tenant, "young: an ingestion run may be writing its chunks", age=timedelta(minutes=5))
    _entry(other_tenant, "only the other tenant has this text")

    assert embedding_cache_purge_task.apply().get() == 2
    assert _hashes(tenant) == {
        _hash("kept: a chunk of this tenant has it"),
        _hash("young: an ingestion run may be writing its chunks"),
    }
    assert _hashes(other_tenant) == {_hash("only the other tenant has this text")}
    assert embedding_cache_purge() == 0  # nothing left to do


@pytest.mark.django_db
def test_purge_walks_in_batches_and_a_deleted_document_releases_its_entries(tenant):
    chunks = [_chunk(tenant, f"passage number {i}") for i in range(7)]
    for i in range(7):
        _entry(tenant, f"passage number {i}")
    for chunk in chunks[:5]:
        chunk.document.delete()

    assert embedding_cache_purge(batch_size=2) == 5
    assert _hashes(tenant) == {_hash("passage number 5"), _hash("passage number 6")}


@pytest.mark.django_db
def test_a_deleted_tenant_takes_its_entries_with_it(tenant, other_tenant):
    _entry(tenant, "text")
    _entry(other_tenant, "text")
    tenant.delete()
    assert EmbeddingCacheEntry.objects.unscoped().count() == 1
    assert _hashes(other_tenant) == {_hash("text")}


@pytest.mark.django_db(transaction=True)
def test_migration_gives_each_shared_entry_to_the_tenants_that_hold_its_text(tenant, other_tenant):
    before = [("retrieval", "0003_ingestion_claims_cache_reindex")]
    after = [("retrieval", "0005_embedding_cache_tenant_required")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        apps = executor.loader.project_state(before).apps
        entry_model = apps.get_model("retrieval", "EmbeddingCacheEntry")
        kb_model = apps.get_model("retrieval", "KnowledgeBase")
        document_model = apps.get_model("retrieval", "Document")
        chunk_model = apps.get_model("retrieval", "Chunk")
        for owner, texts in ((tenant, ["shared text", "mine"]), (other_tenant, ["shared text"])):
            kb = kb_model.objects.create(tenant_id=owner.pk, name="kb")
            for text in texts:
                document = document_model.objects.create(tenant_id=owner.pk, knowledge_base=kb, title=text)
                chunk_model.objects.create(
                    tenant_id=owner.pk, document=document, knowledge_base=kb, position=0, text=text,
                    content_hash=_hash(text),
                )  # fmt: skip
        vectors = {}
        for text in ("shared text", "mine", "nobody has this any more"):
            vectors[text] = np.random.default_rng(len(text)).random(4).astype(np.float32).tobytes()
            entry_model.objects.create(model_name=MODEL, text_hash=_hash(text), vector=vectors[text])

        executor = MigrationExecutor(connection)
        executor.migrate(after)
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    assert _hashes(tenant) == {_hash("shared text"), _hash("mine")}
    assert _hashes(other_tenant) == {_hash("shared text")}
    assert EmbeddingCacheEntry.objects.unscoped().count() == 3
    for entry in EmbeddingCacheEntry.objects.unscoped():
        text = next(t for t in vectors if _hash(t) == entry.text_hash)
        assert bytes(entry.vector) == vectors[text]
