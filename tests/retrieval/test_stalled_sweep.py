"""The stalled-document sweep during a backlog: documents waiting behind other messages are never queued again,
however long they wait; documents whose message was lost are queued again once a worker has taken the sweep's queue
marker; one marker is in flight at a time, and a lost marker is sent again."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from retrieval import services, tasks
from retrieval.models import Document, DocumentStatus, IngestQueueMarker, SourceKind
from tests.retrieval.factories import kb_make
from tests.services import wait_for

BACKLOG = 300


class _Broker:
    """What the sweep sends, recorded instead of published: document messages by id, and marker send times."""

    def __init__(self, monkeypatch) -> None:
        self.documents: list[int] = []
        self.markers: list[str] = []
        monkeypatch.setattr(tasks.document_index, "delay", lambda doc_id, *a, **k: self.documents.append(doc_id))
        monkeypatch.setattr(tasks.documents_index_batch, "delay", lambda ids, *a, **k: self.documents.extend(ids))
        monkeypatch.setattr(tasks.ingest_queue_marker, "delay", self.markers.append)

    def take_marker(self) -> None:
        """A worker takes the newest marker off the queue (every message sent before it was taken before it)."""
        tasks.ingest_queue_marker.run(self.markers[-1])


def _backlog(tenant, count: int, *, age_seconds: float) -> list[int]:
    kb = kb_make(tenant, name=f"backlog-{Document.objects.unscoped().count()}")
    documents = [
        Document(
            tenant=tenant,
            knowledge_base=kb,
            title=f"doc {i}",
            source_kind=SourceKind.TEXT,
            source_text=f"text {i}",
            content_hash=hashlib.sha256(f"text {i}".encode()).hexdigest(),
        )
        for i in range(count)
    ]
    Document.objects.bulk_create(documents)
    ids = [doc.pk for doc in documents]
    Document.objects.for_tenant(tenant).filter(pk__in=ids).update(
        updated_at=timezone.now() - timedelta(seconds=age_seconds)
    )
    return ids


class _Clock:
    def __init__(self, monkeypatch) -> None:
        self.offset = timedelta()
        real_now = timezone.now
        monkeypatch.setattr(timezone, "now", lambda: real_now() + self.offset)

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def _sweep(capture) -> int:
    with capture(execute=True):
        return services.documents_recover_stalled()


@pytest.mark.django_db
def test_a_backlog_hours_long_is_never_queued_again(tenant, settings, monkeypatch, django_capture_on_commit_callbacks):
    broker = _Broker(monkeypatch)
    clock = _Clock(monkeypatch)
    _backlog(tenant, BACKLOG, age_seconds=settings.INGEST_QUEUED_STALE_SECONDS + 60)
    # Beat runs the sweep every minute; the workers are busy with the backlog and never reach the marker.
    for _ in range(int(3 * settings.INGEST_QUEUED_STALE_SECONDS / 60)):
        assert _sweep(django_capture_on_commit_callbacks) == 0
        clock.advance(60)
    assert broker.documents == []
    # One marker, then one more for each stale period it stayed unseen (it may have been lost with the broker).
    assert len(broker.markers) == 3


@pytest.mark.django_db
def test_documents_whose_messages_were_lost_are_queued_again_once_the_marker_is_taken(
    tenant, settings, monkeypatch, django_capture_on_commit_callbacks
):
    broker = _Broker(monkeypatch)
    clock = _Clock(monkeypatch)
    lost = _backlog(tenant, BACKLOG, age_seconds=settings.INGEST_QUEUED_STALE_SECONDS + 60)
    assert _sweep(django_capture_on_commit_callbacks) == 0
    clock.advance(30)
    queued_after_the_marker = _backlog(tenant, 5, age_seconds=0)
    broker.take_marker()
    clock.advance(settings.INGEST_QUEUED_STALE_SECONDS + 60)  # the later ones are stale now too

    assert _sweep(django_capture_on_commit_callbacks) == BACKLOG
    assert sorted(broker.documents) == sorted(lost)  # once each; the later five may still wait behind the marker
    assert not set(queued_after_the_marker) & set(broker.documents)
    assert len(broker.markers) == 2  # a new marker for the five
    assert _sweep(django_capture_on_commit_callbacks) == 0  # requeued ones are fresh again: no second copy


@pytest.mark.django_db
def test_a_dead_run_is_queued_again_at_once_whatever_the_queue_holds(
    tenant, monkeypatch, django_capture_on_commit_callbacks
):
    broker = _Broker(monkeypatch)
    kb = kb_make(tenant, name="dead")
    dead = Document.objects.create(
        tenant=tenant,
        knowledge_base=kb,
        title="dead",
        source_text="text",
        status=DocumentStatus.EMBEDDING,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    assert _sweep(django_capture_on_commit_callbacks) == 1
    assert broker.documents == [dead.pk] and broker.markers == []


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_with_a_real_worker_a_lost_message_is_recovered_through_the_marker(
    celery_worker_process, milvus_server, tenant, settings, django_capture_on_commit_callbacks
):
    ids = _backlog(tenant, 3, age_seconds=settings.INGEST_QUEUED_STALE_SECONDS + 60)  # queued, messages never sent
    marker = IngestQueueMarker.objects.filter(pk=1).first()
    seen_before = marker.seen_at_sent if marker else None
    with django_capture_on_commit_callbacks(execute=True):
        assert services.documents_recover_stalled() == 0
    sent_at = IngestQueueMarker.objects.get(pk=1).sent_at
    wait_for(
        lambda: IngestQueueMarker.objects.get(pk=1).seen_at_sent == sent_at,
        timeout=60,
        what="the worker to take the queue marker",
        worker=celery_worker_process,
    )
    assert seen_before != sent_at
    with django_capture_on_commit_callbacks(execute=True):
        assert services.documents_recover_stalled() == 3
    wait_for(
        lambda: (
            set(Document.objects.for_tenant(tenant).filter(pk__in=ids).values_list("status", flat=True))
            == {DocumentStatus.INDEXED}
        ),
        timeout=120,
        what="the recovered documents to be indexed",
        worker=celery_worker_process,
    )
