"""The embedding cache: reused within a tenant, never across tenants, and purged once no chunk has the text."""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from django.utils import timezone

from retrieval import embeddings, services
from retrieval.embedding_cache import embedding_cache_purge, embeddings_cached
from retrieval.models import Chunk, Document, DocumentStatus, EmbeddingCacheEntry, KnowledgeBase, SourceKind
from retrieval.tasks import embedding_cache_purge as embedding_cache_purge_task
from tests.migrations import migrations_crossed
from tests.retrieval.factories import kb_make

MODEL = "test-model@0123456789abcdef"  # a model identity, as embeddings.model_identity() gives


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _chunk(tenant, text: str) -> Chunk:
    kb = KnowledgeBase.objects.for_tenant(tenant).first() or KnowledgeBase.objects.create(tenant=tenant, name="kb")
    document = Document.objects.create(tenant=tenant, knowledge_base=kb, title=text[:20])
    return Chunk.objects.create(
        tenant=tenant, document=document, knowledge_base=kb, position=0, text=text, content_hash=_hash(text)
    )


def _entry(tenant, text: str, *, age: timedelta = timedelta(days=1)) -> EmbeddingCacheEntry:
    entry = EmbeddingCacheEntry.objects.create(
        tenant=tenant, model_name=MODEL, text_hash=_hash(text), vector=np.ones(4, dtype=np.float32).tobytes()
    )
    EmbeddingCacheEntry.objects.for_tenant(tenant).filter(pk=entry.pk).update(created_at=timezone.now() - age)
    return entry


def _hashes(tenant) -> set[str]:
    return set(EmbeddingCacheEntry.objects.for_tenant(tenant).values_list("text_hash", flat=True))


@pytest.mark.django_db
def test_a_text_is_encoded_once_per_tenant_and_never_served_from_another_tenants_entry(tenant, other_tenant):
    texts = ["Invoices are issued on the first day of the month.", "Passwords are reset from the login page."]
    hashes = [_hash(text) for text in texts]

    first, encoded = embeddings_cached(tenant_id=tenant.pk, texts=texts, model_identity=MODEL)
    assert encoded == 2
    again, encoded = embeddings_cached(tenant_id=tenant.pk, texts=texts, model_identity=MODEL)
    assert encoded == 0
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(first, embeddings.embed_texts(texts), atol=1e-6)

    # The other tenant holds the same text: it is encoded again (no timing tells it the first tenant has it).
    _, encoded = embeddings_cached(tenant_id=other_tenant.pk, texts=texts[:1], model_identity=MODEL)
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
    with migrations_crossed(before, after) as apps:
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

    assert _hashes(tenant) == {_hash("shared text"), _hash("mine")}
    assert _hashes(other_tenant) == {_hash("shared text")}
    assert EmbeddingCacheEntry.objects.unscoped().count() == 3
    for entry in EmbeddingCacheEntry.objects.unscoped():
        text = next(t for t in vectors if _hash(t) == entry.text_hash)
        assert bytes(entry.vector) == vectors[text]


def _process_restart(monkeypatch) -> None:
    """Forget the model the process loaded, as a new worker process would."""
    monkeypatch.setattr(embeddings, "_models", {})
    embeddings._tokenizer_of.cache_clear()
    embeddings._identity_of.cache_clear()


@pytest.fixture
def model_copy(tmp_path, settings, monkeypatch):
    """A directory named like the bundled model, holding links to its files except the pooling configuration (a
    copy, so a test can change the model in place); the process uses it for the test, then the bundled model again."""
    bundled = embeddings.model_path()

    def make(parent: str) -> Path:
        target = tmp_path / parent / embeddings.BUNDLED_MODEL_NAME
        for source in bundled.rglob("*"):
            if source.is_file():
                (target / source.relative_to(bundled)).parent.mkdir(parents=True, exist_ok=True)
                if source.name == "config.json" and source.parent.name == "1_Pooling":
                    shutil.copy(source, target / source.relative_to(bundled))
                else:
                    (target / source.relative_to(bundled)).symlink_to(source)
        return target

    yield make
    settings.EMBEDDING_MODEL_PATH = ""
    _process_restart(monkeypatch)


def _pooling_set(model_dir: Path, mode: str) -> None:
    config_path = model_dir / "1_Pooling" / "config.json"
    config = json.loads(config_path.read_text())
    for key in ("pooling_mode_cls_token", "pooling_mode_mean_tokens"):
        config[key] = key == f"pooling_mode_{mode}"
    config_path.write_text(json.dumps(config))


@pytest.mark.django_db
def test_a_model_changed_in_place_is_not_served_the_old_models_vectors(
    milvus_server, tenant, settings, monkeypatch, model_copy
):
    model_dir = model_copy("models")
    settings.EMBEDDING_MODEL_PATH = str(model_dir)
    _process_restart(monkeypatch)
    kb = kb_make(tenant, name="model-in-place")
    text = "Glaciers carve U-shaped valleys and leave moraines behind when they retreat."
    document = Document.objects.create(
        tenant=tenant, knowledge_base=kb, title="glacier", source_kind=SourceKind.TEXT, source_text=text
    )
    assert services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).encoded == 1

    # The model in the same directory is replaced by one that pools differently (other vectors), and the workers
    # restart with it. The knowledge base's vectors are the old model's: a document embedded by the new one would sit
    # among them in another vector space, so it is refused until the knowledge base is re-indexed, as for a model of
    # another name.
    _pooling_set(model_dir, "cls_token")
    _process_restart(monkeypatch)
    services.document_reindex(tenant=tenant, document=document)
    refused = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    assert refused.indexed == [] and "files changed" in refused.failed[document.pk]
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=kb.pk).update(reindex_status="running")
    services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=kb.pk)
    services.document_reindex(tenant=tenant, document=Document.objects.for_tenant(tenant).get(pk=document.pk))
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])

    assert run.indexed == [document.pk] and run.encoded == 1, "the old model's cached vector was served"
    vectors = EmbeddingCacheEntry.objects.for_tenant(tenant).values_list("vector", flat=True)
    assert len(vectors) == 2
    new_vector = embeddings.embed_texts([text])[0]
    assert any(np.allclose(np.frombuffer(bytes(v), dtype=np.float32), new_vector, atol=1e-6) for v in vectors)
    assert Document.objects.for_tenant(tenant).get(pk=document.pk).status == DocumentStatus.INDEXED


def test_a_models_identity_follows_its_files_not_its_directory(settings, monkeypatch, model_copy):
    identities = {}
    for parent in ("first", "second", "changed"):
        model_dir = model_copy(parent)
        if parent == "changed":
            _pooling_set(model_dir, "cls_token")
        settings.EMBEDDING_MODEL_PATH = str(model_dir)
        _process_restart(monkeypatch)
        identities[parent] = embeddings.model_identity()
    assert identities["first"] == identities["second"]  # the same model elsewhere keeps its cached vectors
    assert identities["changed"] != identities["first"]
    assert identities["first"].startswith(f"{embeddings.BUNDLED_MODEL_NAME}@")


@pytest.mark.django_db(transaction=True)
def test_migration_drops_the_entries_keyed_by_a_model_directorys_name_alone(tenant):
    before = [("retrieval", "0005_embedding_cache_tenant_required")]
    after = [("retrieval", "0006_embedding_cache_keyed_by_model_identity")]
    with migrations_crossed(before, after) as apps:
        entry_model = apps.get_model("retrieval", "EmbeddingCacheEntry")
        for model_name, text in (("all-MiniLM-L6-v2", "keyed by name"), (MODEL, "keyed by identity")):
            entry_model.objects.create(tenant_id=tenant.pk, model_name=model_name, text_hash=_hash(text), vector=b"")

    assert list(EmbeddingCacheEntry.objects.for_tenant(tenant).values_list("model_name", "text_hash")) == [
        (MODEL, _hash("keyed by identity"))
    ]


@pytest.mark.django_db
def test_a_new_knowledge_base_takes_the_model_the_workers_run(milvus_server, tenant, settings, monkeypatch, model_copy):
    """A deployment on its own model (EMBEDDING_MODEL_PATH=.../custom-minilm): a knowledge base created through the
    API records the bundled model's name by default, and its very first document used to fail with "re-index the
    knowledge base", which had nothing to re-index. An empty knowledge base now takes the workers' model."""
    copy = model_copy("custom")
    model_dir = copy.rename(copy.parent / "custom-minilm")
    settings.EMBEDDING_MODEL_PATH = str(model_dir)
    _process_restart(monkeypatch)
    kb = kb_make(tenant, name="custom-model")
    document = Document.objects.create(
        tenant=tenant, knowledge_base=kb, title="t", source_kind=SourceKind.TEXT, source_text="Moraines mark ice."
    )
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])

    assert run.indexed == [document.pk], run.failed
    kb.refresh_from_db()
    assert kb.embedding_model == "custom-minilm"
    assert kb.embedding_model_identity == embeddings.model_identity()
