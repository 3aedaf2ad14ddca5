"""Claiming: a run takes only queued documents or ones whose run died (lease expired); repeated deaths end the
document as failed; recovery requeues exactly the stalled ones. No worker needed: these paths stop before
parsing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from retrieval.models import Document, DocumentStatus
from retrieval.services import (
    documents_fail_after_retries,
    documents_index,
    documents_recover_stalled,
    ingest_queue_marker_seen,
)
from tests.retrieval.factories import kb_make

pytestmark = pytest.mark.django_db


def _document(tenant, **fields) -> Document:
    kb = kb_make(tenant, name=f"kb-{Document.objects.unscoped().count()}")
    return Document.objects.create(tenant=tenant, knowledge_base=kb, title="t", source_text="text", **fields)


def test_a_live_run_is_not_taken_over(tenant):
    live = _document(
        tenant,
        status=DocumentStatus.EMBEDDING,
        claim_token="other",
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    run = documents_index(tenant_id=tenant.pk, document_ids=[live.pk])
    assert run.claimed == []
    live.refresh_from_db()
    assert (live.status, live.claim_token, live.attempts) == (DocumentStatus.EMBEDDING, "other", 0)


def test_finished_documents_are_not_run_again(tenant):
    for status in (DocumentStatus.INDEXED, DocumentStatus.FAILED):
        document = _document(tenant, status=status)
        assert documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).claimed == []


def test_another_tenants_document_is_never_claimed(tenant, other_tenant):
    theirs = _document(other_tenant)
    assert documents_index(tenant_id=tenant.pk, document_ids=[theirs.pk]).claimed == []
    theirs.refresh_from_db()
    assert theirs.status == DocumentStatus.QUEUED and theirs.attempts == 0


def test_a_document_that_keeps_killing_its_worker_ends_failed(tenant, settings):
    document = _document(
        tenant,
        status=DocumentStatus.EMBEDDING,
        attempts=settings.INGEST_MAX_ATTEMPTS,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    assert documents_index(tenant_id=tenant.pk, document_ids=[document.pk]).claimed == []
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED
    assert f"interrupted {settings.INGEST_MAX_ATTEMPTS} times" in document.error_message


def test_recovery_requeues_only_stalled_documents(tenant, settings, django_capture_on_commit_callbacks):
    now = timezone.now()
    dead = _document(tenant, status=DocumentStatus.CHUNKING, lease_expires_at=now - timedelta(seconds=1))
    _document(tenant, status=DocumentStatus.CHUNKING, lease_expires_at=now + timedelta(minutes=5))  # alive
    _document(tenant)  # freshly queued: its task is on its way
    lost = _document(tenant)
    Document.objects.for_tenant(tenant).filter(pk=lost.pk).update(
        updated_at=now - timedelta(seconds=settings.INGEST_QUEUED_STALE_SECONDS + 1)
    )
    _document(tenant, status=DocumentStatus.INDEXED)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert documents_recover_stalled() == 1  # the dead run; the lost task may still wait in the broker
    assert len(callbacks) == 2  # the dead run's task, and the queue marker that tells whether the other is lost
    ingest_queue_marker_seen(sent_at=timezone.now())  # a worker took the marker: every earlier message is taken
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert documents_recover_stalled() == 2  # the lost one, and the dead one again (it stays until claimed)
    assert len(callbacks) == 1  # one task for both documents of the tenant
    with django_capture_on_commit_callbacks(execute=False):
        assert documents_recover_stalled() == 1  # the lost one was stamped; the dead one stays until claimed
    dead.refresh_from_db()
    assert dead.status == DocumentStatus.CHUNKING


def test_a_task_giving_up_fails_only_the_documents_still_on_its_own_queueing(tenant):
    mine = _document(tenant, queue_token="a" * 32)
    queued_again = _document(tenant, queue_token="b" * 32)
    from_before_tokens = _document(tenant)
    running = _document(tenant, status=DocumentStatus.PARSING, queue_token="a" * 32)
    ids = [mine.pk, queued_again.pk, from_before_tokens.pk, running.pk]

    assert documents_fail_after_retries(
        tenant_id=tenant.pk, document_ids=ids, reason="Milvus down", queue_token="a" * 32
    )
    assert documents_fail_after_retries(tenant_id=tenant.pk, document_ids=ids, reason="Milvus down", queue_token="")

    statuses = dict(Document.objects.for_tenant(tenant).values_list("pk", "status"))
    assert statuses == {
        mine.pk: DocumentStatus.FAILED,
        queued_again.pk: DocumentStatus.QUEUED,
        from_before_tokens.pk: DocumentStatus.FAILED,  # a task sent before tokens carries none
        running.pk: DocumentStatus.PARSING,
    }


def test_recovery_queues_stalled_documents_afresh_so_an_older_task_cannot_fail_them(
    tenant, settings, django_capture_on_commit_callbacks
):
    lost = _document(tenant, queue_token="a" * 32)
    Document.objects.for_tenant(tenant).filter(pk=lost.pk).update(
        updated_at=timezone.now() - timedelta(seconds=settings.INGEST_QUEUED_STALE_SECONDS + 1)
    )
    ingest_queue_marker_seen(sent_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=False):
        assert documents_recover_stalled() == 1
    lost.refresh_from_db()
    assert lost.queue_token not in ("", "a" * 32)
    assert not documents_fail_after_retries(
        tenant_id=tenant.pk, document_ids=[lost.pk], reason="Milvus down", queue_token="a" * 32
    )
    assert documents_fail_after_retries(
        tenant_id=tenant.pk, document_ids=[lost.pk], reason="Milvus down", queue_token=lost.queue_token
    )
