"""A tenant's trained verifiers, one per embedding model: an English knowledge base on the bundled model and a Chinese
one on the multilingual model each have the verifier their own traffic taught, active at once; activating, shadowing
or rolling back one model's never touches the other's; a label trains the verifier of the model its question was
decided with."""

from __future__ import annotations

import pytest

from conversations.dedup import decisions, tenant_verifiers
from conversations.dedup.tenant_verifiers import tenant_verifiers_load
from conversations.models import DedupEvent, DuplicateLabel, DuplicateModelStatus, DuplicateModelVersion, LabelSource
from conversations.selectors import duplicate_labels_training, learning_curves
from conversations.training.verifiers import (
    duplicate_model_activate,
    duplicate_model_rollback,
    duplicate_model_shadow,
    duplicate_model_shadow_stop,
    duplicate_model_train_start,
    duplicate_model_version_create,
    verifier_embedding_models,
)
from kbplatform.errors import ApplicationError, ConflictError
from retrieval.embeddings import BUNDLED_MODEL_NAME, USE_MODEL_NAME, EmbeddingModelNotOffered
from tests.conversations.helpers import HANDBOOK, HELP_CENTRE_ZH, indexed_kb
from tests.conversations.test_api import ask, start
from tests.conversations.verifier_files import trained_version
from tests.factories import DedupEventFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db

ENGLISH, CHINESE = BUNDLED_MODEL_NAME, USE_MODEL_NAME


@pytest.fixture(autouse=True)
def model_dir(settings, tmp_path):
    settings.DUPLICATE_MODEL_DIR = tmp_path / "models"
    tenant_verifiers._models.clear()


def _status(row: DuplicateModelVersion) -> str:
    return DuplicateModelVersion.objects.unscoped().get(pk=row.pk).status


def test_each_model_has_its_own_active_shadow_and_rollback(tenant):
    en1, en2, zh1, zh2 = (
        trained_version(tenant, model=ENGLISH),
        trained_version(tenant, model=ENGLISH),
        trained_version(tenant, model=CHINESE),
        trained_version(tenant, model=CHINESE),
    )
    duplicate_model_activate(tenant=tenant, version_id=en1.pk)
    duplicate_model_activate(tenant=tenant, version_id=zh1.pk)
    assert _status(en1) == _status(zh1) == DuplicateModelStatus.ACTIVE  # both decide, each its own model's turns

    duplicate_model_activate(tenant=tenant, version_id=en2.pk)  # retires the English one only
    assert (_status(en1), _status(en2), _status(zh1)) == ("retired", "active", "active")
    duplicate_model_shadow(tenant=tenant, version_id=zh2.pk)
    english, chinese = (tenant_verifiers_load(tenant=tenant, embedding_model=m) for m in (ENGLISH, CHINESE))
    assert (english.active.version_id, english.shadow) == (en2.pk, None)
    assert (chinese.active.version_id, chinese.shadow.version_id) == (zh1.pk, zh2.pk)
    assert chinese.active.model.dimension == 512 and english.active.model.dimension == 384

    assert duplicate_model_rollback(tenant=tenant, embedding_model=ENGLISH).pk == en1.pk
    assert (_status(zh1), _status(zh2)) == ("active", "shadow")
    assert duplicate_model_rollback(tenant=tenant, embedding_model=CHINESE) is None  # its shipped head decides
    assert _status(en1) == DuplicateModelStatus.ACTIVE
    assert tenant_verifiers_load(tenant=tenant, embedding_model=CHINESE).active == decisions.Verifier()
    duplicate_model_shadow_stop(tenant=tenant, embedding_model=CHINESE)
    assert _status(zh2) == DuplicateModelStatus.CANDIDATE
    with pytest.raises(ApplicationError, match=CHINESE):
        duplicate_model_rollback(tenant=tenant, embedding_model=CHINESE)


def test_a_version_names_an_offered_model_and_trainings_queue_one_per_model(tenant, other_tenant):
    with pytest.raises(EmbeddingModelNotOffered, match="bge-m3"):
        duplicate_model_version_create(tenant=tenant, embedding_model="bge-m3")
    assert verifier_embedding_models(tenant=tenant) == [ENGLISH]  # no knowledge base: the deployment's default
    KnowledgeBaseFactory(tenant=tenant, embedding_model=CHINESE)
    KnowledgeBaseFactory(tenant=tenant)
    KnowledgeBaseFactory(tenant=other_tenant, embedding_model="a-model-no-longer-offered")
    assert verifier_embedding_models(tenant=tenant) == [ENGLISH, CHINESE]
    assert verifier_embedding_models(tenant=other_tenant) == [ENGLISH]  # searched with the primary model
    english = duplicate_model_train_start(tenant=tenant, embedding_model=ENGLISH)
    chinese = duplicate_model_train_start(tenant=tenant, embedding_model=CHINESE)  # not blocked by the English one
    assert (english.embedding_model, chinese.embedding_model) == (ENGLISH, CHINESE)
    with pytest.raises(ConflictError, match=CHINESE):
        duplicate_model_train_start(tenant=tenant, embedding_model=CHINESE)


def test_a_label_trains_the_verifier_of_the_model_its_question_was_decided_with(tenant, other_tenant):
    def labelled(question: str, model: str | None, owner=tenant) -> None:
        event = None if model is None else DedupEventFactory(tenant=owner, embedding_model=model)
        DuplicateLabel.objects.create(
            tenant=owner,
            dedup_event=event,
            question=question,
            stored_question="s",
            is_duplicate=True,
            source=LabelSource.SUPPORT if event else LabelSource.IMPORT,
        )

    labelled("english traffic", ENGLISH)
    labelled("chinese traffic", CHINESE)
    labelled("an event from before events named their model", "")
    labelled("a model the deployment stopped offering", "e5-small")
    labelled("imported", None)
    labelled("another tenant's", ENGLISH, owner=other_tenant)

    def questions(model: str) -> set[str]:
        return {pair.question for pair in duplicate_labels_training(tenant=tenant, embedding_model=model)}

    shared = {"an event from before events named their model", "imported"}
    assert questions(ENGLISH) == shared | {"english traffic", "a model the deployment stopped offering"}
    assert questions(CHINESE) == shared | {"chinese traffic"}

    for model in (ENGLISH, CHINESE):
        trained_version(tenant, model=model)
    curves = {curve.embedding_model: curve for curve in learning_curves(tenants=[tenant])}
    assert {model: curve.reviews for model, curve in curves.items()} == {ENGLISH: 4, CHINESE: 3}


@pytest.mark.integration
def test_an_english_and_a_chinese_knowledge_base_each_decide_with_their_own_verifier(
    api_client, tenant, redis_available, milvus_server
):
    english = indexed_kb(tenant, documents=HANDBOOK, name="help-en")
    chinese = indexed_kb(
        tenant, documents=HELP_CENTRE_ZH, name="help-zh", embedding_model=CHINESE, text_analyzer="chinese"
    )
    english_verifier, chinese_verifier = trained_version(tenant, model=ENGLISH), trained_version(tenant, model=CHINESE)
    duplicate_model_activate(tenant=tenant, version_id=english_verifier.pk)
    duplicate_model_activate(tenant=tenant, version_id=chinese_verifier.pk)
    for knowledge_base, first, again, verifier in (
        (english, "How do I reset my password?", "How can I reset my password?", english_verifier),
        (chinese, "怎么重置密码？", "如何重置密码？", chinese_verifier),
    ):
        conversation = start(api_client, knowledge_base)
        asked = ask(api_client, conversation, first)
        repeated = ask(api_client, conversation, again)
        assert repeated["dedup"]["action"] == "served_cached", repeated["dedup"]
        assert repeated["dedup"]["matched_turn_id"] == asked["turn_id"]
        event = DedupEvent.objects.for_tenant(tenant).get(turn_id=repeated["turn_id"])
        assert (event.verifier_id, event.verifier_label) == (verifier.pk, f"tenant model v{verifier.version}")
        assert event.embedding_model == verifier.embedding_model
        listed = api_client.get("/api/v1/audit-events/", {"conversation": conversation})
        assert listed.status_code == 200, listed.content
        assert {row["embedding_model"] for row in listed.json()["results"]} == {verifier.embedding_model}
    for model in (ENGLISH, CHINESE):
        listed = api_client.get("/api/v1/audit-events/", {"embedding_model": model})
        assert listed.status_code == 200, listed.content
        assert listed.json()["count"] == 2
        assert {row["embedding_model"] for row in listed.json()["results"]} == {model}
