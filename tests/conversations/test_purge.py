"""Expired conversations are purged with their turns and consumed items; the audit log stays."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.models import ConsumedItem, Conversation, DedupEvent, Turn
from conversations.services import conversations_purge_expired
from conversations.tasks import conversations_purge_expired_task
from retrieval.models import KnowledgeBase

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


def test_purge_deletes_only_expired_and_keeps_audit_events(tenant, other_tenant):
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


def test_a_ttl_change_moves_the_expiry_of_live_conversations(api_client, tenant, other_tenant):
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
    from conversations import services
    from conversations.models import DedupPolicy
    from retrieval import vectorstore

    DedupPolicy.objects.for_tenant(tenant).update(scope="tenant")
    kb = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    revived = _conversation(tenant, kb, expires_in=timedelta(seconds=-1))
    expired = _conversation(tenant, kb, expires_in=timedelta(seconds=-1))
    revived_turn = Turn.objects.for_tenant(tenant).get(conversation=revived)
    expired_turn = Turn.objects.for_tenant(tenant).get(conversation=expired)

    deleted_vectors: list[int] = []
    monkeypatch.setattr(
        vectorstore,
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

        class objects:  # noqa: N801
            @staticmethod
            def unscoped():  # noqa: ANN205
                later = timezone.now() + timedelta(hours=1)
                Conversation.objects.for_tenant(tenant).filter(pk=revived.pk).update(expires_at=later)
                return real_turn_model.objects.unscoped()

    monkeypatch.setattr(services, "Turn", TurnLandsMeanwhile)
    assert conversations_purge_expired() == 1
    assert Conversation.objects.for_tenant(tenant).filter(pk=revived.pk).exists()
    assert not Conversation.objects.for_tenant(tenant).filter(pk=expired.pk).exists()
    assert deleted_vectors == [expired_turn.pk] and revived_turn.pk not in deleted_vectors
    assert forgotten == [expired.pk]
