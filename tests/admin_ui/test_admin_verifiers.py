"""The verifier admin: "Train from reviews" queues a version for the admin's own tenants only; activate and roll back
are one action each, and another tenant's versions are neither listed nor changed."""

from __future__ import annotations

import pytest
from django.urls import reverse

from conversations.dedup import tenant_verifiers
from conversations.models import DedupPolicy, DuplicateModelStatus, DuplicateModelVersion
from retrieval.embeddings import BUNDLED_MODEL_NAME
from tests.conversations.verifier_files import trained_version

pytestmark = pytest.mark.django_db

POLICIES_URL = reverse("admin:conversations_deduppolicy_changelist")
VERSIONS_URL = reverse("admin:conversations_duplicatemodelversion_changelist")


@pytest.fixture(autouse=True)
def model_dir(settings, tmp_path):
    settings.DUPLICATE_MODEL_DIR = tmp_path / "models"
    tenant_verifiers._models.clear()


def test_train_from_reviews_queues_a_version_of_the_admins_tenant_only(
    client, admin_a, tenant_a, tenant_b, django_capture_on_commit_callbacks, monkeypatch
):
    from conversations import tasks

    queued = []
    monkeypatch.setattr(tasks.duplicate_model_train_task, "delay", lambda *ids: queued.append(ids))
    client.force_login(admin_a)
    policies = DedupPolicy.objects.unscoped().filter(tenant__in=[tenant_a, tenant_b])
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            POLICIES_URL, {"action": "train_from_reviews", "_selected_action": [p.pk for p in policies]}
        )
    assert response.status_code == 302
    (row,) = DuplicateModelVersion.objects.unscoped().all()
    assert (row.tenant_id, row.status, row.started_by_label) == (tenant_a.pk, "queued", admin_a.username)
    assert queued == [(tenant_a.pk, row.pk)]
    # a second start while one is queued is a message, not a second version
    client.post(POLICIES_URL, {"action": "train_from_reviews", "_selected_action": [policies.get(tenant=tenant_a).pk]})
    assert DuplicateModelVersion.objects.unscoped().count() == 1


def test_activate_and_roll_back_are_one_action_each_and_stay_in_the_tenant(client, admin_a, tenant_a, tenant_b):
    mine, theirs = trained_version(tenant_a), trained_version(tenant_b)
    client.force_login(admin_a)
    listed = client.get(VERSIONS_URL)
    assert listed.status_code == 200 and "tenant-b" not in listed.content.decode()
    client.post(VERSIONS_URL, {"action": "activate", "_selected_action": [mine.pk, theirs.pk]})
    assert DuplicateModelVersion.objects.unscoped().get(pk=mine.pk).status == DuplicateModelStatus.ACTIVE
    assert DuplicateModelVersion.objects.unscoped().get(pk=theirs.pk).status == DuplicateModelStatus.CANDIDATE
    client.post(VERSIONS_URL, {"action": "roll_back", "_selected_action": [mine.pk]})
    assert DuplicateModelVersion.objects.unscoped().get(pk=mine.pk).status == DuplicateModelStatus.RETIRED
    # nothing left to roll back: a message, never a server error
    response = client.post(VERSIONS_URL, {"action": "roll_back", "_selected_action": [mine.pk]}, follow=True)
    assert response.status_code == 200 and "already decides" in response.content.decode()


def test_a_tenant_of_two_models_trains_and_rolls_back_each_models_verifier_on_its_own(
    client, admin_a, tenant_a, django_capture_on_commit_callbacks, monkeypatch
):
    """A tenant with an English and a Chinese knowledge base: "Train from reviews" queues one version per model, and
    rolling back the selected version's model leaves the other model's active verifier deciding."""
    from conversations import tasks
    from retrieval.embeddings import USE_MODEL_NAME
    from tests.factories import KnowledgeBaseFactory

    monkeypatch.setattr(tasks.duplicate_model_train_task, "delay", lambda *ids: None)
    KnowledgeBaseFactory(tenant=tenant_a)
    KnowledgeBaseFactory(tenant=tenant_a, embedding_model=USE_MODEL_NAME)
    client.force_login(admin_a)
    policy = DedupPolicy.objects.for_tenant(tenant_a).get()
    with django_capture_on_commit_callbacks(execute=True):
        client.post(POLICIES_URL, {"action": "train_from_reviews", "_selected_action": [policy.pk]})
    queued = DuplicateModelVersion.objects.for_tenant(tenant_a).order_by("version")
    assert [(row.embedding_model, row.status) for row in queued] == [
        (BUNDLED_MODEL_NAME, "queued"),
        (USE_MODEL_NAME, "queued"),
    ]
    queued.update(status=DuplicateModelStatus.FAILED)

    english, chinese = trained_version(tenant_a), trained_version(tenant_a, model=USE_MODEL_NAME)
    client.post(VERSIONS_URL, {"action": "activate", "_selected_action": [english.pk, chinese.pk]})
    statuses = dict(DuplicateModelVersion.objects.for_tenant(tenant_a).values_list("pk", "status"))
    assert statuses[english.pk] == statuses[chinese.pk] == DuplicateModelStatus.ACTIVE
    page = client.post(VERSIONS_URL, {"action": "roll_back", "_selected_action": [chinese.pk]}, follow=True)
    assert f"{USE_MODEL_NAME} rolled back; the shipped head decides" in page.content.decode()
    statuses = dict(DuplicateModelVersion.objects.for_tenant(tenant_a).values_list("pk", "status"))
    assert (statuses[english.pk], statuses[chinese.pk]) == (DuplicateModelStatus.ACTIVE, DuplicateModelStatus.RETIRED)
    listed = client.get(VERSIONS_URL).content.decode()
    assert f"learning curve of the {USE_MODEL_NAME} verifier" in listed
    assert f"learning curve of the {BUNDLED_MODEL_NAME} verifier" in listed


def _figures(recall_at_target: float, active: float, precision: float, recall: float) -> dict:
    judged = {
        "new": {"precision": precision, "recall": recall},
        "new_recall_at_target": recall_at_target,
        "active_recall_at_target": active,
    }
    return {"judge": "held_out_labels", "judges": {"held_out_labels": judged}, "kind_of_head": "trees",
            "gate": 0.68, "threshold": 0.76}  # fmt: skip


def test_the_versions_page_draws_each_tenants_learning_curve(client, admin_a, tenant_a, tenant_b):
    from conversations.models import DuplicateLabel, LabelSource

    first, second = trained_version(tenant_a), trained_version(tenant_a)
    DuplicateModelVersion.objects.for_tenant(tenant_a).filter(pk=first.pk).update(
        label_count=300, figures=_figures(0.05, 0.02, 0.8, 0.1)
    )
    DuplicateModelVersion.objects.for_tenant(tenant_a).filter(pk=second.pk).update(
        label_count=1000, figures=_figures(0.42, 0.03, 0.93, 0.4), status=DuplicateModelStatus.ACTIVE
    )
    trained_version(tenant_b)
    for number in range(3):
        DuplicateLabel.objects.create(
            tenant=tenant_a, question=f"q{number}", stored_question="s", is_duplicate=True, source=LabelSource.SUPPORT
        )
    client.force_login(admin_a)
    page = client.get(VERSIONS_URL).content.decode()
    assert page.count('aria-label="Learning curve of') == 2 and f"{tenant_a.name}: learning curve" in page
    assert "3 reviews that train so far" in page and "v2 decides (ringed)" in page
    # each version's held-out figures, the tree head and its own gate
    assert (
        "<td>0.420</td>" in page and "<td>0.030</td>" in page and "<td>trees</td>" in page and "<td>0.68</td>" in page
    )
    assert "v2 (active, trees, gate 0.68): 1000 labels" in page
    assert f"{tenant_b.name}: learning curve" not in page
