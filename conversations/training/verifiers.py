"""A tenant's trained duplicate verifiers: training one from the tenant's own labels, activating it only when it beats
the decision in use, running a candidate in shadow, rolling back, and loading the ones a turn decides with.

Guarantees:
- a version is trained on its tenant's labels only (`selectors.duplicate_labels_training(tenant=...)`, or a pairs
  file an operator names) and its file is written at `verifier_path(tenant, version)`, derived from the tenant;
- a version belongs to one embedding model (`DuplicateModelVersion.embedding_model`): it learns from the labels of
  that model's conversations, and activating, shadowing or rolling back one model's verifier never touches another's,
  so a tenant's English and Chinese knowledge bases each have the verifier their own traffic taught;
- loading (`conversations.dedup.tenant_verifiers`) never lets one tenant's model decide for another.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from conversations.dedup import decisions
from conversations.dedup.duplicate_model import pair_model_default
from conversations.dedup.tenant_verifiers import tenant_verifiers_load, verifier_path
from conversations.models import DuplicateModelStatus, DuplicateModelVersion
from conversations.selectors import duplicate_labels_training
from conversations.training.labelled_pairs import LabelledQuestionPair
from conversations.training.verifier_training import TrainingRefused, labels_check, labels_sha256, verifier_train
from conversations.turn.policy import dedup_policy_get
from kbplatform.errors import ApplicationError, ConflictError, NotFoundError
from kbplatform.jobs import task_enqueue_on_commit
from retrieval.embeddings import embed_texts, knowledge_base_model, offered_models, text_readable
from retrieval.embeddings import model_name as embedding_model_name
from retrieval.models import KnowledgeBase
from tenants.models import Tenant
from tenants.services import tenant_settings_changed

logger = logging.getLogger(__name__)

Progress = Callable[[float, str], None]
EMBED_BATCH = 256


# --- training ------------------------------------------------------------------------------------------------------


def duplicate_model_version_create(
    *, tenant: Tenant, embedding_model: str, user: Any = None, source: str = "reviews"
) -> DuplicateModelVersion:
    """A new queued version of the tenant's verifier of `embedding_model` (an offered model's name; raises
    EmbeddingModelNotOffered for any other), numbered after the tenant's last one of any model."""
    embedding_model = embedding_model_name(embedding_model)
    label = (getattr(user, "get_username", lambda: "")() or "") if user is not None else ""
    for _ in range(3):
        number = (DuplicateModelVersion.objects.for_tenant(tenant).aggregate(top=Max("version"))["top"] or 0) + 1
        try:
            with transaction.atomic():
                return DuplicateModelVersion.objects.create(
                    tenant=tenant,
                    version=number,
                    embedding_model=embedding_model,
                    source=source[:255],
                    started_by=user if getattr(user, "pk", None) else None,
                    started_by_label=label or "system",
                )
        except IntegrityError:
            continue  # another start took this number: take the next
    raise ConflictError("Another training is being started for this tenant; try again.")


def duplicate_model_train_start(*, tenant: Tenant, embedding_model: str, user: Any = None) -> DuplicateModelVersion:
    """Queue a training of the tenant's verifier of `embedding_model` from its reviews (the
    `conversations.duplicate_model_train` task), after commit."""
    embedding_model = embedding_model_name(embedding_model)
    if (
        DuplicateModelVersion.objects.for_tenant(tenant)
        .filter(
            embedding_model=embedding_model,
            status__in=(DuplicateModelStatus.QUEUED, DuplicateModelStatus.TRAINING),
        )
        .exists()
    ):
        raise ConflictError(
            f"A verifier of this tenant for {embedding_model} is already being trained; wait for it to finish."
        )
    row = duplicate_model_version_create(tenant=tenant, embedding_model=embedding_model, user=user)
    task_enqueue_on_commit("conversations.duplicate_model_train", tenant.pk, row.pk)
    return row


def _progress_write(*, tenant: Tenant, row_id: int) -> Progress:
    def write(fraction: float, stage: str) -> None:
        DuplicateModelVersion.objects.for_tenant(tenant).filter(pk=row_id).update(
            progress=round(min(max(fraction, 0.0), 1.0), 3), stage=stage[:80]
        )

    return write


def _pairs_vectors(
    pairs: Sequence[LabelledQuestionPair], *, progress: Progress, model: str
) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors of each pair's question and stored question by `model`, each distinct text embedded once."""
    texts = list(dict.fromkeys([p.question for p in pairs] + [p.stored_question for p in pairs]))
    vectors: list[np.ndarray] = []
    for start in range(0, len(texts), EMBED_BATCH):
        vectors.append(embed_texts(texts[start : start + EMBED_BATCH], model=model))
        progress(0.05 + 0.45 * min(start + EMBED_BATCH, len(texts)) / len(texts), "embedding the labelled questions")
    index = {text: i for i, text in enumerate(texts)}
    matrix = np.concatenate(vectors) if vectors else np.zeros((0, 1), dtype=np.float32)
    return (
        matrix[[index[p.question] for p in pairs]],
        matrix[[index[p.stored_question] for p in pairs]],
    )


def verifier_embedding_models(*, tenant: Tenant) -> list[str]:
    """The embedding models the tenant's knowledge bases are searched with (`embeddings.knowledge_base_model`), in the
    order the deployment offers them; the deployment's default for a tenant with no knowledge base. Each has a
    verifier of its own to train: a verifier decides only for questions of its model."""
    named = set(KnowledgeBase.objects.for_tenant(tenant).values_list("embedding_model", flat=True))
    used = {knowledge_base_model(name) for name in named}
    return [model for model in offered_models() if model in used] or [embedding_model_name()]


def verifier_embedding_model(*, tenant: Tenant) -> str:
    """The embedding model a tenant's verifier is trained in when none is named: the one model every knowledge base
    of the tenant uses, else the deployment's default. So a tenant of one Chinese knowledge base on the multilingual
    model learns in that model's space without naming it."""
    models = verifier_embedding_models(tenant=tenant)
    return models[0] if len(models) == 1 else embedding_model_name()


def duplicate_model_train(
    *,
    tenant: Tenant,
    version_id: int,
    pairs: Sequence[LabelledQuestionPair] | None = None,
    progress: Progress | None = None,
) -> DuplicateModelVersion | None:
    """Train queued version `version_id` of the tenant's verifier, in the space of its embedding model, from `pairs`
    (default: the tenant's own labels of that model's conversations), write its file, and make it active when it
    beats that model's decision in use on the held-out labels at the tenant's precision target; else keep it as a
    candidate with its figures. Claimed by a conditional update, so a second run of the same version does nothing
    (returns the row as it stands; None when the row is gone)."""
    claimed = (
        DuplicateModelVersion.objects.for_tenant(tenant)
        .filter(pk=version_id, status=DuplicateModelStatus.QUEUED)
        .update(status=DuplicateModelStatus.TRAINING, progress=0.0, stage="loading the labels")
    )
    row = DuplicateModelVersion.objects.for_tenant(tenant).filter(pk=version_id).first()
    if not claimed or row is None:
        return row
    write = _progress_write(tenant=tenant, row_id=row.pk)

    def report(fraction: float, stage: str) -> None:
        write(fraction, stage)
        if progress is not None:
            progress(fraction, stage)

    try:
        embedding = embedding_model_name(row.embedding_model)
        if pairs is None:
            pairs = duplicate_labels_training(tenant=tenant, embedding_model=embedding)
        given = list(pairs)
        # A pair the embedding model cannot read on either side has a vector that says nothing: it trains noise.
        pairs = [
            p
            for p in given
            if text_readable(p.question, model=embedding) and text_readable(p.stored_question, model=embedding)
        ]
        unread = len(given) - len(pairs)
        left_out = f" ({unread} the embedding model cannot read left out)" if unread else ""
        report(0.02, f"{len(pairs)} labels{left_out}")
        DuplicateModelVersion.objects.for_tenant(tenant).filter(pk=row.pk).update(
            label_count=len(pairs), training_set_sha256=labels_sha256(pairs)
        )
        labels_check(pairs)
        policy = dedup_policy_get(tenant=tenant)
        # Labels are embedded by `embedding` (`_pairs_vectors`): the verifier starts from that model's shipped head
        # and is judged against the decision in use for that model (the shipped head when the active verifier was
        # trained on another model's vectors, as `decisions.duplicate_decide_verified` then decides).
        active = tenant_verifiers_load(tenant=tenant, embedding_model=embedding).active
        shipped = pair_model_default(embedding)
        if not decisions.verifier_reads(verifier=active, embedding_model=embedding, dimension=shipped.dimension):
            active = decisions.Verifier()
        first, second = (
            _pairs_vectors(pairs, progress=report, model=embedding) if pairs else (np.zeros((0, 1)), np.zeros((0, 1)))
        )
        trained = verifier_train(
            pairs=pairs,
            first=first,
            second=second,
            prior=shipped,
            active=active.model or shipped,
            threshold=policy.threshold,
            precision_target=policy.precision_target,
            progress=report,
            meta={
                "tenant_id": tenant.pk,
                "version": row.version,
                "embedding_model": embedding,
                "data": row.source,
                "data_sha256": labels_sha256(pairs),
                "active_when_trained": active.label,
            },
        )
    except TrainingRefused as exc:
        _finish(tenant=tenant, row_id=row.pk, status=DuplicateModelStatus.FAILED, error=str(exc))
        return DuplicateModelVersion.objects.for_tenant(tenant).get(pk=row.pk)
    except Exception as exc:
        _finish(tenant=tenant, row_id=row.pk, status=DuplicateModelStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    path = verifier_path(tenant=tenant, version=row.version)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(trained.payload, indent=1) + "\n", encoding="utf-8")
    temporary.replace(path)
    figures = {**trained.figures, "compared_with": active.label}
    with transaction.atomic():
        _finish(
            tenant=tenant,
            row_id=row.pk,
            status=DuplicateModelStatus.CANDIDATE,
            figures=figures,
            decision_note=("activated: " if trained.beats_active else "kept as a candidate: ") + trained.note,
        )
        if trained.beats_active:
            duplicate_model_activate(tenant=tenant, version_id=row.pk)
    return DuplicateModelVersion.objects.for_tenant(tenant).get(pk=row.pk)


def _finish(*, tenant: Tenant, row_id: int, status: str, **fields: Any) -> None:
    DuplicateModelVersion.objects.for_tenant(tenant).filter(pk=row_id).update(
        status=status,
        progress=1.0,
        stage="done" if status != DuplicateModelStatus.FAILED else "failed",
        finished_at=timezone.now(),
        **{k: (v[:300] if k == "decision_note" else v) for k, v in fields.items()},
    )


# --- which version decides -----------------------------------------------------------------------------------------


def _version_of(*, tenant: Tenant, version_id: int) -> DuplicateModelVersion:
    row = DuplicateModelVersion.objects.for_tenant(tenant).select_for_update().filter(pk=version_id).first()
    if row is None:
        raise NotFoundError("Verifier version not found.")
    return row


_DEPLOYABLE = (DuplicateModelStatus.CANDIDATE, DuplicateModelStatus.SHADOW, DuplicateModelStatus.RETIRED)


@transaction.atomic
def duplicate_model_activate(*, tenant: Tenant, version_id: int) -> DuplicateModelVersion:
    """Make a trained version the one that decides the turns of its embedding model's knowledge bases; the one of that
    model active before is retired (and can be activated again: that is a rollback). Other models' are untouched."""
    row = _version_of(tenant=tenant, version_id=version_id)
    if row.status == DuplicateModelStatus.ACTIVE:
        return row
    if row.status not in _DEPLOYABLE:
        raise ApplicationError(f"Version v{row.version} is {row.status}: only a trained version can be activated.")
    DuplicateModelVersion.objects.for_tenant(tenant).filter(
        embedding_model=row.embedding_model, status=DuplicateModelStatus.ACTIVE
    ).update(status=DuplicateModelStatus.RETIRED)
    row.status, row.activated_at = DuplicateModelStatus.ACTIVE, timezone.now()
    row.save(update_fields=["status", "activated_at"])
    tenant_settings_changed(tenant=tenant)
    return row


@transaction.atomic
def duplicate_model_rollback(*, tenant: Tenant, embedding_model: str) -> DuplicateModelVersion | None:
    """Retire the active version of `embedding_model` and reactivate the one of that model active before it, or, with
    none, its shipped head (None)."""
    current = (
        DuplicateModelVersion.objects.for_tenant(tenant)
        .select_for_update()
        .filter(embedding_model=embedding_model, status=DuplicateModelStatus.ACTIVE)
        .first()
    )
    if current is None:
        raise ApplicationError(
            f"No trained verifier of {embedding_model} is active: the shipped head already decides its turns."
        )
    current.status = DuplicateModelStatus.RETIRED
    current.save(update_fields=["status"])
    previous = (
        DuplicateModelVersion.objects.for_tenant(tenant)
        .filter(embedding_model=embedding_model, status=DuplicateModelStatus.RETIRED, activated_at__isnull=False)
        .exclude(pk=current.pk)
        .filter(activated_at__lt=current.activated_at)
        .order_by("-activated_at")
        .first()
    )
    if previous is not None:
        # It keeps its own activation time, so a second rollback goes further back, not to the version just retired.
        previous.status = DuplicateModelStatus.ACTIVE
        previous.save(update_fields=["status"])
    tenant_settings_changed(tenant=tenant)
    return previous


@transaction.atomic
def duplicate_model_shadow(*, tenant: Tenant, version_id: int) -> DuplicateModelVersion:
    """Run a trained version in shadow beside the active one of its embedding model (that model's shadow before it
    goes back to candidate)."""
    row = _version_of(tenant=tenant, version_id=version_id)
    if row.status == DuplicateModelStatus.SHADOW:
        return row
    if row.status not in (DuplicateModelStatus.CANDIDATE, DuplicateModelStatus.RETIRED):
        raise ApplicationError(f"Version v{row.version} is {row.status}: only a trained, inactive one can shadow.")
    _shadow_stopped(tenant=tenant, embedding_model=row.embedding_model)
    row.status = DuplicateModelStatus.SHADOW
    row.save(update_fields=["status"])
    tenant_settings_changed(tenant=tenant)
    return row


@transaction.atomic
def duplicate_model_shadow_stop(*, tenant: Tenant, embedding_model: str) -> None:
    """Stop the shadow of `embedding_model`'s verifier (it goes back to candidate); nothing when none runs."""
    _shadow_stopped(tenant=tenant, embedding_model=embedding_model)
    tenant_settings_changed(tenant=tenant)


def _shadow_stopped(*, tenant: Tenant, embedding_model: str) -> None:
    DuplicateModelVersion.objects.for_tenant(tenant).filter(
        embedding_model=embedding_model, status=DuplicateModelStatus.SHADOW
    ).update(status=DuplicateModelStatus.CANDIDATE)
