"""Expired conversations are purged with their turns and consumed items; the audit log stays."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.models import ConsumedItem, Conversation, DedupEvent, Turn
from conversations.services import conversations_purge_expired
from conversations.tasks import conversations_purge_expired_task
from retrieval.embeddings import model_id
from retrieval.models import KnowledgeBase
from tests.conversations.helpers import indexed_question_turn_ids

pytestmark = pytest.mark.django_db


def _conversation(tenant, kb, *, expires_in: timedelta) -> Conversation:
    conversation = Conversation.objects.create(tenant=tenant, knowledge_base=kb, expires_at=timezone.now() + expires_in)
    turn = Turn.objects.create(
        tenant=tenant,
        conversation=conversation,
        knowledge_base=kb,
        number=1,
        question="q",
        question_vector=b"\x00\x00\x00\x00",
        decision="answered",
    )
    ConsumedItem.objects.create(tenant=tenant, conversation=conversation, item_id=1, kind="doc", turn_number=1)
    DedupEvent.objects.create(
        tenant=tenant,
        conversation=conversation,
        conversation_ref=conversation.pk,
        turn=turn,
        turn_ref=turn.pk,
        action="answered",
        scope="session",
        threshold=0.9,
        question_window=10,
        exclusion_window=5,
        granularity="doc",
    )
    return conversation


def test_purge_deletes_only_expired_and_keeps_audit_events(milvus_server, tenant, other_tenant):
    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    other_kb = KnowledgeBase.objects.create(tenant=other_tenant, name="kb")
    expired = _conversation(tenant, kb, expires_in=timedelta(seconds=-1))
    other_expired = _conversation(other_tenant, other_kb, expires_in=timedelta(minutes=-5))
    live = _conversation(tenant, kb, expires_in=timedelta(hours=1))

    assert conversations_purge_expired_task.apply().get() == 2
    assert list(Conversation.objects.unscoped().values_list("pk", flat=True)) == [live.pk]
    assert Turn.objects.unscoped().filter(conversation_id__in=[expired.pk, other_expired.pk]).count() == 0
    assert ConsumedItem.objects.unscoped().count() == 1
    kept = DedupEvent.objects.for_tenant(tenant).get(conversation_ref=expired.pk)
    assert kept.conversation_id is None and kept.turn_id is None and kept.turn_ref is not None
    assert conversations_purge_expired() == 0  # idempotent


def test_expired_conversation_refuses_new_turns_with_410(api_client, tenant):
    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    expired = _conversation(tenant, kb, expires_in=timedelta(seconds=-1))
    response = api_client.post(f"/api/v1/conversations/{expired.pk}/messages/", {"question": "hi"}, format="json")
    assert response.status_code == 410 and "expired" in response.json()["message"]


def test_a_ttl_change_moves_the_expiry_of_live_conversations(milvus_server, api_client, tenant, other_tenant):
    """A conversation expires the policy's TTL after its last turn. Lowered from a day to a minute, a conversation
    idle for two minutes is expired at once (410, and purged), instead of serving its stored answers for the rest
    of the day; one active just now is not, and another tenant's conversations keep their expiry."""
    from conversations.services import dedup_policy_update

    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    other_kb = KnowledgeBase.objects.create(tenant=other_tenant, name="kb")
    idle = _conversation(tenant, kb, expires_in=timedelta(days=1) - timedelta(minutes=2))
    Conversation.objects.for_tenant(tenant).filter(pk=idle.pk).update(
        last_active_at=timezone.now() - timedelta(minutes=2), turn_count=1
    )
    active = _conversation(tenant, kb, expires_in=timedelta(days=1))
    others = _conversation(other_tenant, other_kb, expires_in=timedelta(days=1))
    Conversation.objects.for_tenant(other_tenant).filter(pk=others.pk).update(
        last_active_at=timezone.now() - timedelta(minutes=2)
    )

    dedup_policy_update(tenant=tenant, ttl_seconds=60)
    response = api_client.post(f"/api/v1/conversations/{idle.pk}/messages/", {"question": "hi"}, format="json")
    assert response.status_code == 410
    assert conversations_purge_expired() == 1
    assert set(Conversation.objects.unscoped().values_list("pk", flat=True)) == {active.pk, others.pk}
    active.refresh_from_db()
    assert active.expires_at == active.last_active_at + timedelta(seconds=60)

    dedup_policy_update(tenant=tenant, ttl_seconds=7200)
    active.refresh_from_db()
    assert active.expires_at == active.last_active_at + timedelta(hours=2)


def test_a_conversation_a_turn_revives_during_the_purge_keeps_its_question_vectors(tenant, monkeypatch):
    """A turn commits on an expired conversation (it passed the expiry check just before) between the purge reading
    its batch and deleting it: the turn moved the expiry, so the delete leaves the conversation. Its questions must
    stay in the tenant-scope index, its hot copy in Redis, and the purge must not count it as deleted."""
    from conversations.models import DedupPolicy
    from conversations.turn import retention as services
    from retrieval import question_index

    DedupPolicy.objects.for_tenant(tenant).update(scope="tenant")
    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    revived = _conversation(tenant, kb, expires_in=timedelta(seconds=-1))
    expired = _conversation(tenant, kb, expires_in=timedelta(seconds=-1))
    revived_turn = Turn.objects.for_tenant(tenant).get(conversation=revived)
    expired_turn = Turn.objects.for_tenant(tenant).get(conversation=expired)

    deleted_vectors: list[int] = []
    monkeypatch.setattr(
        question_index,
        "question_vectors_delete",
        lambda *, tenant_id, turn_ids: deleted_vectors.extend(turn_ids),
    )
    forgotten: list[int] = []
    monkeypatch.setattr(
        services, "state_forget", lambda *, tenant_id, conversation_id: forgotten.append(conversation_id)
    )
    real_turn_model = services.Turn

    class TurnLandsMeanwhile:
        """The purge's read of the batch's turns, with a turn committing on `revived` just after it."""

        class objects:
            @staticmethod
            def unscoped():
                later = timezone.now() + timedelta(hours=1)
                Conversation.objects.for_tenant(tenant).filter(pk=revived.pk).update(expires_at=later)
                return real_turn_model.objects.unscoped()

    monkeypatch.setattr(services, "Turn", TurnLandsMeanwhile)
    assert conversations_purge_expired() == 1
    assert Conversation.objects.for_tenant(tenant).filter(pk=revived.pk).exists()
    assert not Conversation.objects.for_tenant(tenant).filter(pk=expired.pk).exists()
    assert deleted_vectors == [expired_turn.pk] and revived_turn.pk not in deleted_vectors
    assert forgotten == [expired.pk]


def _indexed_question(tenant, kb, conversation: Conversation) -> int:
    """Index the conversation's turn in the tenant-scope question collection (as a turn under tenant scope is)."""
    from retrieval import question_index

    turn = Turn.objects.for_tenant(tenant).get(conversation=conversation)
    vector = [0.0] * kb.embedding_dimension
    vector[turn.pk % kb.embedding_dimension] = 1.0
    question_index.question_vectors_upsert(
        rows=[
            question_index.QuestionVector(
                turn_id=turn.pk, tenant_id=tenant.pk, knowledge_base_id=kb.pk, created_ts=0, vector=vector
            )
        ],
        model=model_id(),
    )
    return turn.pk


def test_the_purge_deletes_question_vectors_indexed_under_a_scope_the_tenant_left(milvus_server, tenant):
    """Questions indexed while the tenant used tenant scope stay in Milvus after it moves to session scope: the purge
    skipped their vectors then, and they took candidate slots of every later tenant-scope search for good."""
    from conversations.models import DedupPolicy

    DedupPolicy.objects.for_tenant(tenant).update(scope="tenant")
    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    expired = _conversation(tenant, kb, expires_in=timedelta(seconds=-1))
    live = _conversation(tenant, kb, expires_in=timedelta(hours=1))
    expired_turn = _indexed_question(tenant, kb, expired)
    live_turn = _indexed_question(tenant, kb, live)
    DedupPolicy.objects.for_tenant(tenant).update(scope="session")

    assert conversations_purge_expired() == 1
    assert indexed_question_turn_ids(tenant, kb) == {live_turn}
    assert expired_turn not in indexed_question_turn_ids(tenant, kb)


def test_milvus_down_during_the_purge_keeps_the_conversations_for_the_next_run(
    milvus_server, tenant, other_tenant, monkeypatch
):
    """The purge used to delete the rows, log Milvus's refusal and move on: nothing recorded which vectors were left,
    so no later run deleted them. Now a conversation whose question vectors cannot be deleted is kept (still expired,
    refused with 410) and the next run deletes both; another tenant's purge goes on meanwhile."""
    from conversations.models import DedupPolicy
    from retrieval import question_index, vectorstore

    DedupPolicy.objects.for_tenant(tenant).update(scope="tenant")
    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    expired = _conversation(tenant, kb, expires_in=timedelta(seconds=-1))
    expired_turn = _indexed_question(tenant, kb, expired)
    other_expired = _conversation(
        other_tenant, KnowledgeBase.objects.create(tenant=other_tenant, name="kb"), expires_in=timedelta(seconds=-1)
    )
    real_delete = question_index.question_vectors_delete

    def unavailable_for_tenant(*, tenant_id, **kwargs) -> None:
        if tenant_id == tenant.pk:
            raise vectorstore.VectorStoreUnavailable("Milvus is down")
        real_delete(tenant_id=tenant_id, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(question_index, "question_vectors_delete", unavailable_for_tenant)
        assert conversations_purge_expired(batch_size=1) == 1
    assert not Conversation.objects.for_tenant(other_tenant).filter(pk=other_expired.pk).exists()
    assert Conversation.objects.for_tenant(tenant).filter(pk=expired.pk).exists()
    assert Turn.objects.for_tenant(tenant).filter(pk=expired_turn).exists()

    assert conversations_purge_expired() == 1
    assert not Conversation.objects.for_tenant(tenant).filter(pk=expired.pk).exists()
    assert expired_turn not in indexed_question_turn_ids(tenant, kb)


def _tenant_scope_turn(tenant) -> tuple[KnowledgeBase, int]:
    from conversations.models import DedupPolicy

    DedupPolicy.objects.for_tenant(tenant).update(scope="tenant")
    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    conversation = _conversation(tenant, kb, expires_in=timedelta(hours=1))
    return kb, _indexed_question(tenant, kb, conversation)


def test_an_admin_deletion_rolled_back_keeps_its_turns_question_vector(
    milvus_server, tenant, django_capture_on_commit_callbacks
):
    """The admin's delete view runs the deletion inside its own transaction. The question vector used to be deleted
    before that transaction committed: had it rolled back, the turn would stay with its vector gone (a duplicate
    missed for good). The vector now goes on commit, so a rollback keeps both."""
    from django.db import transaction

    from conversations.services import conversation_records_delete

    kb, turn_id = _tenant_scope_turn(tenant)

    class AdminFailed(Exception):
        pass

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(AdminFailed), transaction.atomic():
        conversation_records_delete(tenant=tenant, turn_ids=[turn_id])
        raise AdminFailed
    assert Turn.objects.for_tenant(tenant).filter(pk=turn_id).exists()
    assert turn_id in indexed_question_turn_ids(tenant, kb)

    with django_capture_on_commit_callbacks(execute=True):
        conversation_records_delete(tenant=tenant, turn_ids=[turn_id])
    assert not Turn.objects.for_tenant(tenant).filter(pk=turn_id).exists()
    assert turn_id not in indexed_question_turn_ids(tenant, kb)


def test_milvus_down_while_an_admin_deletes_a_turn_leaves_its_question_vector_to_a_worker(
    milvus_server, tenant, monkeypatch, django_capture_on_commit_callbacks
):
    """An admin's deletion used to log Milvus's refusal and forget the vector: it stayed in the tenant-scope index for
    good, taking a candidate slot of every search. The rows still go at once (the admin asked for that); the vector's
    deletion is queued for a worker, which retries until Milvus answers."""
    from conversations import tasks
    from conversations.services import conversation_records_delete
    from retrieval import question_index, vectorstore

    kb, turn_id = _tenant_scope_turn(tenant)
    queued: list[tuple] = []
    monkeypatch.setattr(
        tasks.question_vectors_delete_task, "delay", lambda *args, **kwargs: queued.append((args, kwargs))
    )

    def down(**kwargs) -> None:
        raise vectorstore.VectorStoreUnavailable("Milvus is down")

    with monkeypatch.context() as patch:
        patch.setattr(question_index, "question_vectors_delete", down)
        with django_capture_on_commit_callbacks(execute=True):
            conversation_records_delete(tenant=tenant, turn_ids=[turn_id])
    assert not Turn.objects.for_tenant(tenant).filter(pk=turn_id).exists()
    assert turn_id in indexed_question_turn_ids(tenant, kb)
    assert len(queued) == 1

    args, kwargs = queued[0]
    tasks.question_vectors_delete_task.apply(args=args, kwargs=kwargs).get()
    assert turn_id not in indexed_question_turn_ids(tenant, kb)
