"""Tasks of the conversations app: thin, idempotent, one service call each."""

from __future__ import annotations

from celery import Task, shared_task

from conversations.services import conversations_purge_expired, dedup_figures_rollup, question_index_backfill
from conversations.training.verifiers import duplicate_model_train
from retrieval import question_index
from retrieval.tasks import MAX_RETRIES, retry_countdown
from retrieval.vectorstore import VectorStoreUnavailable
from tenants.models import Tenant


@shared_task(name="conversations.purge_expired", acks_late=True)
def conversations_purge_expired_task() -> int:
    """Delete expired conversations; running twice deletes nothing more."""
    return conversations_purge_expired()


@shared_task(bind=True, name="conversations.question_index_backfill", acks_late=True, max_retries=MAX_RETRIES)
def question_index_backfill_task(self: Task, tenant_id: int, turn_ids: list[int] | None = None) -> int:
    """Index a tenant's recent questions (or those of `turn_ids`) for tenant-scope dedup; Milvus being down is
    retried with backoff."""
    try:
        return question_index_backfill(tenant_id=tenant_id, turn_ids=turn_ids)
    except VectorStoreUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(self.request.retries)) from exc


@shared_task(bind=True, name="conversations.question_vectors_delete", acks_late=True, max_retries=MAX_RETRIES)
def question_vectors_delete_task(self: Task, tenant_id: int, turn_ids: list[int]) -> None:
    """Delete the question vectors of turns already deleted from the database (Milvus refused at the time); Milvus
    being down is retried with backoff. Deleting twice deletes nothing more."""
    try:
        question_index.question_vectors_delete(tenant_id=tenant_id, turn_ids=turn_ids)
    except VectorStoreUnavailable as exc:
        raise self.retry(exc=exc, countdown=retry_countdown(self.request.retries)) from exc


@shared_task(name="conversations.dedup_figures_rollup", acks_late=True)
def dedup_figures_rollup_task() -> int:
    """Roll up the dashboard's figures of the days that are over; running twice writes nothing more."""
    return dedup_figures_rollup()


@shared_task(name="conversations.duplicate_model_train", acks_late=True, soft_time_limit=3300, time_limit=3600)
def duplicate_model_train_task(tenant_id: int, version_id: int) -> str | None:
    """Train a queued verifier version from the tenant's reviews; a second run of one version does nothing, and a
    tenant that is gone is no error."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return None
    row = duplicate_model_train(tenant=tenant, version_id=version_id)
    return row.status if row is not None else None
