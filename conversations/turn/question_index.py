"""The tenant-scope question index: QA pairs' question vectors in Milvus, filled in again by a worker."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.utils import timezone

from conversations.models import (
    DedupScope,
    Turn,
)
from conversations.turn.candidates import epoch_seconds
from conversations.turn.policy import dedup_policy_get
from conversations.turn.state import (
    vector_from_bytes,
)
from retrieval import question_index
from retrieval.embeddings import model_id as embedding_model_id
from retrieval.embeddings import offered_models
from tenants.models import Tenant

logger = logging.getLogger(__name__)

QUESTION_BACKFILL_BATCH = 500


def question_index_backfill(
    *,
    tenant_id: int,
    turn_ids: list[int] | None = None,
    batch_size: int = QUESTION_BACKFILL_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Index the tenant's questions asked within its policy's TTL (only those of `turn_ids`, when given) for
    tenant-scope dedup; returns how many. Only questions an offered embedding model embedded are indexed, each into
    its model's collection: no other can be compared with a new question; nor are pairs answered from a partial index,
    which are never served. Safe to run twice (an upsert by turn id) and a no-op when the tenant no longer uses tenant
    scope. Raises VectorStoreUnavailable for the task to retry. `progress(count)` is told the questions of each batch
    indexed. The vectors are the turns' own (`Turn.question_vector`): nothing is embedded again."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        return 0
    policy = dedup_policy_get(tenant=tenant)
    if policy.scope != DedupScope.TENANT:
        return 0
    since = timezone.now() - timedelta(seconds=policy.ttl_seconds)
    indexed = 0
    for model in dict.fromkeys(embedding_model_id(name) for name in offered_models()):
        indexed += _model_questions_index(
            tenant=tenant, model=model, since=since, turn_ids=turn_ids, batch_size=batch_size, progress=progress
        )
    return indexed


def _model_questions_index(
    *,
    tenant: Tenant,
    model: str,
    since: datetime,
    turn_ids: list[int] | None,
    batch_size: int,
    progress: Callable[[int], None] | None,
) -> int:
    """`question_index_backfill` of the questions `model` (a model id) embedded."""
    turns = (
        Turn.objects.for_tenant(tenant)
        .filter(
            created_at__gte=since,
            question_vector_model=model,
            partial_index=False,
            **({"pk__in": turn_ids} if turn_ids is not None else {}),
        )
        .order_by("pk")
        .values_list("pk", "knowledge_base_id", "created_at", "question_vector", "metadata_filter_key")
    )
    indexed = 0
    last_pk = 0
    while True:
        batch = list(turns.filter(pk__gt=last_pk)[:batch_size])
        if not batch:
            return indexed
        rows = [
            question_index.QuestionVector(
                turn_id=pk,
                tenant_id=tenant.pk,
                knowledge_base_id=knowledge_base_id,
                created_ts=epoch_seconds(created_at),
                vector=vector_from_bytes(vector),
                metadata_filter_key=filter_key,
            )
            for pk, knowledge_base_id, created_at, vector, filter_key in batch
        ]
        written = question_index.question_vectors_upsert(rows=rows, model=model)
        indexed += written
        last_pk = batch[-1][0]
        if progress is not None:
            progress(written)
