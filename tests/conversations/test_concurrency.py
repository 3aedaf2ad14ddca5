"""Concurrent turns on one conversation: the conversation row is locked inside each turn's write transaction, so
every turn lands with its own number and nothing is lost (PostgreSQL under CI; SQLite serialises writers)."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from conversations.models import ConsumedItem, Conversation, DedupEvent, Turn
from conversations.services import conversation_create, dedup_policy_update, turn_ask
from tests.conversations.helpers import indexed_kb

QUESTIONS = [
    "How do I reset my password?",
    "How much does the Team plan cost?",
    "Who can see the audit log?",
    "How are API keys revoked?",
    "Which single sign-on protocols are supported?",
    "How do I export a report as CSV?",
]


@pytest.mark.django_db(transaction=True)
def test_concurrent_turns_on_one_conversation_all_land(redis_available, milvus_server, tenant):
    kb = indexed_kb(tenant)
    conversation = conversation_create(tenant=tenant, knowledge_base_id=kb.pk)
    turn_ask(tenant=tenant, conversation_id=conversation.pk, question="hello")  # warm the model and intents
    barrier = threading.Barrier(len(QUESTIONS))
    errors: list[BaseException] = []

    def worker(question: str) -> None:
        try:
            barrier.wait(timeout=30)
            turn_ask(tenant=tenant, conversation_id=conversation.pk, question=question)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(q,)) for q in QUESTIONS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    turns = list(Turn.objects.for_tenant(tenant).filter(conversation=conversation).order_by("number"))
    assert [t.number for t in turns] == list(range(1, len(QUESTIONS) + 2))
    assert sorted(t.question for t in turns[1:]) == sorted(QUESTIONS)
    assert Conversation.objects.for_tenant(tenant).get(pk=conversation.pk).turn_count == len(QUESTIONS) + 1
    assert DedupEvent.objects.for_tenant(tenant).filter(conversation_ref=conversation.pk).count() == len(QUESTIONS) + 1
    shown_docs = {doc_id for t in turns for doc_id in (info["document_id"] for info in t.source_chunks.values())}
    consumed_docs = set(
        ConsumedItem.objects.for_tenant(tenant)
        .filter(conversation=conversation, kind="doc")
        .values_list("item_id", flat=True)
    )
    assert consumed_docs == shown_docs
    # Each consumed item carries the last turn that showed it.
    for item in ConsumedItem.objects.for_tenant(tenant).filter(conversation=conversation, kind="chunk"):
        showing = [t.number for t in turns if item.item_id in t.source_chunk_ids]
        assert item.turn_number == max(showing)


@pytest.mark.django_db(transaction=True)
def test_a_hit_whose_pair_is_purged_before_the_commit_still_lands(redis_available, milvus_server, tenant, monkeypatch):
    """The purge deletes the matched pair's conversation (from another connection, committed) after the decision and
    before the turn's write: the deferred foreign-key check fails at COMMIT, and the turn is written again without
    naming the vanished pair, instead of the request ending in a 500."""
    from conversations.turn import turn_write

    dedup_policy_update(tenant=tenant, scope="user")
    kb = indexed_kb(tenant)
    first_conversation = conversation_create(tenant=tenant, knowledge_base_id=kb.pk, user_id="u1")
    first = turn_ask(tenant=tenant, conversation_id=first_conversation.pk, question="How do I reset my password?")
    second_conversation = conversation_create(tenant=tenant, knowledge_base_id=kb.pk, user_id="u1")

    real_write = turn_write._turn_write
    purges: list[int] = []

    def purge_then_write(record, **kwargs):
        if not purges:

            def purge() -> None:
                try:
                    purges.append(Conversation.objects.unscoped().filter(pk=first_conversation.pk).delete()[0])
                finally:
                    connections.close_all()

            thread = threading.Thread(target=purge)
            thread.start()
            thread.join(timeout=30)
        return real_write(record, **kwargs)

    monkeypatch.setattr(turn_write, "_turn_write", purge_then_write)
    outcome = turn_ask(tenant=tenant, conversation_id=second_conversation.pk, question="How can I reset my password?")

    assert purges and purges[0] > 0  # the first conversation really went, with its turn
    assert not Turn.objects.for_tenant(tenant).filter(pk=first.turn.pk).exists()
    assert outcome.action == "served_cached"
    assert outcome.answer == first.turn.answer
    turn = Turn.objects.for_tenant(tenant).get(pk=outcome.turn.pk)
    assert (turn.answer, turn.matched_turn_id, turn.answer_origin_id) == (first.turn.answer, None, None)
    event = DedupEvent.objects.for_tenant(tenant).get(turn_ref=turn.pk)
    assert (event.action, event.matched_turn_id, event.matched_turn_ref) == ("served_cached", None, first.turn.pk)
