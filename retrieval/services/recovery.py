"""Queueing again the documents whose run or task was lost, without flooding the broker during a backlog.

A document whose indexing run died holds an expired lease: it is queued again at once. A document still `queued`
long after it was queued either waits behind a backlog (its message is in the broker) or lost its message (a broker
that restarted without persistence, a publish that failed after commit). The broker cannot be asked which, so the
sweep asks the queue itself: it sends a marker task, and once a worker has taken the marker off the queue every
message sent before it has been taken too (the queue hands messages out in order). Only a document queued before
the newest marker taken is queued again; during a backlog that is none of them, however long the backlog lasts, and
one marker at a time is in flight. A marker lost with the broker is sent again after INGEST_QUEUED_STALE_SECONDS.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from kbplatform.jobs import task_enqueue_on_commit
from retrieval.models import Document, DocumentStatus, IngestQueueMarker
from retrieval.services.documents import documents_enqueue
from retrieval.services.index_runs import IN_PROGRESS

logger = logging.getLogger(__name__)

SWEEP_MAX_DOCUMENTS = 10_000
_MARKER_PK = 1


def ingest_queue_marker_seen(*, sent_at: datetime) -> None:
    """A worker took the marker sent at `sent_at` off the queue: every message sent before it has been taken."""
    IngestQueueMarker.objects.get_or_create(pk=_MARKER_PK)
    IngestQueueMarker.objects.filter(pk=_MARKER_PK).filter(
        Q(seen_at_sent__isnull=True) | Q(seen_at_sent__lt=sent_at)
    ).update(seen_at_sent=sent_at)


def _ingest_queue_marker_send(*, now: datetime, marker: IngestQueueMarker) -> None:
    """Send a marker unless one is still on its way (sent, not yet seen, and not so long ago that it must be lost)."""
    in_flight = marker.sent_at is not None and (marker.seen_at_sent is None or marker.seen_at_sent < marker.sent_at)
    if in_flight and marker.sent_at > now - timedelta(seconds=settings.INGEST_QUEUED_STALE_SECONDS):
        return
    IngestQueueMarker.objects.filter(pk=_MARKER_PK).update(sent_at=now)
    task_enqueue_on_commit("ingest_queue_marker", now.isoformat())


def documents_recover_stalled() -> int:
    """Queue again every document whose run died (lease expired), and every document queued for longer than
    INGEST_QUEUED_STALE_SECONDS whose message the workers have provably passed (see the module). Crosses tenants by
    design: it is the platform's own housekeeping, and each document is requeued under its own tenant. Claiming
    makes a duplicate queueing harmless. Returns how many were queued again."""
    now = timezone.now()
    stale_queued = now - timedelta(seconds=settings.INGEST_QUEUED_STALE_SECONDS)
    with transaction.atomic():
        marker, _ = IngestQueueMarker.objects.select_for_update().get_or_create(pk=_MARKER_PK)
        lost = Q(status__in=IN_PROGRESS, lease_expires_at__lt=now)
        stale = Q(status=DocumentStatus.QUEUED, updated_at__lt=stale_queued)
        if marker.seen_at_sent is not None:
            lost |= stale & Q(updated_at__lt=marker.seen_at_sent)
        rows = Document.objects.unscoped().filter(lost).values_list("tenant_id", "pk")[:SWEEP_MAX_DOCUMENTS]
        by_tenant: dict[int, list[int]] = defaultdict(list)
        for tenant_id, pk in rows:
            by_tenant[tenant_id].append(pk)
        for tenant_id, ids in by_tenant.items():
            Document.objects.filter(tenant_id=tenant_id, pk__in=ids, status=DocumentStatus.QUEUED).update(
                updated_at=now
            )
            documents_enqueue(tenant_id=tenant_id, document_ids=ids)
        waiting = Document.objects.unscoped().filter(stale).exclude(updated_at=now).exists()
        if waiting:
            _ingest_queue_marker_send(now=now, marker=marker)
    count = sum(len(ids) for ids in by_tenant.values())
    if count:
        logger.info("requeued %s stalled documents", count)
    return count
